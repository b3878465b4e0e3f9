"""AdmissionReview decoding errors and the response constructors."""

import base64

import orjson
import pytest

from admission.webhook.review import (
    MAX_CONTAINERS,
    MAX_UID,
    ReviewError,
    allowed,
    complete,
    denied,
    errored,
    parse_review,
    patched,
)
from tests.builders import flux, request, review


def body(doc):
    return orjson.dumps(doc)


def good():
    return review(request("CREATE", flux()))


def test_a_good_review_parses_v1_and_v1beta1():
    assert parse_review(body(good()))["request"]["operation"] == "CREATE"
    assert parse_review(body(review(request("CREATE", flux()), "admission.k8s.io/v1beta1")))


def mutated(path, value):
    doc = good()
    target = doc
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return body(doc)


@pytest.mark.parametrize(
    "raw, why",
    [
        (b"", "not valid JSON"),
        (b"{", "not valid JSON"),
        (b"[]", "must be a JSON object"),
        (mutated(["kind"], "Pod"), "kind must be AdmissionReview"),
        (mutated(["apiVersion"], "admission.k8s.io/v2"), "apiVersion must be one of"),
        (mutated(["request"], None), "request must be an object"),
        (mutated(["request", "uid"], KeyError), "request.uid"),
        (mutated(["request", "uid"], ""), "request.uid"),
        (mutated(["request", "kind"], "Kustomization"), "request.kind"),
        (mutated(["request", "kind", "kind"], 5), "request.kind"),
        (mutated(["request", "operation"], "PATCH"), "request.operation"),
        (mutated(["request", "userInfo"], KeyError), "request.userInfo"),
        (mutated(["request", "userInfo", "groups"], "admins"), "groups must be a list of strings"),
        (mutated(["request", "object"], "yaml"), "request.object"),
        (mutated(["request", "object"], None), "a CREATE needs request.object"),
        (mutated(["request", "dryRun"], "yes"), "request.dryRun"),
        (mutated(["request", "subResource"], 1), "request.subResource"),
    ],
)
def test_malformed_reviews_are_refused_with_a_reason(raw, why):
    with pytest.raises(ReviewError, match=why):
        parse_review(raw)


def test_an_update_needs_both_objects():
    doc = review(request("UPDATE", flux(), None))
    with pytest.raises(ReviewError, match="UPDATE needs"):
        parse_review(body(doc))


def test_a_delete_may_have_no_old_object():
    doc = review(request("DELETE", None, flux()))
    doc["request"]["oldObject"] = None
    assert parse_review(body(doc))


def test_complete_echoes_uid_and_api_version():
    doc = review(request("CREATE", flux()), "admission.k8s.io/v1beta1")
    out = complete(doc, allowed())
    assert out == {
        "apiVersion": "admission.k8s.io/v1beta1",
        "kind": "AdmissionReview",
        "response": {"allowed": True, "uid": doc["request"]["uid"]},
    }


def test_constructors():
    assert denied("no") == {"allowed": False, "status": {"code": 403, "reason": "Forbidden", "message": "no"}}
    assert errored("boom")["status"] == {"code": 500, "reason": "InternalError", "message": "boom"}
    assert allowed(warnings=["w"], audit={"k": "v"}) == {
        "allowed": True,
        "warnings": ["w"],
        "auditAnnotations": {"k": "v"},
    }
    ops = [{"op": "add", "path": "/status/suspended", "value": True}]
    p = patched(ops)
    assert p["patchType"] == "JSONPatch" and orjson.loads(base64.b64decode(p["patch"])) == ops
    assert patched([]) == {"allowed": True}


def test_long_messages_are_bounded():
    assert len(denied("x" * 10000)["status"]["message"]) == 4000


def test_a_uid_over_the_limit_says_so():
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u" * (MAX_UID + 1),
            "kind": {"group": "", "version": "v1", "kind": "X"},
            "operation": "DELETE",
            "userInfo": {},
        },
    }
    with pytest.raises(
        ReviewError, match=f"request.uid is {MAX_UID + 1} characters long, more than {MAX_UID}"
    ):
        parse_review(orjson.dumps(body))


def test_a_review_too_costly_to_decode_is_refused_before_decoding():
    # Empty lists cost the decoder the most per byte: 2 million of them held a worker for 0.75 s.
    costly = good()
    costly["request"]["object"]["spec"]["padding"] = [[]] * MAX_CONTAINERS
    with pytest.raises(ReviewError, match=f"arrays and objects, more than {MAX_CONTAINERS}"):
        parse_review(body(costly))


def test_a_large_review_of_real_density_is_accepted():
    # A Flux object carries about one array or object per 90 bytes; this is two 3 MiB objects of one per 36.
    entry = {"name": "x" * 16, "value": "y" * 20, "tags": ["a"]}
    large = review(request("UPDATE", flux(), flux()))
    for obj in (large["request"]["object"], large["request"]["oldObject"]):
        obj["spec"]["values"] = {"entries": [entry] * 50_000}
    raw = body(large)
    assert len(raw) > 6_000_000
    assert parse_review(raw)["request"]["object"]["spec"]["values"]["entries"][0] == entry
