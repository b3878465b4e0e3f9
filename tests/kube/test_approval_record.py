"""The controller's record of ended approvals, against FakeKube (which holds the Gate CRD's
`maxItems` and resourceVersion preconditions as the API server does): an approval admits once,
whatever the gate holds; each gate's bookkeeping is its own; a rewritten approval is announced,
a withdrawn one too; an ending written by another leader is never lost
(docs/decisions/0057, 0070)."""

from __future__ import annotations

import json
from datetime import timedelta

from admission.core.admission.decision import Context, Settings, decide
from admission.core.base import names
from admission.core.base.timefmt import format_time
from admission.core.gates import approvalrecord, approvals, approvalseal
from tests.builders import APPROVAL_KEY, FLUX_USER, flux, gate, lookup_from, request, sealed
from tests.doubles.fakekube import FakeKube
from tests.kube.test_approval_requests import GIT_A, GIT_B, GIT_C, KEY, NOW, approval, reasons, source
from tests.kube.test_controller import controller

PREFIX = names.APPROVAL_ANNOTATION_PREFIX


def stored_gate(kube: FakeKube, name: str = "freeze") -> dict:
    return kube.get(names.GATE_PLURAL, "flux-system", name)


def admits(gate_object: dict, content: str, now=NOW) -> bool:
    """Whether a GitRepository behind the gate may take ``content`` (its status write passes)."""
    old = flux("GitRepository", gates="flux-system/freeze", status={"artifact": {"revision": GIT_A}})
    new = flux("GitRepository", gates="flux-system/freeze", status={"artifact": {"revision": content}})
    req = request("UPDATE", new, old, sub_resource="status", user=FLUX_USER)
    return not decide(req, Context(lookup_from([gate_object]), now, Settings())).held


def landed_kube(annotations: dict, status: dict | None = None, name: str = "freeze") -> FakeKube:
    """A closed gate with ``annotations`` whose GIT_B has landed behind it (served, waiting nowhere)."""
    kube = FakeKube()
    found = sealed(gate(name, default="closed", annotations=annotations))
    if status:
        found["status"] = status
    kube.add(names.GATE_PLURAL, found)
    kube.add(
        "gitrepositories",
        flux(
            "GitRepository", "podinfo", gates=f"flux-system/{name}", status={"artifact": {"revision": GIT_B}}
        ),
    )
    return kube


def sealed_for(key: str, value: str, name: str = "freeze") -> str:
    """``value`` as the webhook records it under ``key`` on Gate ``name`` (sealed for its uid)."""
    fields = json.loads(value)
    fields[approvalseal.FIELD] = approvalseal.seal(APPROVAL_KEY, f"uid-flux-system-{name}", key, fields)
    return json.dumps(fields)


def entry(i: int, at: str = "2026-06-10T11:00:00Z") -> dict:
    return {"id": f"e{i:03d}", "reason": names.APPROVAL_EXPIRED_EVENT, "at": at}


def test_an_approval_on_a_gate_whose_ended_list_is_full_admits_nothing():
    # 256 ended approvals, still annotated (as they stay until withdrawn), fill the CRD's list:
    # no further ending can be written. The approval that came after them must not admit at all
    # (today it admitted, its ending failed with 422, and it admitted the same content again).
    ended = {PREFIX + f"e{i:03d}": approval(expires="2026-06-10T11:00:01Z") for i in range(256)}
    kube = landed_kube(
        {**ended, KEY: approval()},
        {names.ENDED_APPROVALS_FIELD: [entry(i) for i in range(256)]},
    )
    assert not admits(stored_gate(kube), GIT_B)
    ctl, _ = controller(kube)
    ctl.reconcile(NOW)
    assert not admits(stored_gate(kube), GIT_B)  # a revert bringing it back still waits
    problems = stored_gate(kube)["status"].get("problems") or []
    assert any(
        "ignoring every approval" in p and f"at most {approvalrecord.MAX_APPROVALS}" in p for p in problems
    )
    assert names.APPROVAL_USED_EVENT not in reasons(kube)


def test_an_approval_used_at_the_bound_is_ended_and_admits_once():
    # As many approvals as the webhook lets a gate hold, all but one ended: the last one's
    # ending still fits in the list, so it admits once.
    n = approvalrecord.MAX_APPROVALS - 1
    ended = {PREFIX + f"e{i:03d}": approval(expires="2026-06-10T11:00:01Z") for i in range(n)}
    kube = landed_kube(
        {**ended, KEY: approval()}, {names.ENDED_APPROVALS_FIELD: [entry(i) for i in range(n)]}
    )
    assert admits(stored_gate(kube), GIT_B)
    ctl, _ = controller(kube)
    ctl.reconcile(NOW)
    assert reasons(kube) == [names.APPROVAL_RECORDED_EVENT, names.APPROVAL_USED_EVENT]
    assert len(approvals.ended(stored_gate(kube))) == approvalrecord.MAX_APPROVALS
    assert not admits(stored_gate(kube), GIT_B)


def test_each_gate_keeps_its_own_ended_approvals_until_its_cache_shows_them():
    # Two gates; the cache shows neither ending yet. One gate's pass used to narrow the set of
    # ended approvals to its own, so the other's ended approval was announced "recorded" and
    # "used" a second time on the next pass.
    kube = landed_kube({KEY: approval()})
    other_key = PREFIX + "b2"
    other = sealed(gate("other", default="closed", annotations={other_key: approval(content=GIT_C)}))
    kube.add(names.GATE_PLURAL, other)
    waits = source("waits", GIT_A, GIT_C)  # GIT_C waits behind other: its approval stays live
    waits["metadata"]["annotations"][names.GATES_ANNOTATION] = "flux-system/other"
    for condition in waits["status"]["conditions"]:
        condition["message"] = condition["message"].replace("flux-system/freeze", "flux-system/other")
    kube.add("gitrepositories", waits)
    ctl, _ = controller(kube)
    for minutes in range(3):
        ctl.reconcile(NOW + timedelta(minutes=minutes))
    messages = [(e["reason"], e["involvedObject"]["name"]) for e in kube.of("events")]
    assert sorted(messages) == sorted(
        [
            (names.APPROVAL_RECORDED_EVENT, "freeze"),
            (names.APPROVAL_USED_EVENT, "freeze"),
            (names.APPROVAL_RECORDED_EVENT, "other"),
        ]
    ), messages


def test_an_approval_rewritten_under_its_key_is_announced_again():
    kube = FakeKube()
    kube.add(names.GATE_PLURAL, sealed(gate("freeze", default="closed", annotations={KEY: approval()})))
    kube.add("gitrepositories", source("podinfo", GIT_A, GIT_B))
    ctl, cache = controller(kube)
    ctl.reconcile(NOW)
    rewritten = approval(content=GIT_C).replace("CHG-1", "CHG-2")
    kube.patch_namespaced_custom_object(
        names.GATING_GROUP,
        names.GATING_VERSION,
        "flux-system",
        names.GATE_PLURAL,
        "freeze",
        {"metadata": {"annotations": {KEY: sealed_for(KEY, rewritten)}}},
    )
    cache.sync()
    ctl.reconcile(NOW + timedelta(seconds=1))
    recorded = [e["message"] for e in kube.of("events") if e["reason"] == names.APPROVAL_RECORDED_EVENT]
    assert len(recorded) == 2 and f"{GIT_C} for * — CHG-2" in recorded[1], recorded


def withdraw(kube: FakeKube, key: str = KEY) -> None:
    kube.patch_namespaced_custom_object(
        names.GATING_GROUP,
        names.GATING_VERSION,
        "flux-system",
        names.GATE_PLURAL,
        "freeze",
        {"metadata": {"annotations": {key: None}}},
    )


def test_withdrawing_a_live_approval_is_announced():
    kube = FakeKube()
    kube.add(names.GATE_PLURAL, sealed(gate("freeze", default="closed", annotations={KEY: approval()})))
    kube.add("gitrepositories", source("podinfo", GIT_A, GIT_B))
    ctl, cache = controller(kube)
    ctl.reconcile(NOW)
    withdraw(kube)
    cache.sync()
    ctl.reconcile(NOW + timedelta(seconds=1))
    withdrawn = [e["message"] for e in kube.of("events") if e["reason"] == names.APPROVAL_WITHDRAWN_EVENT]
    assert withdrawn == [f"approval withdrawn: approved by alice: {GIT_B} for * — CHG-1"]


def test_a_withdrawn_ended_approval_is_announced_and_kept_until_no_copy_of_it_can_count():
    kube = landed_kube({KEY: approval()})
    ctl, cache = controller(kube)
    ctl.reconcile(NOW)
    assert reasons(kube) == [names.APPROVAL_RECORDED_EVENT, names.APPROVAL_USED_EVENT]
    withdraw(kube)
    cache.sync()
    later = NOW + timedelta(minutes=1)
    ctl.reconcile(later)
    assert reasons(kube)[-1] == names.APPROVAL_WITHDRAWN_EVENT
    assert "ended approval withdrawn: a1 (ApprovalUsed" in kube.of("events")[-1]["message"]
    kept = stored_gate(kube)["status"][names.ENDED_APPROVALS_FIELD]
    assert kept == [
        {
            "id": "a1",
            "reason": names.APPROVAL_USED_EVENT,
            "at": format_time(NOW),
            "withdrawnAt": format_time(later),
        }
    ]
    # Written back within that time (a copy of the stamped value), it is still ended.
    back = stored_gate(kube)
    back["metadata"]["annotations"] = {KEY: approval()}
    assert not admits(sealed(back), GIT_B, later)
    # Once any copy of it has expired, the entry goes (one event is enough: no second one).
    cache.sync()
    gone = NOW + approvalrecord.REMEMBER
    ctl.reconcile(gone)
    assert stored_gate(kube)["status"][names.ENDED_APPROVALS_FIELD] == []
    assert reasons(kube).count(names.APPROVAL_WITHDRAWN_EVENT) == 1
    back = stored_gate(kube)
    back["metadata"]["annotations"] = {KEY: approval()}
    assert not admits(sealed(back), GIT_B, gone)  # the copy expired: approvals last MAX_EXPIRY at most


def test_an_ending_written_by_another_leader_is_not_lost():
    # B was approved while the new leader's cache was stale; the old leader ended A (used). The
    # new leader ends B with that stale view: its write must not drop A's ending, or A (its
    # content served again after a revert) would admit a second time.
    key_a, key_b = PREFIX + "a1", PREFIX + "b2"
    kube = landed_kube({key_b: approval(content=GIT_C, expires="2026-06-10T12:00:05Z")})
    new_leader, _ = controller(kube)  # its cache: B only
    kube.patch_namespaced_custom_object(
        names.GATING_GROUP,
        names.GATING_VERSION,
        "flux-system",
        names.GATE_PLURAL,
        "freeze",
        {"metadata": {"annotations": {key_a: sealed_for(key_a, approval())}}},
    )
    old_leader, _ = controller(kube)
    old_leader.reconcile(NOW)
    assert set(approvals.ended(stored_gate(kube))) == {"a1"}
    new_leader.reconcile(NOW + timedelta(seconds=10))  # B expired
    assert set(approvals.ended(stored_gate(kube))) == {"a1", "b2"}
    assert not admits(stored_gate(kube), GIT_B, NOW + timedelta(seconds=10))
    assert reasons(kube).count(names.APPROVAL_USED_EVENT) == 1


def test_an_approval_rewritten_after_it_was_judged_is_not_ended():
    # The cache showed the old value: the write is made on that version of the Gate only, so
    # the rewritten approval (new content, stamped again) stays live.
    kube = landed_kube({KEY: approval()})
    ctl, _ = controller(kube)
    rewritten = json.loads(approval(content=GIT_C))
    kube.patch_namespaced_custom_object(
        names.GATING_GROUP,
        names.GATING_VERSION,
        "flux-system",
        names.GATE_PLURAL,
        "freeze",
        {"metadata": {"annotations": {KEY: sealed_for(KEY, json.dumps(rewritten))}}},
    )
    ctl.reconcile(NOW)
    assert approvals.ended(stored_gate(kube)) == {}
    assert names.APPROVAL_USED_EVENT not in reasons(kube)
