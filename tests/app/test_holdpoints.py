"""Each hold point through the app: /mutate rewrites, /validate denies, logs and metrics say which."""

from __future__ import annotations

import base64
import copy
import logging

import jsonpatch
import orjson
import pytest

from admission.core.admission.decision import Settings
from admission.core.flux import conditions, content
from admission.kube.attempts import DeniedAttempts
from admission.store import StaticSources
from admission.store.files import FileStore
from admission.webhook.app import create_app
from tests.builders import FLUX_USER, changed, flux, gate, generated_chart, request, review
from tests.conftest import FIXED_NOW, write_gates
from tests.doubles.fakekube import FakeKube
from tests.unit.test_content import GIT_A, GIT_B, art, hr_status

HELD = "flux-system/change-freeze"
GATES = [gate("change-freeze", default="closed")]


@pytest.fixture
def client_with(gates_dir):
    def make(sources=(), mode="enforce", gates=GATES):
        write_gates(gates_dir, list(gates))
        app = create_app(
            FileStore(gates_dir), Settings(mode=mode), clock=lambda: FIXED_NOW, sources=StaticSources(sources)
        )
        app.testing = True
        return app.test_client()

    return make


def call(client, path, old, new, sub_resource="status"):
    doc = review(request("UPDATE", new, old, sub_resource=sub_resource, user=FLUX_USER))
    return client.post(path, data=orjson.dumps(doc), content_type="application/json").get_json()["response"]


def stored_after(client, old, new):
    """What the API server stores: the mutating webhook's patch applied, then validation."""
    response = call(client, "/mutate", old, new)
    ops = orjson.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    out = jsonpatch.apply_patch(copy.deepcopy(new), ops)
    return out, call(client, "/validate", old, out)


def metric(client, name):
    text = client.get("/metrics").get_data(as_text=True)
    return sum(float(line.rpartition(" ")[2]) for line in text.splitlines() if line.startswith(name))


@pytest.fixture(autouse=True)
def decision_log():
    """Decision lines are written at info level, which tests do not configure by default."""
    logger = logging.getLogger("admission.decisions")
    level = logger.level
    logger.setLevel(logging.INFO)
    yield
    logger.setLevel(level)


def decisions(capfd) -> list[dict]:
    return [
        orjson.loads(line)
        for line in capfd.readouterr().err.splitlines()
        if line.startswith("{") and '"admission decision"' in line
    ]


def test_a_held_source_is_rewritten_logged_and_counted_as_content(client_with, capfd):
    client = client_with()
    old = flux(
        "GitRepository",
        name="flux-system",
        namespace="flux-system",
        gates=HELD,
        status={"artifact": art(GIT_A)},
    )
    new = flux(
        "GitRepository",
        name="flux-system",
        namespace="flux-system",
        gates=HELD,
        status={"artifact": art(GIT_B)},
    )
    before = metric(
        client, 'gate_admission_holds_total{held="content",kind="GitRepository",verdict="rewritten"}'
    )
    capfd.readouterr()
    stored, verdict = stored_after(client, old, new)
    assert verdict["allowed"] is True and stored["status"]["artifact"] == art(GIT_A)
    assert content.waiting(stored).waits == GIT_B and content.waiting(stored).gates == (HELD,)
    (line,) = decisions(capfd)
    assert (
        line["verdict"] == "rewritten" and line["held"] == "content" and line["operation"] == "UPDATE/status"
    )
    assert line["reason"].endswith(f"{GIT_B} waits, serving {GIT_A}")
    assert (
        metric(client, 'gate_admission_holds_total{held="content",kind="GitRepository",verdict="rewritten"}')
        == before + 1
    )


def test_an_edit_is_denied_naming_what_changed_and_counted_as_an_edit(client_with, capfd):
    client = client_with()
    old = flux(
        "HelmRelease",
        gates=HELD,
        spec={
            "chart": {"spec": {"chart": "podinfo"}},
            "values": {"podAnnotations": {"a": None}, "replicas": 2},
        },
    )
    new = copy.deepcopy(old)
    new["spec"]["values"]["podAnnotations"] = {}
    new["metadata"]["labels"] = {"team": "a"}
    capfd.readouterr()
    response = call(client, "/validate", old, new, sub_resource="")
    assert response["allowed"] is False
    assert response["status"]["message"].endswith("; changed: spec.values.podAnnotations.a")
    (line,) = decisions(capfd)
    assert line["held"] == "edit" and line["verdict"] == "denied"
    assert metric(client, 'gate_admission_holds_total{held="edit",kind="HelmRelease",verdict="denied"}') >= 1


def test_changed_paths_are_a_few_then_a_count(client_with):
    client = client_with()
    old = flux(gates=HELD)
    new = changed(old, path="./b", interval="1m", prune=True, timeout="5m", wait=True)
    message = call(client, "/validate", old, new, sub_resource="")["status"]["message"]
    assert message.endswith("; changed: spec.interval, spec.path, spec.prune and 2 more")


def test_a_kustomization_attempt_is_denied_and_ready_approved_show_it(client_with):
    git = flux("GitRepository", name="flux-system", namespace="flux-system", status={"artifact": art(GIT_B)})
    client = client_with([git])
    spec = {
        "interval": "10m",
        "path": "./",
        "sourceRef": {"kind": "GitRepository", "name": "flux-system", "namespace": "flux-system"},
    }
    applied = flux(
        gates=HELD, spec=spec, status={"lastAppliedRevision": GIT_A, "lastAttemptedRevision": GIT_A}
    )
    # 1. conditions only: Ready=Unknown "Reconciliation in progress"
    progress = copy.deepcopy(applied)
    progress["status"]["conditions"] = [
        {
            "type": "Ready",
            "status": "Unknown",
            "reason": "Progressing",
            "message": "Reconciliation in progress",
        }
    ]
    stored, verdict = stored_after(client, applied, progress)
    assert verdict["allowed"] is True
    ready = conditions.find(stored, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "GateClosed")
    assert content.waiting(stored) == content.Waiting(
        "Kustomization", GIT_B, GIT_A, (HELD,), conditions.find(stored, "Approved")["message"]
    )
    # 2. the write that records the new revision: denied
    attempt = copy.deepcopy(stored)
    attempt["status"]["lastAttemptedRevision"] = GIT_B
    response = call(client, "/validate", stored, attempt)
    assert response["allowed"] is False and "held" in response["status"]["message"]


def test_a_helmrelease_values_attempt_is_denied(client_with):
    client = client_with()
    old = flux("HelmRelease", gates=HELD, status=hr_status())
    new = flux("HelmRelease", gates=HELD, status=hr_status(attempted=("6.5.0", "", "sha256:v2")))
    assert call(client, "/validate", old, new)["allowed"] is False


def test_a_denied_helmrelease_attempt_is_queued_to_be_shown_nothing_else_is(gates_dir):
    # Only the denied write carries new values: the webhook shows them itself, off the review.
    write_gates(gates_dir, GATES)
    kube = FakeKube()
    old = kube.add("helmreleases", flux("HelmRelease", gates=HELD, status=hr_status()))
    # Reviews authenticated by a client certificate: the denied attempt's values are shown.
    attempts = DeniedAttempts(
        None,
        FileStore(gates_dir).lookup,
        Settings(),
        StaticSources(),
        clock=lambda: FIXED_NOW,
        custom=kube,
        trust_reviews=True,
    )
    app = create_app(FileStore(gates_dir), Settings(), clock=lambda: FIXED_NOW, attempts=attempts)
    client = app.test_client()
    digest = "sha256:" + "2" * 64
    new = flux("HelmRelease", gates=HELD, status=hr_status(attempted=("6.5.0", "", digest)))
    assert call(client, "/mutate", old, new)["allowed"] is True
    assert attempts.pending == {}, "a mutation is not a denial"
    assert call(client, "/validate", old, old)["allowed"] is True and attempts.pending == {}
    assert call(client, "/validate", old, new)["allowed"] is False
    assert list(attempts.pending) == [("HelmRelease", "apps", "podinfo")]
    assert kube.calls == [], "nothing is written inside the review"
    assert attempts.show(*attempts._next()) == "written"
    assert content.waiting(kube.get("helmreleases", "apps", "podinfo")).waits == f"6.5.0 (values {digest})"


def test_an_image_policy_tag_is_held(client_with):
    client = client_with()
    old = flux(
        "ImagePolicy", gates=HELD, status={"latestRef": {"name": "registry.example/a/b", "tag": "1.0"}}
    )
    new = flux(
        "ImagePolicy", gates=HELD, status={"latestRef": {"name": "registry.example/a/b", "tag": "1.1"}}
    )
    stored, verdict = stored_after(client, old, new)
    assert verdict["allowed"] is True and stored["status"]["latestRef"]["tag"] == "1.0"
    assert content.waiting(stored).waits == "registry.example/a/b:1.1"


def test_a_generated_helmchart_is_held_by_its_helmreleases_gate(client_with):
    release = flux(
        "HelmRelease",
        gates=HELD,
        spec={
            "chart": {
                "spec": {
                    "chart": "podinfo",
                    "version": "6.x",
                    "sourceRef": {"kind": "HelmRepository", "name": "podinfo", "namespace": "flux-system"},
                }
            }
        },
    )
    client = client_with([release])
    old = generated_chart(art("6.5.0"))
    new = generated_chart(art("6.5.1"))
    stored, verdict = stored_after(client, old, new)
    assert stored["status"]["artifact"] == art("6.5.0") and verdict["allowed"] is True
    assert call(client, "/validate", old, new)["allowed"] is False  # the backstop


def test_audit_mode_holds_nothing_and_records_every_would_be_hold(client_with, capfd):
    client = client_with(mode="audit")
    old = flux("GitRepository", gates=HELD, status={"artifact": art(GIT_A)})
    new = flux("GitRepository", gates=HELD, status={"artifact": art(GIT_B)})
    capfd.readouterr()
    stored, verdict = stored_after(client, old, new)
    assert stored["status"]["artifact"] == art(GIT_B) and conditions.find(stored, "Blocked") is None
    assert verdict["allowed"] is True and "would be denied" in verdict["warnings"][0]
    assert (
        verdict["auditAnnotations"]["mode"] == "audit"
        and f"{GIT_B} waits" in verdict["auditAnnotations"]["held"]
    )
    (line,) = decisions(capfd)
    assert line["verdict"] == "audited" and line["held"] == "content"


@pytest.mark.parametrize(
    "kind", ["GitRepository", "HelmChart", "ImagePolicy", "Kustomization", "HelmRelease"]
)
def test_an_object_with_no_gates_is_never_touched(client_with, kind, capfd):
    client = client_with()
    old = flux(
        kind,
        status={
            "artifact": art(GIT_A),
            "latestImage": "a:1",
            "lastAppliedRevision": GIT_A,
            "lastAttemptedRevision": GIT_A,
            **hr_status(),
            "suspended": False,
        },
    )
    new = flux(
        kind,
        status={
            "artifact": art(GIT_B),
            "latestImage": "a:2",
            "lastAppliedRevision": GIT_A,
            "lastAttemptedRevision": GIT_B,
            **hr_status(attempted=("7.0.0", "", "x")),
            "suspended": False,
        },
    )
    capfd.readouterr()
    assert "patch" not in call(client, "/mutate", old, new)
    response = call(client, "/validate", old, new)
    assert response == {"allowed": True, "uid": response["uid"]}  # no warning, no audit annotation
    assert all(line["verdict"] == "allowed" and line["held"] is None for line in decisions(capfd))


def test_readiness_waits_for_the_flux_object_cache_once_then_only_reports_it(gates_dir):
    class Cache(StaticSources):
        reason = "Flux object cache not synced yet (gitrepositories: listing)"

        def untrusted(self):
            return self.reason

    write_gates(gates_dir, GATES)
    cache = Cache()
    client = create_app(
        FileStore(gates_dir), Settings(), clock=lambda: FIXED_NOW, sources=cache
    ).test_client()
    response = client.get("/readyz")
    assert response.status_code == 503 and response.get_json()["reason"] == cache.reason
    assert response.get_json()["fluxObjects"] == {"ready": False, "reason": cache.reason}
    cache.reason = None
    assert client.get("/readyz").status_code == 200
    cache.reason = "Flux object cache stale: no watch on helmreleases for 12s (boom)"
    response = client.get("/readyz")
    assert response.status_code == 200 and response.get_json()["fluxObjects"]["reason"] == cache.reason
