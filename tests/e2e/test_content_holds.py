"""Gates hold what Flux deploys (issue 13): new revisions, charts, values and image tags wait
while the approved state keeps reconciling, and opening the gate releases them at once.

Driven by the Flux controller doubles (tests/e2e/doubles), through our own etcd +
kube-apiserver with the Flux CRDs (real ones from ../shared/flux-crds when present, our
minimal image.toolkit.fluxcd.io CRDs always: see the pytest header), our server (cluster
store) registered from manifests/webhooks, and our controller. The doubles' retry backoff
starts at a minute here, so that only ``reconcile.fluxcd.io/requestedAt`` (the controller's
release) can explain a prompt apply after a gate opens.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
import yaml

from admission.core.timefmt import format_time
from admission.kube.client import api_client
from tests.builders import gate
from tests.e2e.conftest import own_plane, serving, start_server
from tests.e2e.controlplane import (CONTROLLER, FLUX, GATE_ADMISSION, HELM_CONTROLLER, IMAGE_REFLECTOR,
                                    SOURCE_CONTROLLER)
from tests.e2e.doubles.helm import HelmController
from tests.e2e.doubles.image import ImageReflectorController
from tests.e2e.doubles.kustomize import KustomizeController
from tests.e2e.doubles.patch import condition
from tests.e2e.doubles.source import SourceController, Storage
from tests.e2e.manifests import now_rfc3339
from tests.polling import until, wait_for
from tests.processes import BIN, Process, free_port

pytestmark = pytest.mark.e2e
RETRY_FIRST = 60.0  # seconds: no backoff retry happens within a test


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    yield from own_plane(tmp_path_factory.mktemp("content-holds"))


@pytest.fixture(scope="module")
def server(plane, tmp_path_factory):
    with serving(plane, start_server(tmp_path_factory.mktemp("content-server"), None, "--kubeconfig",
                                     str(plane.kubeconfig(GATE_ADMISSION)))) as srv:
        yield srv


@pytest.fixture(scope="module")
def controller(plane, server, tmp_path_factory):
    port = free_port()
    proc = Process([str(BIN / "gate-admission"), "controller", "--kubeconfig", str(plane.kubeconfig(CONTROLLER)),
                    "--health-port", str(port), "--identity", "e2e-content"],
                   tmp_path_factory.mktemp("content-controller") / "controller.log")
    try:
        wait_for(lambda: _ready(f"http://127.0.0.1:{port}/readyz"), 30, "controller /readyz")
        yield proc
    finally:
        proc.stop()


def _ready(url: str) -> bool:
    import urllib.request
    with urllib.request.urlopen(url, timeout=2) as resp:
        return resp.status == 200


class Flux:
    """The controller doubles of one Flux installation, sharing source-controller's storage."""

    def __init__(self, plane):
        storage = Storage()
        source, helm, image = (api_client(str(plane.kubeconfig(u))) for u in (SOURCE_CONTROLLER, HELM_CONTROLLER,
                                                                               IMAGE_REFLECTOR))
        self.git = SourceController(source, "GitRepository", storage, retry_first=RETRY_FIRST)
        self.charts = SourceController(source, "HelmChart", storage, retry_first=RETRY_FIRST)
        self.kustomize = KustomizeController(api_client(str(plane.kubeconfig(FLUX))), storage, retry_first=RETRY_FIRST)
        self.helm = HelmController(helm, retry_first=RETRY_FIRST)
        self.image = ImageReflectorController(image, retry_first=RETRY_FIRST)
        self.all = (self.git, self.charts, self.kustomize, self.helm, self.image)

    def start(self):
        for double in self.all:
            double.start()
        return self

    def stop(self):
        for double in self.all:
            double.stop()


@pytest.fixture(scope="module")
def flux(plane, server, controller):
    doubles = Flux(plane).start()
    try:
        yield doubles
    finally:
        doubles.stop()


# -- helpers ---------------------------------------------------------------------------------

def put(plane, *objects):
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(list(objects)))


def get(plane, kind: str, name: str, namespace: str) -> dict:
    out = plane.kubectl("get", kind, name, "-n", namespace, "-o", "json", check=False)
    return json.loads(out.stdout) if out.returncode == 0 else {}


def status(plane, kind, name, namespace) -> dict:
    return get(plane, kind, name, namespace).get("status") or {}


def applied(plane, name: str, namespace: str = "apps") -> str | None:
    return (get(plane, "configmap", f"{name}-applied", namespace).get("data") or {}).get("revision")


def close_gate(plane, server, name: str) -> None:
    # Toggles are whole seconds and a tie goes to close: date the close a little in the past.
    closed_at = format_time(datetime.now(timezone.utc) - timedelta(seconds=5))
    plane.kubectl("annotate", "--overwrite", "gate", name, "-n", "flux-system",
                  f"close.gate.fluxcd.io/requestedAt={closed_at}")
    _wait_server_sees(plane, name, held=True)


def open_gate(plane, name: str) -> None:
    plane.kubectl("annotate", "--overwrite", "gate", name, "-n", "flux-system",
                  f"open.gate.fluxcd.io/requestedAt={now_rfc3339()}")


def _wait_server_sees(plane, gate_name: str, held: bool) -> None:
    probe = yaml.safe_dump({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                            "metadata": {"name": f"probe-{gate_name}", "namespace": "apps",
                                         "annotations": {"gating.toolkit.fluxcd.io/gates": f"flux-system/{gate_name}"}},
                            "spec": {"interval": "10m", "path": "./", "prune": False,
                                     "sourceRef": {"kind": "GitRepository", "name": "none"}}})
    result = until(lambda: plane.kubectl("apply", "--dry-run=server", "-f", "-", input=probe, check=False),
                   lambda r: (" is held: " in r.stderr) == held, timeout=15)
    assert (" is held: " in result.stderr) == held, result.stderr


def git_repository(name: str, gates: str | None = None) -> dict:
    meta = {"name": name, "namespace": "flux-system"}
    if gates:
        meta["annotations"] = {"gating.toolkit.fluxcd.io/gates": gates}
    return {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository", "metadata": meta,
            "spec": {"interval": "10m", "url": f"https://git.example.com/{name}", "ref": {"branch": "main"}}}


def kustomization(name: str, source: str, gates: str | None = None) -> dict:
    meta = {"name": name, "namespace": "apps"}
    if gates:
        meta["annotations"] = {"gating.toolkit.fluxcd.io/gates": gates}
    return {"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization", "metadata": meta,
            "spec": {"interval": "10m", "path": "./deploy", "prune": True,
                     "sourceRef": {"kind": "GitRepository", "name": source, "namespace": "flux-system"}}}


def cond(obj_status: dict, kind: str) -> dict:
    return condition({"status": obj_status}, kind) or {}


def deployed(plane, flux, name: str, revision: str) -> None:
    """Wait until the kustomize double applied ``revision`` for apps/``name``."""
    assert until(lambda: applied(plane, name), lambda r: r == revision, timeout=20) == revision, \
        (flux.kustomize.errors("apps", name), status(plane, "kustomization", name, "apps"))


# -- (a) a new commit waits at the Kustomization -------------------------------------------

def test_a_new_commit_waits_at_the_kustomization_and_lands_when_the_gate_opens(plane, server, flux):
    put(plane, gate("freeze-a"), git_repository("repo-a"), kustomization("app-a", "repo-a", gates="flux-system/freeze-a"))
    flux.git.push("flux-system", "repo-a", "main@sha1:aaaa0001")
    deployed(plane, flux, "app-a", "main@sha1:aaaa0001")

    close_gate(plane, server, "freeze-a")
    flux.git.push("flux-system", "repo-a", "main@sha1:aaaa0002")
    assert until(lambda: status(plane, "gitrepository", "repo-a", "flux-system").get("artifact", {}).get("revision"),
                 lambda r: r == "main@sha1:aaaa0002") == "main@sha1:aaaa0002", "the source is not held here"

    errors = until(lambda: flux.kustomize.errors("apps", "app-a"), bool)
    assert errors and errors[-1].startswith("failed to update status: "), errors
    assert "flux-system/freeze-a" in errors[-1], errors[-1]
    stored = until(lambda: status(plane, "kustomization", "app-a", "apps"),
                   lambda s: cond(s, "Ready").get("reason") == "GateClosed")
    assert stored["lastAttemptedRevision"] == stored["lastAppliedRevision"] == "main@sha1:aaaa0001"
    assert cond(stored, "Ready").get("status") == "False", stored
    assert "freeze-a" in cond(stored, "Ready")["message"]
    approved = cond(stored, "Approved")
    assert approved.get("status") == "False" and approved.get("reason") == "GateClosed", stored
    assert applied(plane, "app-a") == "main@sha1:aaaa0001"
    events = json.loads(plane.kubectl("get", "events", "-n", "apps", "--field-selector",
                                      "involvedObject.name=app-a,type=Warning", "-o", "json").stdout)["items"]
    assert any("flux-system/freeze-a" in e["message"] for e in events), [e["message"] for e in events]

    open_gate(plane, "freeze-a")
    deployed(plane, flux, "app-a", "main@sha1:aaaa0002")
    last = flux.kustomize.applied_to("apps", "app-a")[-1]
    assert (last.revision, last.trigger) == ("main@sha1:aaaa0002", "requestedAt")
    stored = until(lambda: status(plane, "kustomization", "app-a", "apps"),
                   lambda s: cond(s, "Ready").get("status") == "True")
    assert cond(stored, "Ready")["message"] == "Applied revision: main@sha1:aaaa0002"
    assert not cond(stored, "Approved") or cond(stored, "Approved").get("status") != "False", stored


# -- (e) objects that reference no gate -----------------------------------------------------

def test_objects_that_reference_no_gate_are_never_touched(plane, server, flux):
    put(plane, gate("freeze-e"), git_repository("repo-e"), kustomization("app-e", "repo-e"))
    close_gate(plane, server, "freeze-e")  # closed gates elsewhere change nothing for them
    for n in range(1, 4):
        flux.git.push("flux-system", "repo-e", f"main@sha1:eeee000{n}")
        deployed(plane, flux, "app-e", f"main@sha1:eeee000{n}")
    assert flux.kustomize.errors("apps", "app-e") == [] and flux.git.errors("flux-system", "repo-e") == []
    ks = status(plane, "kustomization", "app-e", "apps")
    repo = status(plane, "gitrepository", "repo-e", "flux-system")
    # What the doubles wrote is what is stored: no condition added, none rewritten.
    assert {c["type"] for c in ks["conditions"]} == {"Ready", "Healthy"}
    assert {c["type"] for c in repo["conditions"]} == {"Ready", "ArtifactInStorage"}
    assert cond(ks, "Ready")["message"] == "Applied revision: main@sha1:eeee0003"
    assert repo["artifact"]["revision"] == "main@sha1:eeee0003"
