"""The HTTP layer: status codes, JSON errors, limits, and the two handlers end to end."""

from __future__ import annotations

import base64
import copy

import jsonpatch
import orjson

from admission.core.admission.decision import Settings
from admission.webhook.app import MAX_BODY, create_app
from tests.builders import FLUX_USER, changed, flux, gate, request, review
from tests.conftest import FIXED_NOW

CLOSED = gate("sre-approval", default="closed")
KS = flux(gates="flux-system/sre-approval")


def post(client, path, doc):
    return client.post(path, data=orjson.dumps(doc), content_type="application/json")


def test_denial_through_the_app(make_client):
    client = make_client([CLOSED])
    doc = review(request("UPDATE", changed(KS, path="./v2"), KS))
    resp = post(client, "/validate", doc)
    assert resp.status_code == 200
    response = resp.get_json()["response"]
    assert response == {
        "uid": doc["request"]["uid"],
        "allowed": False,
        "status": {
            "code": 403,
            "reason": "Forbidden",
            "message": "Kustomization apps/podinfo is held: gate 'flux-system/sre-approval' is closed "
            "(Gate closed by default); require=all; changed: spec.path",
        },
    }


def test_a_delete_review_without_the_old_object_is_denied_in_both_review_versions(make_client):
    client = make_client([gate("sre-approval")])  # open: the gates are not what is unknown
    for api_version in ("admission.k8s.io/v1", "admission.k8s.io/v1beta1"):
        req = request("DELETE", None, KS)
        req["oldObject"] = None
        for doc in (
            review(req, api_version),
            review({k: v for k, v in req.items() if k != "oldObject"}, api_version),
        ):
            response = post(client, "/validate", doc).get_json()["response"]
            assert response["allowed"] is False and response["status"]["code"] == 403
            assert "carries no oldObject" in response["status"]["message"]
        with_old = review(request("DELETE", None, KS), api_version)  # what API servers send since 1.15
        assert post(client, "/validate", with_old).get_json()["response"]["allowed"] is True


def test_malformed_bodies_get_400_with_a_json_reason(make_client):
    client = make_client()
    for body in (b"", b"not json", b"[1,2]", b'{"kind":"AdmissionReview"}', b"\xff\xfe"):
        resp = client.post("/validate", data=body, content_type="application/json")
        assert resp.status_code == 400 and resp.is_json and resp.get_json()["error"], body
        resp = client.post("/mutate", data=body, content_type="application/json")
        assert resp.status_code == 400 and resp.get_json()["error"]


def test_bodies_over_7_mib_get_413(make_client):
    client = make_client()
    resp = client.post("/validate", data=b" " * (MAX_BODY + 1), content_type="application/json")
    assert resp.status_code == 413 and resp.is_json and resp.get_json()["error"]


def test_a_body_just_under_the_limit_is_read(make_client):
    client = make_client([CLOSED])
    doc = review(request("CREATE", KS))
    body = orjson.dumps(doc)
    body = body[:-1] + b" " * (MAX_BODY - len(body) - 1) + b"}"
    resp = client.post("/validate", data=body, content_type="application/json")
    assert resp.status_code == 200 and resp.get_json()["response"]["allowed"] is False


def test_unknown_paths_and_methods_answer_json(make_client):
    client = make_client()
    assert client.get("/nope").status_code == 404 and client.get("/nope").is_json
    assert client.get("/validate").status_code == 405 and client.get("/validate").is_json


def test_health_and_readiness(make_client):
    client = make_client([CLOSED])
    assert client.get("/healthz").get_json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.get_json()["ready"] is True and ready.get_json()["gates"] == 1


def apply(response, obj):
    ops = orjson.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    return jsonpatch.apply_patch(copy.deepcopy(obj), ops), ops


def test_status_writes_get_status_suspended_and_no_patch_when_already_right(make_client):
    client = make_client()
    ks = flux(spec={"suspend": True, "path": "./a"}, status={"conditions": []})
    doc = review(request("UPDATE", ks, ks, sub_resource="status", user=FLUX_USER))
    patched, _ = apply(post(client, "/mutate", doc).get_json()["response"], ks)
    assert patched["status"]["suspended"] is True
    done = copy.deepcopy(ks)
    done["status"]["suspended"] = True
    response = post(
        client, "/mutate", review(request("UPDATE", done, done, sub_resource="status"))
    ).get_json()["response"]
    assert response == {"allowed": True, "uid": response["uid"]}


def test_status_suspended_is_added_when_there_is_no_status_yet(make_client):
    client = make_client()
    ks = flux(annotations={"reconcile.fluxcd.io/suspended": "incident"})
    response = post(client, "/mutate", review(request("UPDATE", ks, ks, sub_resource="status"))).get_json()[
        "response"
    ]
    patched, _ = apply(response, ks)
    assert patched["status"] == {"suspended": True}


def test_audit_mode_warns_records_and_annotates(make_client):
    client = make_client([CLOSED], Settings(mode="audit"))
    new = changed(KS, path="./v2")
    doc = review(request("UPDATE", new, KS))
    validated = post(client, "/validate", doc).get_json()["response"]
    assert validated["allowed"] is True
    assert validated["warnings"] == [
        "gate audit: change would be denied in enforce mode: Kustomization apps/podinfo "
        "is held: gate 'flux-system/sre-approval' is closed (Gate closed by default); "
        "require=all; changed: spec.path"
    ]
    assert (
        validated["auditAnnotations"]["mode"] == "audit"
        and "is held" in validated["auditAnnotations"]["held"]
    )
    patched, _ = apply(post(client, "/mutate", doc).get_json()["response"], new)
    record = orjson.loads(patched["metadata"]["annotations"]["gating.toolkit.fluxcd.io/audit"])
    assert record == {
        "time": "2026-06-10T12:00:00Z",
        "user": "alice",
        "operation": "UPDATE",
        "change": "spec change",
        "message": validated["auditAnnotations"]["held"],
    }


def test_audit_annotation_is_created_when_there_are_no_annotations(make_client):
    client = make_client([CLOSED], Settings(mode="audit"))
    plain = flux(spec={"gates": [{"name": "sre-approval", "namespace": "flux-system"}], "path": "./a"})
    patched, ops = apply(
        post(client, "/mutate", review(request("CREATE", plain))).get_json()["response"], plain
    )
    assert (
        ops[0]["path"] == "/metadata/annotations"
        and "gating.toolkit.fluxcd.io/audit" in patched["metadata"]["annotations"]
    )


def test_enforce_mode_main_writes_are_not_patched(make_client):
    client = make_client([CLOSED])
    response = post(client, "/mutate", review(request("CREATE", KS))).get_json()["response"]
    assert "patch" not in response and response["allowed"] is True


def test_exempt_users_pass_with_an_audit_annotation(make_client):
    client = make_client([CLOSED], Settings(exempt_users=frozenset({"alice"})))
    response = post(client, "/validate", review(request("CREATE", KS))).get_json()["response"]
    assert response["allowed"] is True and response["auditAnnotations"] == {
        "exempt": "user 'alice' is exempt"
    }


class FailingStore:
    """Stands for a bug in evaluation: there is no way to make the real store raise."""

    def lookup(self, namespace, name, now):
        raise RuntimeError("evaluation exploded")

    def readiness(self):
        return True, {}


def test_a_failure_while_judging_denies_on_validate_and_allows_on_mutate():
    app = create_app(FailingStore(), clock=lambda: FIXED_NOW)
    client = app.test_client()
    doc = review(request("CREATE", KS))
    validated = post(client, "/validate", doc)
    assert validated.status_code == 200
    response = validated.get_json()["response"]
    assert response["allowed"] is False and response["status"]["code"] == 500
    assert "evaluation exploded" in response["status"]["message"]
    mutated = post(client, "/mutate", doc)
    assert mutated.status_code == 200 and mutated.get_json()["response"]["allowed"] is True


def test_dry_run_denials_make_no_event(tmp_path):
    from admission.kube.events import DenialEvents
    from tests.builders import lookup_from

    events = DenialEvents(None, lookup_from(), Settings())
    stored = copy.deepcopy(KS)
    stored["metadata"]["uid"] = "uid-ks"
    request_ = request("UPDATE", changed(stored, path="./v2"), stored, dry_run=True)
    events.record(request_)
    assert events.pending == {}
    request_["dryRun"] = False
    events.record(request_)
    assert list(events.pending.values()) == [1]


def test_one_review_of_many_long_invalid_references_writes_a_bounded_log_line(make_client, capfd):
    """Log lines are bounded: one review of 64 invalid references wrote an 18 MB line; lines are capped, and say so."""
    import logging

    decisions = logging.getLogger("admission.decisions")
    level = decisions.level
    decisions.setLevel(logging.INFO)
    try:
        check_bounded_log_line(make_client, capfd)
    finally:
        decisions.setLevel(level)


def check_bounded_log_line(make_client, capfd):
    client = make_client([CLOSED])
    # In spec.gates: the annotation cannot be that long (references.MAX_ANNOTATION_LENGTH).
    obj = flux(
        spec={
            "interval": "10m",
            "path": "./deploy",
            "gates": [f"flux-system/{'X' * 5000}{i}" for i in range(64)],
        }
    )
    capfd.readouterr()
    resp = post(client, "/validate", review(request("UPDATE", changed(obj, path="./v2"), obj)))
    assert resp.status_code == 200 and resp.get_json()["response"]["allowed"] is False
    lines = [line for line in capfd.readouterr().err.splitlines() if '"admission decision"' in line]
    assert len(lines) == 1
    assert len(lines[0]) < 64 * 1024, len(lines[0])
    entry = orjson.loads(lines[0])
    assert entry["gates"]["truncated"] == 32 and "…[truncated" in entry["reason"]


def test_routes_read_the_request_target_not_what_the_server_made_of_it(make_client):
    # gunicorn hands PATH_INFO with a SCRIPT_NAME header's prefix stripped; the route is the target's.
    client = make_client([CLOSED])
    doc = review(request("UPDATE", changed(KS, path="./v2"), KS))
    resp = client.post(
        "/hooks/gates/validate",
        data=orjson.dumps(doc),
        content_type="application/json",
        environ_overrides={"SCRIPT_NAME": "/hooks/gates", "PATH_INFO": "/validate"},
    )
    assert resp.status_code == 404 and "response" not in resp.get_json()
    resp = client.get("/elsewhere", environ_overrides={"PATH_INFO": "/healthz"})
    assert resp.status_code == 404
    resp = client.post("/x", data=orjson.dumps(doc), environ_overrides={"RAW_URI": "/%76alidate"})
    assert resp.status_code == 400 and "path" in resp.get_json()["error"]
