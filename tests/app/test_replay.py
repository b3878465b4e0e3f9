"""Every AdmissionReview captured from a real API server, replayed through the app.

The fixtures were recorded from kube-apiserver v1.20.2 with the real Flux CRDs
(../shared/fixtures/admission-reviews-k8s-1.20/). Each is judged under several gate
states and times, and the verdict is the one SPEC §5 gives for that request.
"""

from __future__ import annotations

import base64
import copy
from dataclasses import dataclass

import jsonpatch
import orjson
import pytest

from admission.core.admission.decision import Settings
from admission.core.flux import content, kinds
from tests.builders import at, gate
from tests.conftest import FIXTURES

if not FIXTURES.is_dir():
    pytest.skip(f"no captured reviews at {FIXTURES}", allow_module_level=True)

SRE, QA, FREEZE, BYPASS = "sre-approval", "qa-approval", "change-freeze", "bypass-signoff"
NOON, NIGHT = at("2026-11-21T12:00"), at("2026-11-21T02:00")  # suspendDuring '* 0-4 * * *' is active at night


@dataclass(frozen=True)
class Expect:
    change: bool  # a change SPEC §5 gates
    refs: tuple[str, ...] = ()
    require: str = "all"
    always_held: bool = False  # suspendDuring '@always'
    night_held: bool = False  # suspendDuring '* 0-4 * * *' on the judged object


GIT = dict(refs=(FREEZE, BYPASS), require="oneOf")
KS = dict(refs=(SRE, QA))
EXPECT = {
    1: Expect(True, **GIT),  # GitRepository CREATE by admin
    3: Expect(True, **GIT),  # first artifact written to status
    5: Expect(True, **GIT),  # artifact advances
    7: Expect(False),  # status conditions only
    9: Expect(False),  # finalizer added
    11: Expect(True, **KS, night_held=True),  # Kustomization CREATE by server-side apply
    13: Expect(True, **KS, night_held=True),  # spec change by server-side apply
    15: Expect(False),  # server-side apply with no change
    17: Expect(False),  # label only
    19: Expect(False),  # reconcile.fluxcd.io/requestedAt
    21: Expect(False),  # Kustomization status
    23: Expect(False),  # spec.suspend: true
    25: Expect(False),  # spec.suspend: false
    27: Expect(True, **KS, night_held=True),  # gates annotation removed: leaves a policy
    29: Expect(False),  # gates annotation added back: tightening
    31: Expect(True, refs=(SRE,), night_held=True),  # dry-run spec change
    33: Expect(True, refs=(SRE,)),  # client-side apply CREATE
    35: Expect(True, refs=(SRE,)),  # client-side apply spec change
    37: Expect(True, refs=(FREEZE,)),  # HelmRelease CREATE
    39: Expect(True, refs=(FREEZE,)),  # chart version bump
    41: Expect(True, refs=(FREEZE,)),  # HelmRelease status records a new attempt (6.1.0; nothing applied yet)
    43: Expect(True, refs=(FREEZE,), always_held=True),  # OCIRepository CREATE, suspendDuring @always
    45: Expect(True, refs=(FREEZE,), always_held=True),  # OCIRepository artifact
    47: Expect(True),  # HelmChart CREATE, no gates
    49: Expect(True),  # HelmChart artifact, no gates
    51: Expect(True, **GIT),  # GitRepository DELETE
    53: Expect(False),  # finalizer removed by Flux
    55: Expect(False),
    57: Expect(True, refs=(SRE,)),  # Kustomization DELETE
    59: Expect(True, refs=(SRE,), night_held=True),  # delete-collection
}

WORLDS = {
    "all-closed": {SRE: False, QA: False, FREEZE: False, BYPASS: False},
    "all-open": {SRE: True, QA: True, FREEZE: True, BYPASS: True},
    "bypass-open": {SRE: True, QA: False, FREEZE: False, BYPASS: True},
    "sre-closed": {SRE: False, QA: True, FREEZE: True, BYPASS: False},
}


def world_gates(world):
    return [gate(name, default="opened" if is_open else "closed") for name, is_open in WORLDS[world].items()]


def expected_held(expect: Expect, world: str, now) -> bool:
    if not expect.change:
        return False
    if expect.always_held or (expect.night_held and now == NIGHT):
        return True
    states = [WORLDS[world][r] for r in expect.refs]
    if not states:
        return False
    return not any(states) if expect.require == "oneOf" else not all(states)


def fixture_files(part: str):
    files = sorted(FIXTURES.glob(f"*-{part}-*.json"))
    assert len(files) == 30, f"expected 30 {part} fixtures in {FIXTURES}"
    return files


def number(path) -> int:
    return int(path.name.split("-")[0])


@pytest.mark.parametrize("mode", ["enforce", "audit"])
@pytest.mark.parametrize("now", [NOON, NIGHT], ids=["noon", "night"])
@pytest.mark.parametrize("world", WORLDS)
def test_validate_verdicts(make_client, world, now, mode):
    client = make_client(world_gates(world), Settings(mode=mode), now=now)
    for path in fixture_files("validate"):
        body = path.read_bytes()
        review = orjson.loads(body)
        expect = EXPECT[number(path) - 1]
        held = expected_held(expect, world, now)
        resp = client.post("/validate", data=body, content_type="application/json")
        assert resp.status_code == 200, path.name
        out = resp.get_json()
        assert out["apiVersion"] == review["apiVersion"] and out["kind"] == "AdmissionReview"
        response = out["response"]
        assert response["uid"] == review["request"]["uid"], path.name
        if mode == "enforce":
            assert response["allowed"] is not held, f"{path.name} in {world} at {now}: {response}"
            if held:
                assert response["status"]["code"] == 403
                message = response["status"]["message"]
                kind = review["request"]["kind"]["kind"]
                assert message.startswith(f"{kind} {review['request']['namespace']}/"), message
                assert " is held: " in message
        else:
            assert response["allowed"] is True, path.name
            assert bool(response.get("warnings")) is held, f"{path.name} in {world} at {now}"
            if held:
                assert "would be denied" in response["warnings"][0]
                assert response["auditAnnotations"]["mode"] == "audit"


@pytest.mark.parametrize("mode", ["enforce", "audit"])
@pytest.mark.parametrize("now", [NOON, NIGHT], ids=["noon", "night"])
def test_mutate_patches(make_client, now, mode):
    world = "all-closed"
    client = make_client(world_gates(world), Settings(mode=mode), now=now)
    for path in fixture_files("mutate"):
        review = orjson.loads(path.read_bytes())
        request = review["request"]
        resp = client.post("/mutate", data=path.read_bytes(), content_type="application/json")
        assert resp.status_code == 200, path.name
        response = resp.get_json()["response"]
        assert response["allowed"] is True and response["uid"] == request["uid"]
        ops = orjson.loads(base64.b64decode(response["patch"])) if "patch" in response else []
        patched = jsonpatch.apply_patch(copy.deepcopy(request["object"]), ops) if request["object"] else None
        expect = EXPECT[number(path)]
        if request.get("subResource") == "status":
            annotations = request["object"]["metadata"].get("annotations") or {}
            during = annotations.get("reconcile.fluxcd.io/suspendDuring")
            suspended = during == "@always" or (during == "* 0-4 * * *" and now == NIGHT)
            # Absent says "not suspended" as false does: only a value that must change is written.
            assert patched["status"].get("suspended", False) is suspended, path.name
            must_change = (
                ["/status/suspended"]
                if request["object"]["status"].get("suspended", False) is not suspended
                else []
            )
            if mode == "enforce" and expected_held(expect, world, now):  # new content: a hold point
                before = request["oldObject"].get("status") or {}
                if request["kind"]["kind"] in kinds.SOURCE_KINDS:
                    assert patched["status"].get("artifact") == before.get("artifact"), path.name
                assert content.waiting(patched) is not None, path.name
                assert set(must_change) <= {op["path"] for op in ops}
            else:
                assert [op["path"] for op in ops] == must_change, path.name
        elif mode == "audit" and request["operation"] != "DELETE" and expected_held(expect, world, now):
            record = orjson.loads(patched["metadata"]["annotations"]["gating.toolkit.fluxcd.io/audit"])
            assert record["user"] == request["userInfo"]["username"] and "is held" in record["message"], (
                path.name
            )
        else:
            assert ops == [], f"{path.name}: {ops}"


def test_v1beta1_reviews_get_v1beta1_answers(make_client):
    client = make_client(world_gates("all-closed"))
    review = orjson.loads(sorted(FIXTURES.glob("014-*validate*.json"))[0].read_bytes())
    review["apiVersion"] = "admission.k8s.io/v1beta1"
    out = client.post("/validate", data=orjson.dumps(review), content_type="application/json").get_json()
    assert out["apiVersion"] == "admission.k8s.io/v1beta1" and out["response"]["allowed"] is False
