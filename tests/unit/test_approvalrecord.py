"""How many approvals a Gate may hold and how long they last (admission.core.gates.approvalrecord,
docs/decisions/0070): the webhook entries refuse, with a reason, an approval past the bound, an
`expires` past the longest an approval lasts, and the key of an approval that ended; the core
honours no approval of a Gate that holds more anyway; the ended list keeps withdrawn entries
until no copy of their approval can count."""

from __future__ import annotations

import base64
import json
from datetime import timedelta

import orjson
import yaml

from admission.core.admission.decision import Context, Settings
from admission.core.base import names
from admission.core.base.timefmt import format_time
from admission.core.gates import approvalrecord, approvals
from admission.core.gates.gates import evaluate
from admission.core.gates.gatespec import approval_expiry, compile_gate
from admission.core.gates.status import gate_status
from admission.webhook import handlers
from tests import ROOT
from tests.builders import APPROVAL_KEY, flux, lookup_from, request
from tests.conftest import FIXED_NOW
from tests.unit.test_approvals import GIT_B, KEY, freeze, source_write, stamped

PREFIX = names.APPROVAL_ANNOTATION_PREFIX
CONTEXT = Context(lookup_from([]), FIXED_NOW, Settings(approval_key=APPROVAL_KEY))


def written(**fields) -> str:
    """What a client writes (the webhook stamps by and at)."""
    return json.dumps({"content": GIT_B, "for": "*", "message": "CHG-1", **fields})


def review(annotations: dict, old_annotations: dict, status: dict | None = None):
    new, old = freeze(annotations=annotations), freeze(annotations=old_annotations)
    if status is not None:
        new["status"] = old["status"] = status
    return request("UPDATE", new, old, user={"username": "alice", "groups": []})


def answers(req) -> list[dict]:
    """The mutating entry's answer, and the validating entry's on what the mutating one stamped."""
    mutated = handlers.mutate(req, CONTEXT).response
    if not mutated["allowed"]:
        return [mutated]
    stamped_req = json.loads(json.dumps(req))
    for op in orjson.loads(base64.b64decode(mutated["patch"])):
        key = op["path"].rsplit("/", 1)[-1].replace("~1", "/")
        stamped_req["object"]["metadata"]["annotations"][key] = op["value"]
    return [mutated, handlers.validate(stamped_req, CONTEXT).response]


def refused(req) -> str:
    found = answers(req)
    assert not found[-1]["allowed"], found
    return found[-1]["status"]["message"]


def many(n: int, start: int = 0) -> dict[str, str]:
    return {PREFIX + f"x{i:03d}": stamped() for i in range(start, start + n)}


def test_an_approval_past_the_bound_is_refused_with_a_reason():
    full = many(approvalrecord.MAX_APPROVALS)
    message = refused(review({**full, KEY: written()}, full))
    assert "approval refused" in message
    assert f"would hold {approvalrecord.MAX_APPROVALS + 1} approvals" in message
    assert f"at most {approvalrecord.MAX_APPROVALS}" in message and "--withdraw" in message
    # One below the bound is fine; so is rewriting one of a full gate's approvals.
    below = many(approvalrecord.MAX_APPROVALS - 1)
    assert all(a["allowed"] for a in answers(review({**below, KEY: written()}, below)))
    rewrite = {**full, PREFIX + "x000": written(message="CHG-2")}
    assert all(a["allowed"] for a in answers(review(rewrite, full)))


def test_the_issue_s_256_approvals_in_one_write_are_refused():
    message = refused(
        review({PREFIX + f"y{i:03d}": written(expires="2026-06-10T12:00:01Z") for i in range(256)}, {})
    )
    assert "would hold 256 approvals" in message


def test_ended_approvals_withdrawn_count_until_the_controller_forgets_them():
    recent = [
        {
            "id": f"x{i:03d}",
            "reason": names.APPROVAL_USED_EVENT,
            "at": format_time(FIXED_NOW - timedelta(hours=1)),
        }
        for i in range(approvalrecord.MAX_APPROVALS)
    ]
    message = refused(review({KEY: written()}, {}, {names.ENDED_APPROVALS_FIELD: recent}))
    assert f"{approvalrecord.MAX_APPROVALS} ended and withdrawn" in message


def test_the_key_of_an_ended_approval_cannot_be_written_again():
    ended = {
        names.ENDED_APPROVALS_FIELD: [
            {"id": "a1", "reason": names.APPROVAL_USED_EVENT, "at": "2026-06-10T11:30:00Z"}
        ]
    }
    message = refused(review({KEY: written()}, {KEY: stamped()}, ended))
    assert "this approval ended (ApprovalUsed at 2026-06-10T11:30:00Z)" in message and "new key" in message
    message = refused(review({KEY: written()}, {}, ended))  # withdrawn, then written back
    assert "this approval ended" in message


def test_expires_past_the_longest_an_approval_lasts_is_refused():
    late = format_time(FIXED_NOW + approvals.MAX_EXPIRY + timedelta(hours=1))
    message = refused(review({KEY: written(expires=late)}, {}))
    assert f"expires {late} is more than 168h0m0s after it was written" in message
    ok = format_time(FIXED_NOW + approvals.MAX_EXPIRY)
    assert all(a["allowed"] for a in answers(review({KEY: written(expires=ok)}, {})))


def test_an_approval_lasts_at_most_the_bound_after_its_stamp_whatever_it_says():
    # Written before the bound existed, or while the webhook was away.
    forever = approvals.parse(KEY, stamped(expires="2099-01-01T00:00:00Z"))
    assert forever.expires == forever.at + approvals.MAX_EXPIRY
    assert forever.live(forever.at + approvals.MAX_EXPIRY - timedelta(seconds=1))
    assert not forever.live(forever.at + approvals.MAX_EXPIRY)
    # A gate's window longer than the bound: approvals written without expires get the bound.
    assert approval_expiry(freeze(spec={"window": "720h"})) == approvals.MAX_EXPIRY


def test_an_approval_stamped_in_the_future_is_not_live_and_not_expired():
    ahead = json.loads(stamped())
    ahead["at"] = format_time(FIXED_NOW + timedelta(hours=1))
    found = approvals.parse(KEY, json.dumps(ahead))
    assert not found.live(FIXED_NOW) and not found.expired(FIXED_NOW)
    assert found.live(FIXED_NOW + timedelta(hours=1) - approvals.CLOCK_SKEW)


def test_a_gate_holding_more_than_the_bound_honours_no_approval():
    # Past the bound the ended list may not hold one more ending: were one approval honoured,
    # it might admit, fail to end and admit again.
    crowded = freeze(annotations={**many(approvalrecord.MAX_APPROVALS, start=1), KEY: stamped()})
    assert source_write([crowded]).held
    state = evaluate(compile_gate(crowded), FIXED_NOW)
    assert state.approvals == () and any("ignoring every approval" in p for p in state.problems)
    at_bound = freeze(annotations={**many(approvalrecord.MAX_APPROVALS - 1, start=1), KEY: stamped()})
    assert not source_write([at_bound]).held


def test_the_record_marks_withdrawn_entries_and_drops_them_once_no_copy_can_count():
    ended_at = FIXED_NOW - timedelta(hours=1)
    entry = {"id": "a1", "reason": names.APPROVAL_USED_EVENT, "at": format_time(ended_at)}
    gate = freeze(annotations={})
    gate["status"] = {names.ENDED_APPROVALS_FIELD: [entry]}
    marked = approvalrecord.record(gate, [], FIXED_NOW)
    assert marked == [{**entry, names.WITHDRAWN_AT_FIELD: format_time(FIXED_NOW)}]
    assert approvalrecord.newly_withdrawn(gate, marked) == marked
    gate["status"][names.ENDED_APPROVALS_FIELD] = marked
    assert approvalrecord.record(gate, [], FIXED_NOW + timedelta(days=1)) == marked  # marked once
    assert approvalrecord.record(gate, [], ended_at + approvalrecord.REMEMBER) == []
    # Still annotated: kept, however old.
    kept = freeze(annotations={KEY: stamped()})
    kept["status"] = {names.ENDED_APPROVALS_FIELD: [entry]}
    assert approvalrecord.record(kept, [], FIXED_NOW + timedelta(days=365)) == [entry]


def test_the_bound_stays_below_the_crd_s_cap_on_the_ended_list():
    for path in (
        "manifests/crds/gating.toolkit.fluxcd.io_gates.yaml",
        "charts/gate-admission/files/crds/gating.toolkit.fluxcd.io_gates.yaml",
    ):
        crd = yaml.safe_load((ROOT / path).read_text())
        status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
        ended = status["properties"][names.ENDED_APPROVALS_FIELD]
        assert ended["maxItems"] == names.ENDED_APPROVALS_MAX_ITEMS > approvalrecord.MAX_APPROVALS
        assert names.WITHDRAWN_AT_FIELD in ended["items"]["properties"]


def test_kubectl_gate_approve_refuses_a_longer_expiry_before_connecting(capsys):
    from admission.cli import kubectl_gate

    code = kubectl_gate.main(
        ["approve", "freeze", "-m", "CHG-1", "--expires", "200h", "--kubeconfig", "/nope"]
    )
    assert code == 2 and "an approval lasts at most 168h0m0s" in capsys.readouterr().err


def test_pending_shows_no_approval_that_ended_or_does_not_count():
    from admission.core.admission.pending import pending_rows
    from tests.unit.test_content import GIT_A as SERVED

    held = flux(
        "GitRepository",
        gates="flux-system/freeze",
        status={
            "artifact": {"revision": SERVED},
            "conditions": [
                {
                    "type": names.BLOCKED_CONDITION,
                    "status": "True",
                    "reason": names.GATE_CLOSED_REASON,
                    "message": f"Reconciliation is blocked as gate 'flux-system/freeze' is closed: {GIT_B} waits, serving {SERVED}",
                }
            ],
        },
    )
    used = freeze(annotations={KEY: stamped()})
    # The status as the controller (which holds the key) writes it: what kubectl gate vouches by.
    used["status"] = gate_status(
        used, evaluate(compile_gate(used, approval_key=APPROVAL_KEY), FIXED_NOW), FIXED_NOW
    )
    rows = pending_rows([held], {"flux-system/freeze": used}, FIXED_NOW)
    assert [a["by"] for a in rows[0]["approvals"]] == ["alice"]
    used["status"][names.ENDED_APPROVALS_FIELD] = [
        {"id": "a1", "reason": names.APPROVAL_USED_EVENT, "at": "2026-06-10T11:30:00Z"}
    ]
    rows = pending_rows([held], {"flux-system/freeze": used}, FIXED_NOW)
    assert rows[0]["waits"] == GIT_B and rows[0]["approvals"] == []  # it will not land it again
    crowded = freeze(annotations={**many(approvalrecord.MAX_APPROVALS, start=1), KEY: stamped()})
    assert pending_rows([held], {"flux-system/freeze": crowded}, FIXED_NOW)[0]["approvals"] == []
