"""HelmReleases behind a closed gate, with the real source-controller and helm-controller: a new
chart version (`version: 1.x`), a `spec.values` change and a `valuesFrom` change each wait; the
generated HelmChart inherits the release's gates; charts from an OCI registry are held too."""

from __future__ import annotations

import time

from tests.conftest import REPORT
from tests.realflux.conftest import condition, ready
from tests.realflux.test_kustomization import gate

GATED = {"gating.toolkit.fluxcd.io/gates": "freeze"}


def helm_repository(name: str, url: str, **spec) -> dict:
    return {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "HelmRepository",
        "metadata": {"name": name},
        "spec": {"interval": "3s", "url": url, **spec},
    }


def helm_release(name: str, chart: str, repository: str, values: dict | None = None, **spec) -> dict:
    return {
        "apiVersion": "helm.toolkit.fluxcd.io/v2",
        "kind": "HelmRelease",
        "metadata": {"name": name, "annotations": dict(GATED)},
        "spec": {
            "interval": "10m",
            "chart": {
                "spec": {
                    "chart": chart,
                    "version": "1.x",
                    "interval": "3s",
                    "sourceRef": {"kind": "HelmRepository", "name": repository},
                }
            },
            "install": {"disableWait": True},
            "upgrade": {"disableWait": True},
            "values": values or {},
            **spec,
        },
    }


def release_data(cluster, release: str) -> dict | None:
    return cluster.data(f"{release}-settings")


def wait_data(cluster, release: str, expected: dict, timeout: float = 90) -> dict | None:
    return cluster.wait(lambda: release_data(cluster, release), lambda d: d == expected, timeout=timeout)


def held(cluster, release: str) -> dict:
    return cluster.wait(
        lambda: cluster.get("helmrelease", release),
        lambda r: condition(r, "Approved").get("status") == "False" or ready(r) == "False",
    )


def test_new_charts_and_values_wait_for_the_gate(cluster, charts):
    ns = cluster.namespace
    chart = f"demo-{ns}"
    charts.publish(chart, "1.0.0")
    cluster.apply(
        gate("freeze", ns),
        helm_repository("charts", charts.url),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "extra"}, "data": {"mode": "a"}},
        helm_release(
            "app",
            chart,
            "charts",
            {"greeting": "hello"},
            valuesFrom=[{"kind": "ConfigMap", "name": "extra", "valuesKey": "mode", "targetPath": "mode"}],
        ),
    )
    approved = {"chartVersion": "1.0.0", "greeting": "hello", "mode": "a"}
    assert wait_data(cluster, "app", approved) == approved
    assert cluster.gate("close", "freeze", "-n", ns).returncode == 0

    # A new chart version: held at the generated HelmChart, which inherits the release's gate.
    charts.publish(chart, "1.1.0")
    helm_chart = cluster.wait(
        lambda: cluster.get("helmchart", f"{ns}-app"),
        lambda c: condition(c, "Blocked").get("status") == "True",
    )
    assert condition(helm_chart, "Blocked").get("reason") == "GateClosed", helm_chart.get("status")
    assert "1.1.0" in condition(helm_chart, "Blocked")["message"]
    assert helm_chart["status"]["artifact"]["revision"] == "1.0.0"
    assert release_data(cluster, "app") == approved

    # New inline values are an edit of the release: refused at apply time.
    refused = cluster.plane.kubectl(
        "patch",
        "helmrelease",
        "app",
        "-n",
        ns,
        "--type=merge",
        "-p",
        '{"spec":{"values":{"greeting":"bonjour"}}}',
        check=False,
    )
    assert refused.returncode != 0 and "is held" in refused.stderr, refused.stderr
    # New values from a ConfigMap arrive without an edit: helm-controller's attempt is refused.
    cluster.plane.kubectl(
        "patch", "configmap", "extra", "-n", ns, "--type=merge", "-p", '{"data":{"mode":"b"}}'
    )
    cluster.plane.kubectl(
        "annotate",
        "--overwrite",
        "helmrelease",
        "app",
        "-n",
        ns,
        f"reconcile.fluxcd.io/requestedAt={time.time()}",
    )
    waiting = held(cluster, "app")
    assert condition(waiting, "Approved").get("reason") == "GateClosed", waiting.get("status")
    assert ready(waiting) == "False"
    assert release_data(cluster, "app") == approved

    opened = time.monotonic()
    assert cluster.gate("open", "freeze", "-n", ns).returncode == 0
    expected = {"chartVersion": "1.1.0", "greeting": "hello", "mode": "b"}
    landed = wait_data(cluster, "app", expected)
    assert landed == expected, cluster.get("helmrelease", "app").get("status")
    REPORT["real Flux: chart and values land after kubectl gate open"] = f"{time.monotonic() - opened:.1f}s"
