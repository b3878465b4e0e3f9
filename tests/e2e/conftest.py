"""End-to-end fixtures: a real kube-apiserver, the real Flux CRDs, our real server registered
as its admission webhooks, and kubectl as a user would type it."""

from __future__ import annotations

import os
import shutil
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from admission.kube.webhookconfig import ca_bundle
from tests.conftest import write_gates
from tests.e2e.controlplane import (
    ADMIN,
    ALICE,
    CONTROLLER,
    FLUX,
    GATE_ADMISSION,
    ROOT,
    ControlPlane,
    User,
    assets_dir,
    control_plane,
)
from tests.e2e.manifests import with_client_config
from tests.polling import until, wait_for
from tests.processes import BIN, GateServer, Process, free_port
from tests.realflux.flux import flux_dir

# Where the API server reaches our server: loopback for our own kube-apiserver; for a kind
# cluster, the host's address on the kind network (e.g. 172.18.0.1).
WEBHOOK_HOST = os.environ.get("GATE_E2E_WEBHOOK_HOST", "127.0.0.1")


def pytest_report_header(config):
    cluster = (
        "existing cluster at $KUBECONFIG" if os.environ.get("KUBECONFIG") else "own etcd + kube-apiserver"
    )
    return [
        f"e2e: {cluster}; Flux CRDs from the Flux controllers' own modules, with manifests/flux-crd-patches"
    ]


def install_flux_crds(cluster: ControlPlane, workdir: Path) -> None:
    """Render the CRDs with our kustomize component, as a user's flux-system kustomization would."""
    base = workdir / "flux-crds"
    base.mkdir()
    crds = flux_dir() / "crds"  # the Flux release the real-Flux tier runs
    resources = sorted(path.name for path in crds.glob("*.yaml"))
    for name in resources:
        shutil.copy(crds / name, base / name)
    (base / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": resources,
                "components": [os.path.relpath(ROOT / "manifests" / "flux-crd-patches", base)],
            }
        )
    )
    rendered = cluster.kubectl("kustomize", "--load-restrictor=LoadRestrictionsNone", str(base)).stdout
    cluster.kubectl("apply", "--server-side", "-f", "-", input=rendered)
    cluster.kubectl("wait", "--for=condition=established", "--timeout=60s", "crd", "--all")


BASE_OBJECTS = """
apiVersion: v1
kind: Namespace
metadata: {name: apps}
---
apiVersion: v1
kind: Namespace
metadata: {name: flux-system}
---
apiVersion: v1
kind: Namespace
metadata:
  name: gate-admission-system
  labels: {kubernetes.io/metadata.name: gate-admission-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: e2e-users}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects:
  - {apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}
  - {apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:serviceaccount:flux-system:kustomize-controller"}
  - {apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:serviceaccount:flux-system:source-controller"}
  - {apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:serviceaccount:flux-system:helm-controller"}
  - {apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:serviceaccount:flux-system:image-reflector-controller"}
  - {apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:serviceaccount:flux-system:notification-controller"}
  - {apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:serviceaccount:flux-system:image-automation-controller"}
"""


def prepare(plane: ControlPlane, workdir: Path) -> None:
    """Namespaces, test users' rights, the Flux CRDs (patched), our CRDs, RBAC and admission policies
    (so our controller runs here under what narrows its writes in a cluster)."""
    plane.kubectl("apply", "-f", "-", input=BASE_OBJECTS)
    install_flux_crds(plane, workdir)
    for part in ("crds", "rbac", "policies"):
        plane.kubectl("apply", "-k", str(ROOT / "manifests" / part))
    plane.kubectl("wait", "--for=condition=established", "--timeout=60s", "crd", "--all")


@contextmanager
def prepared(plane: ControlPlane, workdir: Path):
    """Start ``plane``, install what every test needs, and stop it (by pid) afterwards."""
    plane.start()
    try:
        prepare(plane, workdir)
        yield plane
    finally:
        plane.stop()


def own_plane(workdir: Path):
    """A control plane of a test module's own (for tests that restart it or install webhooks
    that would disturb the others); skipped against an existing cluster."""
    if os.environ.get("KUBECONFIG"):
        pytest.skip("needs its own control plane, not $KUBECONFIG's")
    with prepared(ControlPlane(workdir, assets_dir()), workdir) as plane:
        yield plane


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("cluster")
    with prepared(control_plane(workdir), workdir) as plane:
        yield plane


def pre_1_30_webhooks(workdir: Path) -> Path:
    """A kustomization of manifests/webhooks with the component for clusters older than 1.30
    (manifests/components/pre-1.30), as a user of such a cluster would write it."""
    directory = workdir / "webhooks-pre-1.30"
    directory.mkdir(exist_ok=True)
    (directory / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(ROOT / "manifests" / "webhooks", directory)],
                "components": [os.path.relpath(ROOT / "manifests" / "components" / "pre-1.30", directory)],
            }
        )
    )
    return directory


def register_webhooks(
    cluster: ControlPlane,
    server: GateServer,
    port: int | None = None,
    kustomization: Path = ROOT / "manifests" / "webhooks",
) -> None:
    """Apply manifests/webhooks (or another ``kustomization`` of them), pointed at ``server``
    (or a balancer on ``port`` in front of it) by URL, with its CA bundle."""
    docs = list(yaml.safe_load_all(cluster.kubectl("kustomize", str(kustomization)).stdout))
    bundle = ca_bundle((server.cert_dir / "ca.crt").read_bytes())
    url = f"https://{WEBHOOK_HOST}:{port or server.port}"
    docs = [with_client_config(doc, bundle, url) for doc in docs if doc]
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))


SENTINEL = """
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: webhook-sentinel
  namespace: apps
  annotations: {gating.toolkit.fluxcd.io/gates: flux-system/never-exists}
spec: {interval: 10m, path: ./, prune: false, sourceRef: {kind: GitRepository, name: none}}
"""


@contextmanager
def serving(cluster: ControlPlane, server: GateServer):
    """``server`` registered as the cluster's webhooks until the block ends, then stopped."""
    try:
        register_webhooks(cluster, server)
        wait_until_webhooks_answer(cluster, server)
        yield server
    finally:
        server.stop()


@contextmanager
def serving_the_cluster(cluster: ControlPlane, tmp: Path, *extra: str):
    """A server reading the cluster's Gates as its own identity (with the approval key that
    --generate-certs makes beside its certificates), registered as the webhooks while the block runs."""
    kubeconfig = str(cluster.kubeconfig(GATE_ADMISSION))
    with serving(cluster, start_server(tmp, None, "--kubeconfig", kubeconfig, *extra)) as server:
        yield server


@contextmanager
def serving_the_receiver(cluster: ControlPlane, tmp: Path, token: str, *extra: str):
    """``serving_the_cluster`` with the receiver on: its RBAC component applied, ``token`` its
    one token (in a file under ``tmp``)."""
    cluster.kubectl("apply", "-f", str(ROOT / "manifests" / "components" / "receiver" / "rbac.yaml"))
    (tmp / "receiver-token").write_text(token)
    with serving_the_cluster(
        cluster, tmp, "--receiver-token-file", str(tmp / "receiver-token"), *extra
    ) as server:
        yield server


def wait_until_webhooks_answer(cluster: ControlPlane, server: GateServer) -> None:
    """The API server loads webhook configurations asynchronously: wait until ours is asked."""
    result = until(
        lambda: cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=SENTINEL, check=False),
        lambda r: "is held" in r.stderr,
        timeout=30,
    )
    assert "is held" in result.stderr, f"webhook never answered: {result.stderr}\n{server.log()[-2000:]}"


class Gates:
    """The gates directory the server reads: one file per gate, rewritten to toggle it."""

    def __init__(self, directory: Path):
        self.directory = directory

    def put(self, *objects: dict, name: str | None = None) -> None:
        name = name or objects[0]["metadata"]["name"]
        write_gates(self.directory, list(objects), f"{name}.yaml")

    def remove(self, name: str) -> None:
        (self.directory / f"{name}.yaml").unlink(missing_ok=True)


@contextmanager
def controller_running(plane: ControlPlane, log_dir: Path, identity: str, *extra: str):
    """`gate-admission controller` as the controller's service account, ready, stopped after."""
    port = free_port()
    proc = Process(
        [
            str(BIN / "gate-admission"),
            "controller",
            "--kubeconfig",
            str(plane.kubeconfig(CONTROLLER)),
            "--health-port",
            str(port),
            "--identity",
            identity,
            *extra,
        ],
        log_dir / f"{identity}.log",
    )
    try:
        wait_for(lambda: _answers(f"http://127.0.0.1:{port}/readyz"), 30, "controller /readyz")
        yield proc
    finally:
        proc.stop()


def _answers(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as resp:
        return resp.status == 200


def start_server(tmp: Path, gates_dir: Path | None, *extra: str) -> GateServer:
    """Our server on a free port; on all interfaces when the API server is not on this host.

    With ``gates_dir`` it reads gates from files with one worker: each worker reads the
    directory on its own, a second apart at most, and the tests wait for a new gate state
    with a dry run that must land on the same reader. Without, pass ``--kubeconfig``.
    """
    address = ("--address", "0.0.0.0") if WEBHOOK_HOST != "127.0.0.1" else ()
    source = ("--gates-dir", str(gates_dir), "--workers", "1") if gates_dir else ()
    server = GateServer(tmp, *source, "--extra-sans", WEBHOOK_HOST, *address, *extra)
    server.wait_ready()
    return server


@pytest.fixture(scope="session")
def gates(tmp_path_factory) -> Gates:
    directory = tmp_path_factory.mktemp("gates")
    return Gates(directory)


@pytest.fixture(scope="session")
def webhook(cluster, gates, tmp_path_factory):
    """Our server in enforce mode, registered with the API server."""
    with serving(cluster, start_server(tmp_path_factory.mktemp("server"), gates.directory)) as server:
        yield server


@pytest.fixture
def kubectl(cluster, webhook):
    """kubectl as a user would type it: kubectl(*args, user=ALICE, input=yaml, check=False)."""

    def run(*args: str, user: User = ALICE, input: str | None = None, check: bool = False):
        return cluster.kubectl(*args, user=user, input=input, check=check)

    return run


__all__ = ["ADMIN", "ALICE", "FLUX", "until"]
