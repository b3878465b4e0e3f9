"""The real-Flux tier: the real Flux controllers (built from their Go modules) reconciling from
Git, Helm and OCI servers on loopback, through our own etcd + kube-apiserver with our server
registered as its webhooks (manifests/webhooks) and our controller releasing held objects.

One installation per session: every test works in a namespace of its own, so the controllers
start once. Nothing here is a double."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess

import pytest
import yaml

from tests.builders import probe_kustomization
from tests.e2e.conftest import controller_running, own_plane, serving_the_receiver
from tests.e2e.controlplane import ControlPlane
from tests.polling import until
from tests.processes import BIN
from tests.realflux.flux import FluxControllers, flux_cli, flux_dir, tools_dir
from tests.realflux.servers import ChartRepository, GitServer, Registry

RECEIVER_TOKEN = "realflux-receiver-token"
BREAK_GLASS = "break-glass"


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/realflux/" in str(item.fspath):
            item.add_marker(pytest.mark.realflux)


@pytest.fixture(scope="session")
def plane(tmp_path_factory):
    yield from own_plane(tmp_path_factory.mktemp("realflux"))


@pytest.fixture(scope="session")
def webhook(plane, tmp_path_factory):
    # As a cluster that authenticates the API server to the webhook should run it: reviews
    # without the API server's client certificate are refused.
    # The receiver is on; `break-glass` is the exempt group.
    with serving_the_receiver(
        plane,
        tmp_path_factory.mktemp("realflux-server"),
        RECEIVER_TOKEN,
        "--client-ca-file",
        str(plane.webhook_client_ca),
        "--exempt-groups",
        BREAK_GLASS,
    ) as server:
        yield server


@pytest.fixture(scope="session")
def flux(plane, webhook, tmp_path_factory):
    """The Flux controllers, started after our webhooks are registered (as in a cluster where
    gate-admission was installed first)."""
    workdir = tmp_path_factory.mktemp("flux")
    controllers = FluxControllers(plane, flux_dir(), workdir)
    try:
        yield controllers.start()
    finally:
        controllers.stop()


@pytest.fixture(scope="session")
def gate_controller(plane, webhook, flux, tmp_path_factory):
    """Our controller, announcing holds and releases to the real notification-controller."""
    with controller_running(
        plane,
        tmp_path_factory.mktemp("realflux-controller"),
        "realflux",
        # The webhook's approval key (start_server's --generate-certs made it): the controller
        # lists, announces and ends only the approvals it sealed.
        "--approval-key-file",
        str(webhook.cert_dir / "approval.key"),
        "--notify",
        "--notify-address",
        f"http://127.0.0.1:{flux.events_port}/",
        "--notify-period",
        "0",
    ) as proc:
        yield proc


@pytest.fixture(scope="session")
def git(tmp_path_factory):
    server = GitServer(tmp_path_factory.mktemp("git"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def charts(tmp_path_factory):
    repo = ChartRepository(tmp_path_factory.mktemp("charts"))
    yield repo
    repo.stop()


@pytest.fixture(scope="session")
def registry(tmp_path_factory):
    reg = Registry(tools_dir() / "registry", tmp_path_factory.mktemp("registry"))
    yield reg
    reg.stop()


NOT_FOUND = "(Gate not found)"  # how our webhook's refusal names a Gate its cache has not seen


class Cluster:
    """What a test does to the cluster, as a user would: kubectl, kubectl gate, flux."""

    def __init__(self, plane: ControlPlane, namespace: str):
        self.plane, self.namespace = plane, namespace

    def apply(self, *objects: dict) -> None:
        """``kubectl apply`` of the objects, the Gates among them first. Our webhook counts a Gate
        its cache has not seen yet as closed ("Gate not found"), so an object applied in the same
        batch as its new Gate may be refused (Flux retries it; a test would fail): the rest wait
        until the webhook answers with the Gates it was given."""
        for obj in objects:
            obj.setdefault("metadata", {}).setdefault("namespace", self.namespace)
        gates = [obj for obj in objects if obj.get("kind") == "Gate"]
        rest = [obj for obj in objects if obj.get("kind") != "Gate"]
        if gates and rest:
            self.plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(gates))
            for gate in gates:
                self.webhook_sees(gate["metadata"]["namespace"], gate["metadata"]["name"])
            objects = tuple(rest)
        self.plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(list(objects)))

    def webhook_sees(self, namespace: str, gate: str) -> None:
        """Our webhook's answer names the Gate as found: a server-side dry-run of a Kustomization
        it gates."""
        probe = yaml.safe_dump(probe_kustomization(namespace, gate))
        answer = until(
            lambda: self.plane.kubectl("apply", "--dry-run=server", "-f", "-", input=probe, check=False),
            lambda r: NOT_FOUND not in r.stderr,
            timeout=30,
            interval=0.2,
        )
        assert NOT_FOUND not in answer.stderr, answer.stderr

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict:
        out = self.plane.kubectl(
            "get", kind, name, "-n", namespace or self.namespace, "-o", "json", check=False
        )
        return json.loads(out.stdout) if out.returncode == 0 else {}

    def data(self, configmap: str, namespace: str | None = None) -> dict | None:
        return self.get("configmap", configmap, namespace).get("data")

    def gate(self, *args: str) -> subprocess.CompletedProcess:
        env = {
            **os.environ,
            "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
            "KUBECONFIG": str(self.plane.kubeconfig()),
        }
        return subprocess.run(
            [self.plane.kubectl_path, "gate", *args], capture_output=True, text=True, env=env, timeout=60
        )

    def flux(self, *args: str) -> subprocess.CompletedProcess:
        return flux_cli(self.plane, flux_dir(), *args)

    def wait(self, what, accept, timeout: float = 90):
        return until(what, accept, timeout=timeout, interval=0.25)


@pytest.fixture
def cluster(plane, webhook, gate_controller, flux, request):
    """A namespace of the test's own, in the cluster where the real Flux runs."""
    digest = hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:6]
    words = re.sub(r"[^a-z0-9]+", "-", request.node.name.removeprefix("test_").lower())[:40].strip("-")
    namespace = f"rf-{words}-{digest}"
    plane.kubectl("create", "namespace", namespace)
    return Cluster(plane, namespace)


def receiver(server, namespace: str, name: str, action: str, message: str = "") -> int:
    """POST /hooks/gates/NS/NAME/ACTION with the receiver's token, as CI or ChatOps would; the status."""
    conn = server.connection()
    try:
        conn.request(
            "POST",
            f"/hooks/gates/{namespace}/{name}/{action}",
            body=json.dumps({"message": message}),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {RECEIVER_TOKEN}"},
        )
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def condition(obj: dict, kind: str) -> dict:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c.get("type") == kind), {})


def ready(obj: dict) -> str | None:
    return condition(obj, "Ready").get("status")
