"""OCI content behind a gate, with the real source-controller, kustomize-controller and
helm-controller reading from an OCI registry on loopback: a new artifact tag for a gated
OCIRepository, and a new chart version from an OCI Helm repository, each wait and land when
the gate opens."""

from __future__ import annotations

from tests.realflux.conftest import condition
from tests.realflux.servers import configmap
from tests.realflux.test_helm import helm_release, helm_repository, wait_data
from tests.realflux.test_kustomization import gate, kustomization

GATED = {"gating.toolkit.fluxcd.io/gates": "freeze"}


def test_a_new_oci_artifact_waits_for_the_gate(cluster, registry):
    ns = cluster.namespace
    repo = f"{ns}/manifests"
    registry.push_manifests(repo, "1.0.0", {"configmap.yaml": configmap("app", ns, {"version": "1"})})
    cluster.apply(
        gate("freeze", ns),
        {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "OCIRepository",
            "metadata": {"name": "manifests", "annotations": dict(GATED)},
            "spec": {
                "interval": "3s",
                "url": f"oci://{registry.address}/{repo}",
                "insecure": True,
                "ref": {"semver": ">=1.0.0"},
            },
        },
        kustomization(
            "app", "./", "manifests", sourceRef={"kind": "OCIRepository", "name": "manifests"}, interval="5s"
        ),
    )
    assert cluster.wait(lambda: cluster.data("app"), lambda d: d == {"version": "1"}) == {"version": "1"}

    assert cluster.gate("close", "freeze", "-n", ns).returncode == 0
    registry.push_manifests(repo, "1.1.0", {"configmap.yaml": configmap("app", ns, {"version": "2"})})
    blocked = cluster.wait(
        lambda: cluster.get("ocirepository", "manifests"),
        lambda s: condition(s, "Blocked").get("status") == "True",
    )
    assert condition(blocked, "Blocked").get("reason") == "GateClosed", blocked.get("status")
    assert "1.1.0" in condition(blocked, "Blocked")["message"]
    assert blocked["status"]["artifact"]["revision"].startswith("1.0.0@")
    assert cluster.data("app") == {"version": "1"}

    assert cluster.gate("open", "freeze", "-n", ns).returncode == 0
    assert cluster.wait(lambda: cluster.data("app"), lambda d: d == {"version": "2"}, timeout=60) == {
        "version": "2"
    }


def test_a_new_oci_chart_waits_for_the_gate(cluster, registry):
    ns = cluster.namespace
    registry.push_chart(f"{ns}/charts", "demo", "1.0.0")
    cluster.apply(
        gate("freeze", ns),
        helm_repository("charts", f"oci://{registry.address}/{ns}/charts", type="oci", insecure=True),
        helm_release("app", "demo", "charts"),
    )
    approved = {"chartVersion": "1.0.0", "greeting": "hello", "mode": "none"}
    assert wait_data(cluster, "app", approved) == approved

    assert cluster.gate("close", "freeze", "-n", ns).returncode == 0
    registry.push_chart(f"{ns}/charts", "demo", "1.1.0")
    chart = cluster.wait(
        lambda: cluster.get("helmchart", f"{ns}-app"),
        lambda c: condition(c, "Blocked").get("status") == "True",
    )
    assert condition(chart, "Blocked").get("reason") == "GateClosed", chart.get("status")
    assert chart["status"]["artifact"]["revision"].startswith("1.0.0")
    assert cluster.data("app-settings") == approved

    assert cluster.gate("open", "freeze", "-n", ns).returncode == 0
    released = {"chartVersion": "1.1.0", "greeting": "hello", "mode": "none"}
    assert wait_data(cluster, "app", released) == released
