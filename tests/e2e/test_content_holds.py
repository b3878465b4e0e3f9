"""Gates hold what Flux deploys (the hold points): new revisions, charts, values and image tags wait
while the approved state keeps reconciling, and opening the gate releases them at once.

Driven by the Flux controller doubles (tests/doubles/flux), through our own etcd +
kube-apiserver with the Flux CRDs (real ones from ../shared/flux-crds when present, our
minimal image.toolkit.fluxcd.io CRDs always: see the pytest header), our server (cluster
store) registered from manifests/webhooks, and our controller. The doubles' retry backoff
starts at a minute here, so that only ``reconcile.fluxcd.io/requestedAt`` (the controller's
release) can explain a prompt apply after a gate opens.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from admission.core.base.timefmt import format_time
from admission.kube.client import api_client
from tests.builders import gate, probe_kustomization
from tests.conftest import REPORT
from tests.doubles.flux.helm import HelmController, values_digest
from tests.doubles.flux.image import ImageReflectorController
from tests.doubles.flux.kustomize import KustomizeController
from tests.doubles.flux.patch import condition
from tests.doubles.flux.source import SourceController, Storage
from tests.e2e.conftest import controller_running, own_plane, serving, start_server
from tests.e2e.controlplane import FLUX, GATE_ADMISSION, HELM_CONTROLLER, IMAGE_REFLECTOR, SOURCE_CONTROLLER
from tests.e2e.manifests import now_rfc3339
from tests.polling import until
from tests.processes import BIN

pytestmark = pytest.mark.e2e
RETRY_FIRST = 60.0  # seconds: no backoff retry happens within a test


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    yield from own_plane(tmp_path_factory.mktemp("content-holds"))


@pytest.fixture(scope="module")
def server(plane, tmp_path_factory):
    # Reviews authenticated by the API server's client certificate: a HelmRelease's denied
    # values digest, which only the review carries, is then shown.
    with serving(
        plane,
        start_server(
            tmp_path_factory.mktemp("content-server"),
            None,
            "--kubeconfig",
            str(plane.kubeconfig(GATE_ADMISSION)),
            "--client-ca-file",
            str(plane.webhook_client_ca),
        ),
    ) as srv:
        yield srv


@pytest.fixture(scope="module")
def controller(plane, server, tmp_path_factory):
    with controller_running(plane, tmp_path_factory.mktemp("content-controller"), "e2e-content") as proc:
        yield proc


class Flux:
    """The controller doubles of one Flux installation, sharing source-controller's storage."""

    def __init__(self, plane):
        storage = Storage()
        source, helm, image = (
            api_client(str(plane.kubeconfig(u)))
            for u in (SOURCE_CONTROLLER, HELM_CONTROLLER, IMAGE_REFLECTOR)
        )
        self.git = SourceController(source, "GitRepository", storage, retry_first=RETRY_FIRST)
        self.charts = SourceController(source, "HelmChart", storage, retry_first=RETRY_FIRST)
        self.kustomize = KustomizeController(
            api_client(str(plane.kubeconfig(FLUX))), storage, retry_first=RETRY_FIRST
        )
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


def kubectl_gate(plane, *args: str):
    """`kubectl gate ...` as typed: kubectl finds our plugin on PATH."""
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "KUBECONFIG": str(plane.kubeconfig()),
    }
    return subprocess.run(
        [plane.kubectl_path, "gate", *args], capture_output=True, text=True, env=env, timeout=60
    )


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
    closed_at = format_time(datetime.now(UTC) - timedelta(seconds=5))
    plane.kubectl(
        "annotate",
        "--overwrite",
        "gate",
        name,
        "-n",
        "flux-system",
        f"close.gate.fluxcd.io/requestedAt={closed_at}",
    )
    wait_server_sees(plane, name, held=True)


def open_gate(plane, name: str) -> None:
    plane.kubectl(
        "annotate",
        "--overwrite",
        "gate",
        name,
        "-n",
        "flux-system",
        f"open.gate.fluxcd.io/requestedAt={now_rfc3339()}",
    )


def wait_server_sees(plane, gate_name: str, held: bool) -> None:
    probe = yaml.safe_dump(probe_kustomization("apps", f"flux-system/{gate_name}", f"probe-{gate_name}"))
    result = until(
        lambda: plane.kubectl("apply", "--dry-run=server", "-f", "-", input=probe, check=False),
        lambda r: (" is held: " in r.stderr) == held,
        timeout=15,
    )
    assert (" is held: " in result.stderr) == held, result.stderr


def git_repository(name: str, gates: str | None = None) -> dict:
    meta = {"name": name, "namespace": "flux-system"}
    if gates:
        meta["annotations"] = {"gating.toolkit.fluxcd.io/gates": gates}
    return {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "GitRepository",
        "metadata": meta,
        "spec": {"interval": "10m", "url": f"https://git.example.com/{name}", "ref": {"branch": "main"}},
    }


def kustomization(name: str, source: str, gates: str | None = None) -> dict:
    meta = {"name": name, "namespace": "apps"}
    if gates:
        meta["annotations"] = {"gating.toolkit.fluxcd.io/gates": gates}
    return {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": meta,
        "spec": {
            "interval": "10m",
            "path": "./deploy",
            "prune": True,
            "sourceRef": {"kind": "GitRepository", "name": source, "namespace": "flux-system"},
        },
    }


def cond(obj_status: dict, kind: str) -> dict:
    return condition({"status": obj_status}, kind) or {}


def deployed(plane, flux, name: str, revision: str) -> None:
    """Wait until the kustomize double applied ``revision`` for apps/``name``."""
    assert until(lambda: applied(plane, name), lambda r: r == revision, timeout=20) == revision, (
        flux.kustomize.errors("apps", name),
        status(plane, "kustomization", name, "apps"),
    )


# -- (a) a new commit waits at the Kustomization -------------------------------------------


def test_a_new_commit_waits_at_the_kustomization_and_lands_when_the_gate_opens(plane, server, flux):
    put(
        plane,
        gate("freeze-a"),
        git_repository("repo-a"),
        kustomization("app-a", "repo-a", gates="flux-system/freeze-a"),
    )
    flux.git.push("flux-system", "repo-a", "main@sha1:aaaa0001")
    deployed(plane, flux, "app-a", "main@sha1:aaaa0001")

    close_gate(plane, server, "freeze-a")
    flux.git.push("flux-system", "repo-a", "main@sha1:aaaa0002")
    assert (
        until(
            lambda: (
                status(plane, "gitrepository", "repo-a", "flux-system").get("artifact", {}).get("revision")
            ),
            lambda r: r == "main@sha1:aaaa0002",
        )
        == "main@sha1:aaaa0002"
    ), "the source is not held here"

    errors = until(
        lambda: flux.kustomize.errors("apps", "app-a"),
        lambda e: e and e[-1].startswith("failed to update status: "),
    )
    assert errors and errors[-1].startswith("failed to update status: "), errors
    assert "flux-system/freeze-a" in errors[-1], errors[-1]
    stored = until(
        lambda: status(plane, "kustomization", "app-a", "apps"),
        lambda s: cond(s, "Ready").get("reason") == "GateClosed",
    )
    assert stored["lastAttemptedRevision"] == stored["lastAppliedRevision"] == "main@sha1:aaaa0001"
    assert cond(stored, "Ready").get("status") == "False", stored
    assert "freeze-a" in cond(stored, "Ready")["message"]
    approved = cond(stored, "Approved")
    assert approved.get("status") == "False" and approved.get("reason") == "GateClosed", stored
    assert applied(plane, "app-a") == "main@sha1:aaaa0001"
    # What `kubectl get` prints (the real CRDs' printer columns: Ready's status and message; the
    # same two fields `flux get kustomizations` prints).
    table = plane.kubectl("get", "kustomizations", "app-a", "-n", "apps").stdout
    if "STATUS" in table.splitlines()[0]:
        REPORT["kubectl get kustomizations, one held"] = "\n" + table.rstrip()
        row = table.splitlines()[1].split(None, 3)
        assert (
            row[0] == "app-a"
            and row[2] == "False"
            and row[3].startswith(cond(stored, "Ready")["message"][:60])
        ), table
    events = json.loads(
        plane.kubectl(
            "get",
            "events",
            "-n",
            "apps",
            "--field-selector",
            "involvedObject.name=app-a,type=Warning",
            "-o",
            "json",
        ).stdout
    )["items"]
    assert any("flux-system/freeze-a" in e["message"] for e in events), [e["message"] for e in events]

    open_gate(plane, "freeze-a")
    deployed(plane, flux, "app-a", "main@sha1:aaaa0002")
    last = flux.kustomize.applied_to("apps", "app-a")[-1]
    assert (last.revision, last.trigger) == ("main@sha1:aaaa0002", "requestedAt")
    stored = until(
        lambda: status(plane, "kustomization", "app-a", "apps"),
        lambda s: cond(s, "Ready").get("status") == "True",
    )
    assert cond(stored, "Ready")["message"] == "Applied revision: main@sha1:aaaa0002"
    assert not cond(stored, "Approved") or cond(stored, "Approved").get("status") != "False", stored


# -- (e) objects that reference no gate -----------------------------------------------------


def test_objects_that_reference_no_gate_are_never_touched(plane, server, flux):
    put(plane, gate("freeze-e"), git_repository("repo-e"))
    flux.git.push("flux-system", "repo-e", "main@sha1:eeee0000")
    # The push is picked up asynchronously: a Kustomization applied before its source has an
    # artifact fails its first reconcile ("Source artifact not found"), as with Flux.
    until(
        lambda: status(plane, "gitrepository", "repo-e", "flux-system").get("artifact", {}).get("revision"),
        lambda r: r == "main@sha1:eeee0000",
    )
    put(plane, kustomization("app-e", "repo-e"))
    close_gate(plane, server, "freeze-e")  # closed gates elsewhere change nothing for them
    for n in range(1, 4):
        flux.git.push("flux-system", "repo-e", f"main@sha1:eeee000{n}")
        deployed(plane, flux, "app-e", f"main@sha1:eeee000{n}")
    assert flux.kustomize.errors("apps", "app-e") == [] and flux.git.errors("flux-system", "repo-e") == []
    ks = status(plane, "kustomization", "app-e", "apps")
    repo = status(plane, "gitrepository", "repo-e", "flux-system")
    # What the doubles wrote is what is stored: no condition added, none rewritten.
    assert {c["type"] for c in ks["conditions"]} == {"Ready"}  # no Healthy without spec.wait
    assert {c["type"] for c in repo["conditions"]} == {"Ready", "ArtifactInStorage"}
    assert cond(ks, "Ready")["message"] == "Applied revision: main@sha1:eeee0003"
    assert repo["artifact"]["revision"] == "main@sha1:eeee0003"
    # Field for field what the doubles wrote, but for status.suspended: false by the schema
    # default of manifests/flux-crd-patches (the webhook is not even called for them).
    for double, kind, stored, namespace, name in (
        (flux.kustomize, "Kustomization", ks, "apps", "app-e"),
        (flux.git, "GitRepository", repo, "flux-system", "repo-e"),
    ):
        written = double.written[(kind, namespace, name)]
        assert {k: v for k, v in stored.items() if k != "suspended"} == {
            k: v for k, v in written.items() if k != "suspended"
        }
        assert stored.get("suspended") is False


# -- (b) the source is held instead ------------------------------------------------------------


def test_a_held_source_keeps_serving_its_artifact_and_moves_when_the_gate_opens(plane, server, flux):
    put(
        plane,
        gate("freeze-b"),
        git_repository("repo-b", gates="flux-system/freeze-b"),
        kustomization("app-b", "repo-b"),
    )
    flux.git.push("flux-system", "repo-b", "main@sha1:bbbb0001")
    deployed(plane, flux, "app-b", "main@sha1:bbbb0001")

    close_gate(plane, server, "freeze-b")
    flux.git.push("flux-system", "repo-b", "main@sha1:bbbb0002")
    stored = until(
        lambda: status(plane, "gitrepository", "repo-b", "flux-system"),
        lambda s: cond(s, "Blocked").get("status") == "True",
    )
    blocked = cond(stored, "Blocked")
    assert blocked.get("reason") == "GateClosed", stored
    assert "gate 'flux-system/freeze-b' is closed" in blocked["message"]
    assert "main@sha1:bbbb0002 waits, serving main@sha1:bbbb0001" in blocked["message"]
    assert stored["artifact"]["revision"] == "main@sha1:bbbb0001"
    assert (
        stored["observedGeneration"]
        == get(plane, "gitrepository", "repo-b", "flux-system")["metadata"]["generation"]
    )
    ready = cond(stored, "Ready")
    assert ready["status"] == "True" and "bbbb0002" not in ready["message"].replace(blocked["message"], ""), (
        ready
    )
    assert flux.git.errors("flux-system", "repo-b") == [], "the source's status write must succeed"

    shown = until(
        lambda: kubectl_gate(plane, "get", "freeze-b", "-n", "flux-system").stdout,
        lambda out: "repo-b" in out,
    )
    assert ["GitRepository", "flux-system", "repo-b", "main@sha1:bbbb0002", "main@sha1:bbbb0001"] in [
        line.split() for line in shown.splitlines()
    ], shown
    listed = [line.split() for line in kubectl_gate(plane, "list", "-n", "flux-system").stdout.splitlines()]
    assert listed[0][-1] == "HELD" and next(r for r in listed if r[0] == "freeze-b")[-1] == "1", listed

    # Drift correction goes on: its consumer re-applies the artifact the source serves.
    before = len(flux.kustomize.applied_to("apps", "app-b"))
    plane.kubectl(
        "annotate",
        "--overwrite",
        "kustomization",
        "app-b",
        "-n",
        "apps",
        f"reconcile.fluxcd.io/requestedAt={now_rfc3339()}",
    )
    again = until(lambda: flux.kustomize.applied_to("apps", "app-b"), lambda a: len(a) > before)
    assert [a.revision for a in again[before:]] == ["main@sha1:bbbb0001"]

    open_gate(plane, "freeze-b")
    deployed(plane, flux, "app-b", "main@sha1:bbbb0002")
    assert any(
        r.trigger == "requestedAt" and r.key == ("GitRepository", "flux-system", "repo-b")
        for r in flux.git.reconciles
    ), "released by the controller's requestedAt"
    stored = until(
        lambda: status(plane, "gitrepository", "repo-b", "flux-system"), lambda s: not cond(s, "Blocked")
    )
    assert not cond(stored, "Blocked") and stored["artifact"]["revision"] == "main@sha1:bbbb0002"


# -- (c) a HelmRelease: chart versions wait at the HelmChart, values at lastAttempted* --------


def helm_release(name: str, gates: str, repository: str = "charts") -> dict:
    return {
        "apiVersion": "helm.toolkit.fluxcd.io/v2",
        "kind": "HelmRelease",
        "metadata": {
            "name": name,
            "namespace": "apps",
            "annotations": {"gating.toolkit.fluxcd.io/gates": gates},
        },
        "spec": {
            "interval": "10m",
            "chart": {
                "spec": {
                    "chart": "podinfo",
                    "version": "6.x",
                    "sourceRef": {"kind": "HelmRepository", "name": repository, "namespace": "flux-system"},
                }
            },
            "valuesFrom": [{"kind": "ConfigMap", "name": f"{name}-values"}],
        },
    }


def values(name: str, replicas: int) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-values", "namespace": "apps"},
        "data": {"values.yaml": f"replicaCount: {replicas}\n"},
    }


def release(plane, name: str) -> dict:
    return get(plane, "configmap", f"{name}-release", "apps").get("data") or {}


def test_a_helm_release_waits_for_new_charts_at_its_chart_and_for_new_values_at_the_attempt(
    plane, server, flux
):
    put(plane, gate("freeze-c"), values("app-c", 1), helm_release("app-c", "flux-system/freeze-c"))
    flux.charts.publish("flux-system", "charts", "podinfo", "6.0.0")
    assert (
        until(lambda: release(plane, "app-c"), lambda r: r.get("chartVersion") == "6.0.0", timeout=20).get(
            "chartVersion"
        )
        == "6.0.0"
    ), flux.helm.errors("apps", "app-c")

    close_gate(plane, server, "freeze-c")
    untouched = get(plane, "helmrelease", "app-c", "apps")["metadata"]["resourceVersion"]
    flux.charts.publish("flux-system", "charts", "podinfo", "6.1.0")
    chart = until(
        lambda: status(plane, "helmchart", "apps-app-c", "flux-system"),
        lambda s: cond(s, "Blocked").get("status") == "True",
    )
    assert chart["artifact"]["revision"] == "6.0.0", chart
    assert "gate 'flux-system/freeze-c' is closed" in cond(chart, "Blocked")["message"]
    # A chart is shown as an approval names it, whole: name, version, digest, source.
    serves = f"chart podinfo 6.0.0@{chart['artifact']['digest']} from HelmRepository/flux-system/charts"
    waits = re.search(
        r"(chart podinfo 6\.1\.0@sha256:[0-9a-f]+ from HelmRepository/flux-system/charts) waits, serving "
        + re.escape(serves),
        cond(chart, "Blocked")["message"],
    )
    assert waits, cond(chart, "Blocked")["message"]
    waiting = json.loads(kubectl_gate(plane, "get", "freeze-c", "-n", "flux-system", "-o", "json").stdout)[
        "waiting"
    ]
    assert {(w["kind"], w["name"], w["waits"], w["serves"]) for w in waiting} >= {
        ("HelmChart", "apps-app-c", waits[1], serves)
    }
    assert get(plane, "helmrelease", "app-c", "apps")["metadata"]["resourceVersion"] == untouched, (
        "a held chart must not touch its HelmRelease"
    )
    assert release(plane, "app-c")["chartVersion"] == "6.0.0"

    # New values (from a ConfigMap: an edit of the HelmRelease itself is held at admission).
    new_values_are_refused(plane, flux, "app-c", 3, "freeze-c")
    # The denied write is the only one that carries the new values digest, so the stored attempt
    # stays the applied one; the webhook shows what waits itself (test (c2) below).
    stored = until(
        lambda: status(plane, "helmrelease", "app-c", "apps"),
        lambda s: cond(s, "Approved").get("reason") == "GateClosed",
    )
    assert stored["history"][0]["chartVersion"] == "6.0.0"
    assert stored["lastAttemptedConfigDigest"] == stored["history"][0]["configDigest"], stored
    assert f"(values {values_digest({'replicaCount': 3})}) waits" in cond(stored, "Approved").get(
        "message", ""
    ), stored
    assert json.loads(release(plane, "app-c")["values"]) == {"replicaCount": 1}, "no Helm action may run"

    open_gate(plane, "freeze-c")
    done = until(
        lambda: release(plane, "app-c"),
        lambda r: r.get("chartVersion") == "6.1.0" and json.loads(r["values"]) == {"replicaCount": 3},
    )
    assert done.get("chartVersion") == "6.1.0" and json.loads(done["values"]) == {"replicaCount": 3}, (
        flux.helm.errors("apps", "app-c"),
        status(plane, "helmchart", "apps-app-c", "flux-system"),
    )
    stored = until(
        lambda: status(plane, "helmrelease", "app-c", "apps"),
        lambda s: cond(s, "Ready").get("status") == "True",
    )
    assert not cond(stored, "Approved") or cond(stored, "Approved")["status"] != "False", stored


def new_values_are_refused(plane, flux, release_name: str, replicas: int, gate_name: str) -> None:
    """Change a HelmRelease's values ConfigMap, ask for a reconcile, and see the helm double's
    write refused naming the gate."""
    put(plane, values(release_name, replicas))
    plane.kubectl(
        "annotate",
        "--overwrite",
        "helmrelease",
        release_name,
        "-n",
        "apps",
        f"reconcile.fluxcd.io/requestedAt={now_rfc3339()}",
    )
    errors = until(lambda: flux.helm.errors("apps", release_name), lambda e: any(gate_name in m for m in e))
    assert any(f"flux-system/{gate_name}" in m for m in errors), errors


# -- (c2) new values alone: the HelmRelease shows the hold, kubectl gate lists it -------------

SHOWN = 'gate_admission_denied_attempts_shown_total{result="written"}'


def test_a_values_only_change_during_a_freeze_shows_as_held_and_lands_when_the_gate_opens(
    plane, server, flux
):
    put(
        plane, gate("freeze-v"), values("app-v", 1), helm_release("app-v", "flux-system/freeze-v", "charts-v")
    )
    flux.charts.publish("flux-system", "charts-v", "podinfo", "6.0.0")
    assert (
        until(lambda: release(plane, "app-v"), lambda r: r.get("chartVersion") == "6.0.0", timeout=20).get(
            "chartVersion"
        )
        == "6.0.0"
    ), flux.helm.errors("apps", "app-v")
    old_digest, new_digest = values_digest({"replicaCount": 1}), values_digest({"replicaCount": 3})
    waits, serves = f"6.0.0 (values {new_digest})", f"6.0.0 (values {old_digest})"

    close_gate(plane, server, "freeze-v")
    written = server.metrics().get(SHOWN, 0.0)
    new_values_are_refused(plane, flux, "app-v", 3, "freeze-v")
    # helm-controller's conditions-only writes were accepted and its deferred patch sent the
    # refused digest again (the double, FLUX-WRITES.md): only our own write can show the hold.
    stored = until(
        lambda: status(plane, "helmrelease", "app-v", "apps"),
        lambda s: (
            cond(s, "Approved").get("reason") == "GateClosed"
            and cond(s, "Ready").get("reason") == "GateClosed"
        ),
    )
    approved, ready = cond(stored, "Approved"), cond(stored, "Ready")
    assert approved["status"] == "False" and approved["message"] == (
        f"Reconciliation is waiting approval, gate 'flux-system/freeze-v' is closed. {waits} waits, serving {serves}"
    )
    assert ready["status"] == "False" and ready["message"].startswith("HelmRelease apps/app-v is held: ")
    assert ready["message"].endswith(f"; {waits} waits, serving {serves}"), ready
    assert stored["lastAttemptedConfigDigest"] == stored["history"][0]["configDigest"] == old_digest
    assert json.loads(release(plane, "app-v")["values"]) == {"replicaCount": 1}, "no Helm action may run"
    shown = json.loads(kubectl_gate(plane, "get", "freeze-v", "-n", "flux-system", "-o", "json").stdout)[
        "waiting"
    ]
    assert [(w["kind"], w["name"], w["waits"], w["serves"]) for w in shown] == [
        ("HelmRelease", "app-v", waits, serves)
    ]
    listed = [line.split() for line in kubectl_gate(plane, "list", "-n", "flux-system").stdout.splitlines()]
    assert next(r for r in listed if r[0] == "freeze-v")[-1] == "1", listed

    # Another reconcile while held: its writes keep the conditions (the mutating webhook), and
    # the denied reconcile's repeats write nothing more.
    before = len(flux.helm.reconciles)
    plane.kubectl(
        "annotate",
        "--overwrite",
        "helmrelease",
        "app-v",
        "-n",
        "apps",
        f"reconcile.fluxcd.io/requestedAt={now_rfc3339()}",
    )
    again = until(
        lambda: flux.helm.reconciles[before:],
        lambda rs: any(r.key == ("HelmRelease", "apps", "app-v") and r.error for r in rs),
    )
    assert any(r.key == ("HelmRelease", "apps", "app-v") and r.error for r in again), again
    stored = status(plane, "helmrelease", "app-v", "apps")
    assert cond(stored, "Approved") == approved and cond(stored, "Ready").get("reason") == "GateClosed", (
        stored
    )
    assert server.metrics().get(SHOWN, 0.0) - written == 1, "one write for the hold, whatever the repeats"

    opened = len(flux.helm.reconciles)
    open_gate(plane, "freeze-v")
    done = until(
        lambda: release(plane, "app-v"), lambda r: json.loads(r.get("values") or "{}") == {"replicaCount": 3}
    )
    assert json.loads(done["values"]) == {"replicaCount": 3}, flux.helm.errors("apps", "app-v")
    passes = [r for r in flux.helm.reconciles[opened:] if r.key == ("HelmRelease", "apps", "app-v")]
    assert passes[0].trigger == "requestedAt" and passes[0].error is None, passes
    stored = until(
        lambda: status(plane, "helmrelease", "app-v", "apps"),
        lambda s: cond(s, "Ready").get("status") == "True",
    )
    assert not cond(stored, "Approved"), stored
    assert stored["history"][0]["configDigest"] == new_digest


# -- (d) an ImagePolicy's new tag waits for approval -------------------------------------------


def test_an_image_policy_keeps_its_tag_until_the_gate_opens(plane, server, flux):
    repo = {
        "apiVersion": "image.toolkit.fluxcd.io/v1",
        "kind": "ImageRepository",
        "metadata": {"name": "podinfo-d", "namespace": "flux-system"},
        "spec": {"image": "registry.example/example/podinfo", "interval": "10m"},
    }
    policy = {
        "apiVersion": "image.toolkit.fluxcd.io/v1",
        "kind": "ImagePolicy",
        "metadata": {
            "name": "podinfo-d",
            "namespace": "flux-system",
            "annotations": {"gating.toolkit.fluxcd.io/gates": "flux-system/approve-d"},
        },
        "spec": {"imageRepositoryRef": {"name": "podinfo-d"}, "policy": {"semver": {"range": "1.x"}}},
    }
    put(plane, gate("approve-d"), repo, policy)
    flux.image.push_tag("flux-system", "podinfo-d", "1.0.0")

    def latest():
        return (status(plane, "imagepolicy", "podinfo-d", "flux-system").get("latestRef") or {}).get("tag")

    assert until(latest, lambda t: t == "1.0.0") == "1.0.0", flux.image.errors("flux-system", "podinfo-d")

    close_gate(plane, server, "approve-d")
    flux.image.push_tag("flux-system", "podinfo-d", "1.1.0")
    stored = until(
        lambda: status(plane, "imagepolicy", "podinfo-d", "flux-system"),
        lambda s: cond(s, "Blocked").get("status") == "True",
    )
    assert stored["latestRef"]["tag"] == "1.0.0", stored
    assert "registry.example/example/podinfo:1.1.0 waits" in cond(stored, "Blocked")["message"], stored
    waiting = json.loads(kubectl_gate(plane, "get", "approve-d", "-n", "flux-system", "-o", "json").stdout)[
        "waiting"
    ]
    assert [(w["kind"], w["waits"], w["serves"]) for w in waiting] == [
        ("ImagePolicy", "registry.example/example/podinfo:1.1.0", "registry.example/example/podinfo:1.0.0")
    ]
    assert flux.image.errors("flux-system", "podinfo-d") == [] or all(
        "no tag matches" in e for e in flux.image.errors("flux-system", "podinfo-d")
    )

    open_gate(plane, "approve-d")
    assert until(latest, lambda t: t == "1.1.0") == "1.1.0"
    stored = until(
        lambda: status(plane, "imagepolicy", "podinfo-d", "flux-system"), lambda s: not cond(s, "Blocked")
    )
    assert not cond(stored, "Blocked") and stored["observedPreviousRef"]["tag"] == "1.0.0"


# -- (f) audit mode -----------------------------------------------------------------------------


def decisions(server, name: str) -> list[dict]:
    lines = [
        line for line in server.log().splitlines() if line.startswith("{") and '"admission decision"' in line
    ]
    return [entry for entry in map(json.loads, lines) if entry.get("object", {}).get("name") == name]


def test_audit_mode_holds_nothing_and_records_every_would_be_hold(plane, server, flux):
    put(
        plane,
        gate("audit-f", mode="audit"),
        git_repository("repo-f", gates="flux-system/audit-f"),
        kustomization("app-f", "repo-f", gates="flux-system/audit-f"),
    )
    flux.git.push("flux-system", "repo-f", "main@sha1:ffff0001")
    deployed(plane, flux, "app-f", "main@sha1:ffff0001")

    close_gate(plane, server, "audit-f")
    flux.git.push("flux-system", "repo-f", "main@sha1:ffff0002")
    deployed(plane, flux, "app-f", "main@sha1:ffff0002")
    assert not [e for e in flux.kustomize.errors("apps", "app-f") if "audit-f" in e]
    for kind, name in (("gitrepository", "repo-f"), ("kustomization", "app-f")):
        obj_status = status(plane, kind, name, "flux-system" if kind == "gitrepository" else "apps")
        assert not cond(obj_status, "Blocked") and not cond(obj_status, "Approved"), obj_status
    audited = {
        (d["object"]["kind"], d["operation"])
        for name in ("repo-f", "app-f")
        for d in decisions(server, name)
        if d.get("verdict") == "audited" and d.get("mode") == "audit"
    }
    assert ("GitRepository", "UPDATE/status") in audited and ("Kustomization", "UPDATE/status") in audited, (
        audited
    )


# -- suspension holds release like gates ---------------------------------------------------------


def test_removing_the_suspended_annotation_releases_what_it_held(plane, server, flux, controller):
    put(plane, git_repository("repo-s"), kustomization("app-s", "repo-s"))
    flux.git.push("flux-system", "repo-s", "main@sha1:55550001")
    deployed(plane, flux, "app-s", "main@sha1:55550001")
    plane.kubectl(
        "annotate", "kustomization", "app-s", "-n", "apps", "reconcile.fluxcd.io/suspended=change freeze"
    )
    flux.git.push("flux-system", "repo-s", "main@sha1:55550002")
    errors = until(lambda: flux.kustomize.errors("apps", "app-s"), lambda e: any("suspended" in m for m in e))
    assert any(m.startswith("failed to update status: ") and "suspended" in m for m in errors), errors
    assert applied(plane, "app-s") == "main@sha1:55550001"

    plane.kubectl("annotate", "kustomization", "app-s", "-n", "apps", "reconcile.fluxcd.io/suspended-")
    deployed(plane, flux, "app-s", "main@sha1:55550002")
    assert flux.kustomize.applied_to("apps", "app-s")[-1].trigger == "requestedAt"
