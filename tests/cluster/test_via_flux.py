"""Installed by Flux, the way Flux users install add-ons: the chart packaged and pushed to an OCI
registry with the real helm, a HelmRelease with `chartRef` to an OCIRepository, reconciled by the
real source-controller and helm-controller into the real cluster; then upgraded to a new chart
version under write load, healed by Flux when its Deployment is deleted, and uninstalled by
deleting the HelmRelease. Runs after test_uninstall (which leaves the kubectl install in place:
it is removed first)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.cluster.conftest import FIGURES, NS, no_webhook_pod, wait_webhook_ready
from tests.cluster.load import steady_load
from tests.e2e.controlplane import ROOT
from tests.polling import until
from tests.realflux.conftest import condition, ready
from tests.realflux.flux import FluxControllers, flux_dir, tools_dir
from tests.realflux.servers import Registry

CHART = ROOT / "charts" / "gate-admission"
RATE = 24


def helm_binary() -> Path:
    if os.environ.get("HELM_BINARIES"):
        return Path(os.environ["HELM_BINARIES"]) / "helm"
    out = subprocess.run([str(ROOT / "hack" / "go-binaries.sh"), "helm"], check=True, capture_output=True,
                         text=True).stdout.strip()
    return Path(out) / "helm"


def publish(registry: Registry, workdir: Path, version: str) -> None:
    """`helm package` the chart at ``version`` (its image tag the same) and `helm push` it."""
    copy = workdir / f"chart-{version}" / "gate-admission"
    shutil.copytree(CHART, copy)
    meta = yaml.safe_load((copy / "Chart.yaml").read_text())
    (copy / "Chart.yaml").write_text(yaml.safe_dump({**meta, "version": version, "appVersion": version}))
    values = yaml.safe_load((copy / "values.yaml").read_text())
    values["image"]["tag"] = version
    (copy / "values.yaml").write_text(yaml.safe_dump(values, sort_keys=False))
    helm = str(helm_binary())
    env = {**os.environ, **{f"HELM_{k}_HOME": str(workdir / f"helm-{k.lower()}") for k in ("CONFIG", "CACHE", "DATA")}}
    packaged = subprocess.run([helm, "package", str(copy), "-d", str(copy.parent)], capture_output=True, text=True,
                              env=env, timeout=60)
    assert packaged.returncode == 0, packaged.stderr
    pushed = subprocess.run([helm, "push", str(copy.parent / f"gate-admission-{version}.tgz"),
                             f"oci://{registry.address}/charts", "--plain-http"], capture_output=True, text=True,
                            env=env, timeout=60)
    assert pushed.returncode == 0, pushed.stderr


def release_objects(registry: Registry, version: str) -> list[dict]:
    return [
        {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "OCIRepository",
         "metadata": {"name": "gate-admission", "namespace": "flux-system"},
         "spec": {"interval": "5s", "url": f"oci://{registry.address}/charts/gate-admission", "insecure": True,
                  "ref": {"tag": version},
                  "layerSelector": {"mediaType": "application/vnd.cncf.helm.chart.content.v1.tar+gzip",
                                    "operation": "copy"}}},
        {"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
         "metadata": {"name": "gate-admission", "namespace": "flux-system"},
         "spec": {"interval": "10s", "releaseName": "gate-admission", "targetNamespace": NS,
                  "chartRef": {"kind": "OCIRepository", "name": "gate-admission"},
                  "install": {"createNamespace": True}, "driftDetection": {"mode": "enabled"},
                  "timeout": "4m"}},
    ]


def release(cluster) -> dict:
    out = cluster.kubectl("get", "helmrelease", "gate-admission", "-n", "flux-system", "-o", "json", check=False)
    return json.loads(out.stdout) if out.returncode == 0 else {}


def chart_version(hr: dict) -> str:
    """The version the release runs (from an OCIRepository Flux appends the digest: 0.1.0+a6a6...)."""
    return hr.get("status", {}).get("history", [{}])[0].get("chartVersion", "").split("+")[0]


def released(cluster, version: str) -> dict:
    seen = until(lambda: release(cluster), lambda hr: ready(hr) == "True" and chart_version(hr) == version,
                 timeout=300, interval=1)
    assert ready(seen) == "True", condition(seen, "Ready")
    return seen


@pytest.fixture(scope="module")
def flux_installed(cluster, installed, tmp_path_factory):
    """The kubectl install removed, then the chart installed by Flux from an OCI registry."""
    removed = cluster.kubectl("delete", "-k", str(ROOT / "manifests"), "--timeout=180s", check=False, timeout=240)
    assert removed.returncode == 0, removed.stderr
    workdir = tmp_path_factory.mktemp("via-flux")
    registry = Registry(tools_dir() / "registry", workdir)
    controllers = FluxControllers(cluster, flux_dir(), workdir)
    try:
        controllers.start("source-controller", "helm-controller")
        publish(registry, workdir, "0.1.0")
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(release_objects(registry, "0.1.0")))
        released(cluster, "0.1.0")
        wait_webhook_ready(cluster)
        yield registry, workdir
    finally:
        controllers.stop()
        registry.stop()


@pytest.fixture(scope="module")
def load(cluster, flux_installed):
    with steady_load(cluster, "flux", RATE) as running:
        yield running


def test_flux_installs_the_chart_and_its_webhook_holds_gated_objects(cluster, flux_installed, load):
    installed = release(cluster)
    history = installed["status"]["history"][0]
    assert (history["chartName"], chart_version(installed), history["status"]) == ("gate-admission", "0.1.0", "deployed")
    FIGURES.append("via Flux: HelmRelease (chartRef: OCIRepository, pushed with helm push) installed and Ready")


def test_a_chart_upgrade_by_flux_fails_no_admission(cluster, flux_installed, load):
    registry, workdir = flux_installed
    subprocess.run(["docker", "tag", os.environ.get("GATE_IMAGE", "gate-admission:0.1.0"), "gate-admission:0.1.2"],
                   check=True, capture_output=True)
    cluster.load_docker_image("gate-admission:0.1.2")
    publish(registry, workdir, "0.1.2")
    with load.window("upgrade by Flux (chart 0.1.0 -> 0.1.2, a new image)") as window:
        cluster.kubectl("patch", "ocirepository", "gate-admission", "-n", "flux-system", "--type=merge",
                        "-p", '{"spec": {"ref": {"tag": "0.1.2"}}}')
        released(cluster, "0.1.2")
        cluster.kubectl("rollout", "status", "-n", NS, "deployment/gate-admission", "--timeout=300s", timeout=320)
        wait_webhook_ready(cluster)
        tail = len(window.outcomes) + 3 * RATE
        until(lambda: len(window.outcomes), lambda n: n >= tail, timeout=60, interval=0.2)
    FIGURES.append(window.summary())
    images = cluster.kubectl("get", "deployment", "gate-admission", "-n", NS, "-o",
                             "jsonpath={.spec.template.spec.containers[0].image}").stdout
    assert images == "gate-admission:0.1.2"
    assert not window.failed(), [(o.target.name, o.status, o.message[:200]) for o in window.failed()[:5]]


def test_flux_heals_a_deleted_webhook_deployment_and_gated_writes_fail_closed_meanwhile(cluster, flux_installed, load):
    with load.window("webhook Deployment deleted, restored by Flux") as window:
        cluster.kubectl("delete", "deployment", "gate-admission", "-n", NS, "--wait=false")
        gone = until(lambda: no_webhook_pod(cluster), bool, timeout=120, interval=0.5)
        assert gone
        restored = until(lambda: cluster.kubectl("get", "deployment", "gate-admission", "-n", NS, check=False).returncode,
                         lambda rc: rc == 0, timeout=180, interval=1)
        assert restored == 0, condition(release(cluster), "Ready")
        wait_webhook_ready(cluster)
        tail = len(window.outcomes) + 3 * RATE
        until(lambda: len(window.outcomes), lambda n: n >= tail, timeout=60, interval=0.2)
    FIGURES.append(window.summary())
    assert not [o for o in window.outcomes if o.kind == "wrong"]  # never a held write allowed
    assert all(o.kind == "ok" for o in window.outcomes if not o.target.gated)  # ungated writes never see us
    assert all(o.kind == "ok" for o in window.outcomes[-2 * RATE:])  # healed


def test_deleting_the_helm_release_uninstalls_and_leaves_no_webhook(cluster, flux_installed, load):
    cluster.kubectl("delete", "helmrelease", "gate-admission", "-n", "flux-system", "--timeout=180s", timeout=240)
    left = until(lambda: cluster.kubectl("get", "validatingwebhookconfigurations,mutatingwebhookconfigurations",
                                         "-o", "name").stdout, lambda out: "gate-admission" not in out, timeout=120)
    assert "gate-admission" not in left
    assert not cluster.kubectl("get", "deployments", "-n", NS, "-o", "name", check=False).stdout.strip()
