"""The real-cluster tier: the project's image as Pods of a real one-node cluster
(tests/cluster/node.py), installed the way the README says (`kubectl apply -k manifests/`),
then used and operated as a platform team would. Figures print at the end of the run."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.cluster.node import HostCluster, missing_prerequisites, node_binaries
from tests.e2e.conftest import BASE_OBJECTS, install_flux_crds
from tests.e2e.controlplane import ROOT, assets_dir
from tests.polling import until
from tests.processes import BIN

NS = "gate-admission-system"
# hack/test.sh sets this once it has prepared the machine (Docker, Debian's node packages): then a
# missing part fails the tier instead of skipping it.
REQUIRED = os.environ.get("FGA_CLUSTER") == "required"
FIGURES: list[str] = []


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/cluster/" in str(item.fspath):
            item.add_marker(pytest.mark.cluster)


def pytest_terminal_summary(terminalreporter):
    if FIGURES:
        terminalreporter.section("real cluster: figures")
        for line in FIGURES:
            terminalreporter.write_line(line)


def image() -> str:
    """The project image, built from the Dockerfile (hack/image.sh) unless $GATE_IMAGE names one."""
    if os.environ.get("GATE_IMAGE"):
        return os.environ["GATE_IMAGE"]
    return subprocess.run(
        [str(ROOT / "hack" / "image.sh")], check=True, capture_output=True, text=True
    ).stdout.strip()


# Package scope: the node (kubelet, containerd, its Pods) stops after the last test here, not at
# the end of the whole run, so it neither costs the other tiers CPU nor outlives them.
@pytest.fixture(scope="package")
def cluster(tmp_path_factory):
    missing = missing_prerequisites()
    if os.environ.get("KUBECONFIG") or missing:
        why = "$KUBECONFIG names a cluster" if not missing else "this machine lacks " + ", ".join(missing)
        if REQUIRED and missing:
            pytest.fail(f"the real-cluster tier cannot run: {why}")
        pytest.skip(f"the real-cluster tier runs its own node: {why}")
    workdir = tmp_path_factory.mktemp("node")
    node = HostCluster(workdir, assets_dir(), node_binaries())
    try:
        node.start()
        node.load_docker_image(image())
        yield node
    finally:
        node.stop()


@pytest.fixture(scope="package")
def installed(cluster):
    """`kubectl apply -k manifests/`, as the README says, then everything Ready."""
    cluster.kubectl("apply", "-f", "-", input=BASE_OBJECTS)
    install_flux_crds(cluster, cluster.workdir)
    applied = cluster.kubectl("apply", "-k", str(ROOT / "manifests"), check=False, timeout=120)
    assert applied.returncode == 0, applied.stderr
    wait_installed(cluster)
    return applied.stdout


def wait_installed(cluster: HostCluster, timeout: str = "240s") -> None:
    cluster.kubectl(
        "wait",
        "-n",
        NS,
        "--for=condition=complete",
        f"--timeout={timeout}",
        "job/gate-admission-certs-init",
        timeout=300,
    )
    for deployment in ("gate-admission", "gate-admission-controller"):
        cluster.kubectl(
            "rollout", "status", "-n", NS, f"deployment/{deployment}", f"--timeout={timeout}", timeout=300
        )


def kubectl_gate(cluster: HostCluster, *args: str) -> subprocess.CompletedProcess:
    """`kubectl gate ...` as a user types it: kubectl finds the plugin on PATH."""
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "KUBECONFIG": str(cluster.kubeconfig()),
    }
    return subprocess.run(
        [cluster.kubectl_path, "gate", *args], capture_output=True, text=True, env=env, timeout=60
    )


def pod_objects(cluster: HostCluster, component: str = "webhook") -> list[dict]:
    """The component's running Pods, not those already terminating."""
    out = cluster.kubectl(
        "get",
        "pods",
        "-n",
        NS,
        "-l",
        f"app.kubernetes.io/component={component}",
        "--field-selector=status.phase=Running",
        "-o",
        "json",
    ).stdout
    return [pod for pod in json.loads(out)["items"] if not pod["metadata"].get("deletionTimestamp")]


def pods(cluster: HostCluster, component: str = "webhook") -> list[str]:
    return [pod["metadata"]["name"] for pod in pod_objects(cluster, component)]


def webhook_pods(cluster: HostCluster) -> set[str]:
    """The webhook Pods, terminating ones included (they serve until they exit)."""
    return set(
        cluster.kubectl(
            "get", "pods", "-n", NS, "-l", "app.kubernetes.io/component=webhook", "-o", "name"
        ).stdout.split()
    )


def no_webhook_pod(cluster: HostCluster) -> bool:
    return not webhook_pods(cluster)


def webhook_deployment_uid(cluster: HostCluster) -> str | None:
    out = cluster.kubectl(
        "get", "deployment", "gate-admission", "-n", NS, "-o", "jsonpath={.metadata.uid}", check=False
    )
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def webhook_ready(cluster: HostCluster, replicas: int = 2) -> bool:
    out = cluster.kubectl(
        "get",
        "deployment",
        "gate-admission",
        "-n",
        NS,
        "-o",
        "jsonpath={.status.readyReplicas}/{.status.updatedReplicas}/{.status.replicas}",
    ).stdout
    return out == f"{replicas}/{replicas}/{replicas}"


def wait_webhook_ready(cluster: HostCluster, replicas: int = 2, timeout: float = 240) -> None:
    seen = until(lambda: webhook_ready(cluster, replicas), bool, timeout=timeout, interval=1)
    assert seen, cluster.kubectl("get", "pods", "-n", NS, "-o", "wide").stdout


def service_get(cluster: HostCluster, path: str) -> str:
    """GET a path of the webhook Service through the API server's service proxy (as a scraper
    inside the cluster reaches it: through the Service, by its name)."""
    return cluster.kubectl(
        "get", "--raw", f"/api/v1/namespaces/{NS}/services/https:gate-admission:443/proxy{path}"
    ).stdout
