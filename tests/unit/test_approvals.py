"""Approvals of exact content: parsing, the approver's stamp, the webhooks' answers, and the hold
points letting exactly the approved content through (admission.core.gates.approvals, approvalreview)."""

from __future__ import annotations

import base64
import copy
import json
from dataclasses import replace
from datetime import timedelta

import orjson
import pytest

from admission.core.admission.decision import Context, Settings, decide
from admission.core.admission.pending import NothingToApprove, pending_rows, to_approve
from admission.core.base import names
from admission.core.base.timefmt import format_time
from admission.core.flux import content, kinds
from admission.core.flux.holdmessage import HoldMessage, NewContent
from admission.core.gates import approvals, approvalseal, approvalview
from admission.core.gates.gates import evaluate
from admission.core.gates.gatespec import compile_gate
from admission.core.gates.status import gate_status
from admission.webhook import handlers
from tests.builders import APPROVAL_KEY, FLUX_USER, at, flux, gate, lookup_from, request, sealed
from tests.conftest import FIXED_NOW
from tests.unit.test_content import GIT_A, GIT_B, art, hr_status

KEY = names.APPROVAL_ANNOTATION_PREFIX + "a1"
KEY2 = names.APPROVAL_ANNOTATION_PREFIX + "b2"
SOURCE = "GitRepository/apps/podinfo"


def stamped(
    content: str = GIT_B,
    target: str = "*",
    by: str = "alice",
    expires: str = "2026-06-11T12:00:00Z",
    message: str = "CHG-1",
    required: int = 1,
) -> str:
    return json.dumps(
        {
            "content": content,
            "for": target,
            "message": message,
            "by": by,
            "at": "2026-06-10T11:00:00Z",
            "expires": expires,
            "required": required,
        }
    )


def freeze(**annotations_and_spec) -> dict:
    """Gate freeze, closed, its approvals as the webhook recorded them (sealed)."""
    spec = annotations_and_spec.pop("spec", {})
    return sealed(
        gate("freeze", default="closed", annotations=annotations_and_spec.pop("annotations", None), **spec)
    )


def source_write(gates: list[dict], old_rev: str = GIT_A, new_rev: str = GIT_B):
    old = flux(
        "GitRepository",
        gates="flux-system/freeze",
        spec={"interval": "1m"},
        status={"artifact": art(old_rev)},
    )
    new = flux(
        "GitRepository",
        gates="flux-system/freeze",
        spec={"interval": "1m"},
        status={"artifact": art(new_rev)},
    )
    req = request("UPDATE", new, old, sub_resource="status", user=FLUX_USER)
    return decide(req, Context(lookup_from(gates), FIXED_NOW, Settings()))


# -- parsing and policy ------------------------------------------------------------------


def test_a_stamped_approval_parses_and_an_unstamped_one_is_ignored_and_reported():
    state = evaluate(
        compile_gate(
            freeze(annotations={KEY: stamped(), KEY2: json.dumps({"content": "x", "for": "*"})}),
            approval_key=APPROVAL_KEY,
        ),
        FIXED_NOW,
    )
    assert [(a.content, a.target, a.by) for a in state.approvals] == [(GIT_B, "*", "alice")]
    assert any(p.startswith(f"ignoring {KEY2}") for p in state.problems)
    assert state.approvals[0].describe() == f"approved by alice: {GIT_B} for * — CHG-1"


def test_spec_approvals_that_cannot_be_evaluated_make_the_gate_invalid():
    for bad in ({"required": 0}, {"required": "2"}, {"messageRequired": "yes"}, {"other": 1}, []):
        state = evaluate(compile_gate(freeze(spec={"approvals": bad})), FIXED_NOW)
        assert state.reason == names.REASON_INVALID and not state.open, bad
    assert (
        evaluate(compile_gate(freeze(spec={"approvals": {"required": 2}})), FIXED_NOW).required_approvals == 2
    )


def test_refused_values_say_why():
    policy = approvals.Policy()
    assert approvals.refuse(json.dumps({"content": GIT_B, "for": "*", "message": "CHG-1"}), policy) is None
    assert "message is required" in approvals.refuse(json.dumps({"content": GIT_B, "for": "*"}), policy)
    assert (
        approvals.refuse(json.dumps({"content": GIT_B, "for": "*"}), approvals.Policy(message_required=False))
        is None
    )
    assert "unknown field" in approvals.refuse(json.dumps({"content": GIT_B, "message": "m", "x": 1}), policy)
    assert "not JSON" in approvals.refuse("{", policy)
    assert "for" in approvals.refuse(json.dumps({"content": GIT_B, "for": "Pod/a/b", "message": "m"}), policy)
    assert "control" in approvals.refuse(json.dumps({"content": GIT_B, "message": "m\x1b[2J"}), policy)
    assert "expires" in approvals.refuse(
        json.dumps({"content": GIT_B, "message": "m", "expires": "soon"}), policy
    )


def test_the_stamp_replaces_whatever_the_client_said_and_relays_keep_their_caller():
    raw = json.dumps(
        {"content": GIT_B, "for": "*", "message": "m", "by": "mallory", "at": "1999-01-01T00:00:00Z"}
    )
    seal_with = (APPROVAL_KEY, "uid-1", KEY)
    out = json.loads(
        approvals.stamp(
            raw, "alice", FIXED_NOW, timedelta(hours=1), frozenset(), seal_with, under=approvals.Policy()
        )
    )
    assert (out["by"], out["at"], out["expires"]) == ("alice", "2026-06-10T12:00:00Z", "2026-06-10T13:00:00Z")
    relay = "system:serviceaccount:gate-admission-system:gate-admission"
    relayed = json.loads(
        approvals.stamp(
            raw, relay, FIXED_NOW, timedelta(hours=1), frozenset({relay}), seal_with, under=approvals.Policy()
        )
    )
    assert relayed["by"] == f"mallory via {relay}"


# -- the hold points ---------------------------------------------------------------------


def test_approved_content_passes_a_closed_gate_and_other_content_does_not():
    assert source_write([freeze()]).held
    passed = source_write([freeze(annotations={KEY: stamped()})])
    assert passed.allowed and not passed.held and "approved by alice" in (passed.approved or "")
    other = source_write([freeze(annotations={KEY: stamped(content=GIT_A)})], old_rev="main@sha1:0000")
    assert other.held  # GIT_B waits only when it is approved itself
    assert source_write([freeze(annotations={KEY: stamped(target="Kustomization/apps/podinfo")})]).held
    assert not source_write([freeze(annotations={KEY: stamped(target=SOURCE)})]).held


def test_an_approval_the_controller_ended_in_the_status_lets_nothing_through():
    ended = freeze(annotations={KEY: stamped()})
    ended["status"] = {
        names.ENDED_APPROVALS_FIELD: [
            {"id": "a1", "reason": names.APPROVAL_USED_EVENT, "at": "2026-06-10T11:30:00Z"}
        ]
    }
    assert source_write([ended]).held  # its content landed once: the same content again waits
    ended["status"][names.ENDED_APPROVALS_FIELD][0]["id"] = "other"
    assert not source_write([ended]).held


def test_an_expired_approval_lets_nothing_through():
    assert source_write([freeze(annotations={KEY: stamped(expires="2026-06-10T11:59:59Z")})]).held


def test_two_distinct_approvers_when_two_are_required():
    spec = {"approvals": {"required": 2}}
    assert source_write([freeze(spec=spec, annotations={KEY: stamped()})]).held
    assert source_write(
        [freeze(spec=spec, annotations={KEY: stamped(), KEY2: stamped()})]
    ).held  # same person twice
    assert not source_write([freeze(spec=spec, annotations={KEY: stamped(), KEY2: stamped(by="bob")})]).held


def test_edits_stay_held_whatever_is_approved():
    old = flux(gates="flux-system/freeze")
    new = flux(gates="flux-system/freeze", spec={"interval": "10m", "path": "./other"})
    lookup = lookup_from([freeze(annotations={KEY: stamped()})])
    assert decide(request("UPDATE", new, old), Context(lookup, FIXED_NOW, Settings())).held


CHART_SPEC = {"chart": "podinfo", "sourceRef": {"kind": "HelmRepository", "name": "charts"}}
CHART_A = "chart podinfo 6.6.0@sha256:aaaa from HelmRepository/flux-system/charts"


def helm_objects(chart_digest: str = "sha256:aaaa", chart_name: str = "podinfo") -> tuple[dict, dict, dict]:
    """A HelmRelease behind gate freeze (6.5.0, values v1 applied), its generated HelmChart
    before and after it fetched 6.6.0 (at ``chart_digest``)."""
    release = flux(
        "HelmRelease",
        gates="flux-system/freeze",
        spec={
            "chart": {
                "spec": {
                    "chart": chart_name,
                    "sourceRef": {"kind": "HelmRepository", "name": "charts", "namespace": "flux-system"},
                }
            }
        },
        status=hr_status(),
    )
    labels = {names.HELM_NAME_LABEL: "podinfo", names.HELM_NAMESPACE_LABEL: "apps"}
    spec = dict(CHART_SPEC, chart=chart_name)
    old = flux("HelmChart", "apps-podinfo", "flux-system", labels=labels, spec=spec)
    old["status"] = {"artifact": art("6.5.0", "sha256:5555")}
    new = flux("HelmChart", "apps-podinfo", "flux-system", labels=labels, spec=spec)
    new["status"] = {"artifact": art("6.6.0", chart_digest)}
    return release, old, new


def helm_context(approved: str, *objects: dict) -> Context:
    known = {(o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objects}
    return Context(
        lookup_from([freeze(annotations={KEY: stamped(content=approved)})]),
        FIXED_NOW,
        Settings(),
        lambda kind, namespace, name: known.get((kind, namespace, name)),
    )


def chart_write(approved: str, chart_digest: str = "sha256:aaaa", chart_name: str = "podinfo"):
    release, old, new = helm_objects(chart_digest, chart_name)
    request_ = request("UPDATE", new, old, sub_resource="status", user=FLUX_USER)
    return decide(request_, helm_context(approved, release, old))


def release_write(
    approved: str, values: str = "sha256:v1", serving: str = "sha256:aaaa", chart_name="podinfo"
):
    release, _, chart = helm_objects(serving, chart_name)
    attempt = json.loads(json.dumps(release))
    attempt["status"] = hr_status(attempted=("6.6.0", "", values))
    request_ = request("UPDATE", attempt, release, sub_resource="status", user=FLUX_USER)
    return decide(request_, helm_context(approved, release, chart))


def test_a_chart_approval_names_source_chart_version_digest_and_values_and_lands_at_both_hold_points():
    whole = f"{CHART_A} (values sha256:v1)"
    # One approval lets the chart through its HelmChart, then the release that applies it.
    assert not chart_write(whole).held
    assert not release_write(whole).held
    # The version alone, or the chart without the values, is not what was reviewed.
    for partial in ("6.6.0", "6.6.0@sha256:aaaa", CHART_A, "6.6.0 (values sha256:v1)"):
        assert chart_write(partial).held, partial
        assert release_write(partial).held, partial
    # Other bytes at that version, another chart at that version, other values: all wait.
    assert chart_write(whole, chart_digest="sha256:bbbb").held
    assert chart_write(whole, chart_name="other").held
    assert release_write(whole, serving="sha256:bbbb").held
    assert release_write(whole, chart_name="other").held
    assert release_write(whole, values="sha256:v2").held
    assert not release_write(f"{CHART_A} (values sha256:v2)", values="sha256:v2").held


def test_an_oci_chart_approval_names_its_digest():
    release = flux(
        "HelmRelease",
        gates="flux-system/freeze",
        spec={"chartRef": {"kind": "OCIRepository", "name": "podinfo"}},
        status=hr_status(),
    )
    for digest, held in (("sha256:0c1", False), ("sha256:bad", True)):
        attempt = json.loads(json.dumps(release))
        attempt["status"] = hr_status(attempted=("6.6.0+0c1", digest, "sha256:v1"))
        approved = "chart 6.6.0+0c1@sha256:0c1 from OCIRepository/apps/podinfo (values sha256:v1)"
        request_ = request("UPDATE", attempt, release, sub_resource="status", user=FLUX_USER)
        assert decide(request_, helm_context(approved, release)).held is held, digest


def test_landed_means_served_where_it_is_approved_and_waiting_nowhere():
    approval = approvals.parse(KEY, stamped())
    assert not approvals.landed(approval, [approvals.Behind(SOURCE, GIT_A, (GIT_B,))])
    assert not approvals.landed(
        approval,
        [
            approvals.Behind(SOURCE, GIT_B, ()),
            approvals.Behind("Kustomization/apps/podinfo", GIT_A, (GIT_B,)),
        ],
    )
    assert approvals.landed(
        approval,
        [approvals.Behind(SOURCE, GIT_B, ()), approvals.Behind("Kustomization/apps/podinfo", GIT_B, ())],
    )


# -- the webhooks on Gate writes ---------------------------------------------------------


def _gate_review(annotations: dict, old_annotations: dict | None = None, user: str = "alice"):
    """An UPDATE of gate freeze (uid uid-freeze) from ``old_annotations`` (a CREATE without them)
    to ``annotations``, as written: nothing sealed."""
    new = gate("freeze", default="closed", annotations=annotations)
    old = (
        gate("freeze", default="closed", annotations=old_annotations) if old_annotations is not None else None
    )
    for obj in (new, old) if old is not None else (new,):
        obj["metadata"]["uid"] = "uid-freeze"
    return request("UPDATE" if old else "CREATE", new, old, user={"username": user, "groups": []})


SEALING = Settings(approval_key=APPROVAL_KEY)  # the server's settings, its approval key among them


def test_the_mutating_webhook_stamps_the_writer_and_the_validating_one_checks_it():
    raw = json.dumps({"content": GIT_B, "for": "*", "message": "CHG-1", "by": "mallory"})
    context = Context(lookup_from([]), FIXED_NOW, SEALING)
    outcome = handlers.mutate(_gate_review({KEY: raw}, {}), context)
    ops = orjson.loads(base64.b64decode(outcome.response["patch"]))
    assert json.loads(ops[0]["value"])["by"] == "alice"
    assert handlers.validate(_gate_review({KEY: ops[0]["value"]}, {}), context).response["allowed"]
    forged = handlers.validate(_gate_review({KEY: stamped(by="mallory")}, {}), context).response
    assert not forged["allowed"] and "not recorded by the approval webhook" in forged["status"]["message"]
    refused = handlers.mutate(_gate_review({KEY: json.dumps({"content": GIT_B})}, {}), context).response
    assert not refused["allowed"] and "approval refused" in refused["status"]["message"]


def test_unchanged_approvals_and_toggles_are_not_judged():
    context = Context(lookup_from([]), FIXED_NOW, SEALING)
    same = handlers.validate(
        _gate_review({KEY: stamped(), names.OPEN_ANNOTATION: "2026-06-10T12:00:00Z"}, {KEY: stamped()}),
        context,
    )
    assert same.response["allowed"] and "patch" not in same.response
    assert at("2026-06-10T12:00") == FIXED_NOW


# -- the policy an approval was given under ----------------------------------------


def _policy_review(old_spec: dict, new_spec: dict, annotations: dict, user: str = "alice"):
    old = freeze(spec={"approvals": old_spec})
    new = freeze(spec={"approvals": new_spec}, annotations=annotations)
    return request("UPDATE", new, old, user={"username": user, "groups": []})


def test_an_approval_in_the_write_that_loosens_the_policy_is_refused_by_both_entries():
    context = Context(lookup_from([]), FIXED_NOW, SEALING)
    with_message = json.dumps({"content": GIT_B, "for": "*", "message": "CHG-1"})
    without_message = json.dumps({"content": GIT_B, "for": "*"})
    for old_spec, new_spec, value in (
        ({"required": 2}, {"required": 1}, with_message),
        ({"required": 2}, {}, with_message),
        ({"messageRequired": True}, {"messageRequired": False}, without_message),
    ):
        for answer in (handlers.mutate, handlers.validate):
            refused = answer(_policy_review(old_spec, new_spec, {KEY: value}), context).response
            assert not refused["allowed"], (old_spec, new_spec, answer)
            assert "loosens spec.approvals" in refused["status"]["message"], refused


def test_the_stamp_records_the_stricter_policy_and_the_validating_entry_holds_it_to_that():
    context = Context(lookup_from([]), FIXED_NOW, SEALING)
    raw = json.dumps({"content": GIT_B, "for": "*", "message": "CHG-1", "required": 1})
    outcome = handlers.mutate(_policy_review({"required": 1}, {"required": 2}, {KEY: raw}), context)
    ops = orjson.loads(base64.b64decode(outcome.response["patch"]))
    assert json.loads(ops[0]["value"])["required"] == 2  # the client's 1 is replaced
    # Without the mutating entry, a value claiming a looser policy is refused.
    claimed = handlers.validate(
        _policy_review({"required": 2}, {"required": 2}, {KEY: stamped(required=1)}), context
    ).response
    assert (
        not claimed["allowed"] and "is not the gate's spec.approvals.required" in claimed["status"]["message"]
    )
    now = json.dumps(
        {**json.loads(stamped(required=2)), "at": format_time(FIXED_NOW)}
    )  # stamped by this write
    assert handlers.validate(_policy_review({"required": 2}, {"required": 2}, {KEY: now}), context).response[
        "allowed"
    ]


def test_approvals_given_under_a_stricter_policy_stop_counting_when_it_is_lowered():
    # alice approved while two approvers were required, then lowered it to one in a write of
    # its own (which the approvals entries never see): her approval does not count.
    lowered = freeze(spec={"approvals": {"required": 1}}, annotations={KEY: stamped(required=2)})
    assert source_write([lowered]).held
    state = evaluate(compile_gate(lowered), FIXED_NOW)
    assert state.approvals == ()
    assert any("given while spec.approvals.required was 2, now 1" in p for p in state.problems), (
        state.problems
    )
    # An approval given after the lowering counts under it.
    again = freeze(
        spec={"approvals": {"required": 1}}, annotations={KEY: stamped(required=2), KEY2: stamped(required=1)}
    )
    assert not source_write([again]).held
    # Raising the policy keeps earlier approvals counting: they still need distinct approvers.
    raised = {"approvals": {"required": 2}}
    assert source_write([freeze(spec=raised, annotations={KEY: stamped(required=1)})]).held
    assert not source_write(
        [freeze(spec=raised, annotations={KEY: stamped(required=1), KEY2: stamped(by="bob", required=2)})]
    ).held
    # Requiring a message later: an approval without one stops counting.
    quiet = freeze(spec={"approvals": {"messageRequired": True}}, annotations={KEY: stamped(message="")})
    assert source_write([quiet]).held


def test_an_approval_that_does_not_say_its_policy_is_ignored_and_reported():
    legacy = json.loads(stamped())
    del legacy["required"]
    sealed_legacy = freeze(
        annotations={KEY: json.dumps(legacy)}
    )  # sealed: the webhook's, before 0057's policy
    state = evaluate(compile_gate(sealed_legacy, approval_key=APPROVAL_KEY), FIXED_NOW)
    assert state.approvals == ()
    assert any("does not say which spec.approvals.required" in p for p in state.problems)


# -- whole identities, never display text ----------------------------------------


def test_an_approval_is_compared_with_the_whole_revision_never_with_the_text_messages_show():
    branch = "release/" + "x" * 182  # a branch name Git allows, ~190 characters
    first, second = f"{branch}@sha1:{'1' * 40}", f"{branch}@sha1:{'2' * 40}"
    assert not source_write([freeze(annotations={KEY: stamped(content=first)})], new_rev=first).held
    assert source_write([freeze(annotations={KEY: stamped(content=first)})], new_rev=second).held
    # What a message shows of a longer revision is cut: no approval of it lets anything through.
    longer = f"{'y' * 600}@sha1:{'1' * 40}"
    shown = source_write([freeze()], new_rev=longer).change or ""
    cut = next(w for w in shown.split() if w.endswith("…"))
    assert (
        len(cut) == content.MAX_TEXT
        and content.approval_of(flux("GitRepository"), cut, lambda *_: None) is None
    )
    assert source_write([freeze(annotations={KEY: stamped(content=cut)})], new_rev=longer).held
    assert source_write([freeze(annotations={KEY: stamped(content=cut)})], new_rev=longer[:-1] + "2").held


# -- kubectl gate approve: what it writes, whole ---------------------------------------------


def held_by_freeze(obj: dict, waits: str, serves: str) -> dict:
    """``obj`` with the hold condition the webhook writes while gate flux-system/freeze holds ``waits``."""
    condition = kinds.content_of(obj["kind"]).hold_condition
    message = HoldMessage.of(condition, ("gate 'flux-system/freeze' is closed",), NewContent(waits, serves))
    obj.setdefault("status", {})["conditions"] = [
        {
            "type": condition,
            "status": "True" if condition == names.BLOCKED_CONDITION else "False",
            "reason": names.GATE_CLOSED_REASON,
            "message": message.format(),
        }
    ]
    return obj


def test_approve_writes_the_whole_chart_and_refuses_content_that_is_not_exactly_what_waits():
    release, old, _ = helm_objects()
    chart = held_by_freeze(
        old, CHART_A, "chart podinfo 6.5.0@sha256:5555 from HelmRepository/flux-system/charts"
    )
    whole = f"{CHART_A} (values sha256:v1)"
    assert to_approve([release, chart], "flux-system/freeze", None, None) == ([whole], [])
    assert to_approve([release, chart], "flux-system/freeze", None, whole) == ([whole], [])
    for partial in ("6.6.0", "6.6.0 (values sha256:v1)", CHART_A, whole[:-1]):
        with pytest.raises(NothingToApprove) as refused:
            to_approve([release, chart], "flux-system/freeze", None, partial)
        assert f"waits {whole}" in str(refused.value), partial
    [row] = pending_rows([release, chart], {}, FIXED_NOW)
    assert row["approve"] == [
        "kubectl gate approve freeze -n flux-system --for HelmChart/flux-system/apps-podinfo "
        f"--content '{whole}' -m MESSAGE"
    ]
    # The release, held for new values once the chart landed: its chart as its HelmChart serves it.
    _, _, landed = helm_objects()
    values = held_by_freeze(release, "6.6.0 (values sha256:v2)", "6.5.0 (values sha256:v1)")
    assert to_approve([values, landed], "flux-system/freeze", None, None) == (
        [f"{CHART_A} (values sha256:v2)"],
        [],
    )


def test_approve_refuses_what_a_message_shows_cut():
    longer = f"{'y' * 600}@sha1:{'1' * 40}"
    shown = source_write([freeze()], new_rev=longer).change or ""
    cut = next(w for w in shown.split() if w.endswith("…"))
    repo = held_by_freeze(flux("GitRepository", gates="flux-system/freeze", spec={}), cut, GIT_A)
    with pytest.raises(NothingToApprove) as refused:
        to_approve([repo], "flux-system/freeze", None, None)
    assert "is not known whole" in str(refused.value)
    with pytest.raises(NothingToApprove):
        to_approve([repo], "flux-system/freeze", None, cut)


def test_a_chart_approval_lands_once_the_chart_and_the_release_serve_it():
    whole = f"{CHART_A} (values sha256:v1)"
    approval = approvals.parse(KEY, stamped(content=whole))
    chart, release = "HelmChart/flux-system/apps-podinfo", "HelmRelease/apps/podinfo"
    # The chart landed; the release still waits for it at its source: not landed yet.
    assert not approvals.landed(
        approval,
        [
            approvals.Behind(chart, CHART_A, ()),
            approvals.Behind(release, "6.5.0 (values sha256:v1)", (CHART_A,)),
        ],
    )
    assert approvals.waiting_for(
        approval, [approvals.Behind(release, "6.5.0 (values sha256:v1)", (CHART_A,))]
    ) == [release]
    assert approvals.landed(
        approval,
        [approvals.Behind(chart, CHART_A, ()), approvals.Behind(release, "6.6.0 (values sha256:v1)", ())],
    )
    # The same version with other values is not what it approved.
    assert not approvals.pins(whole, "6.6.0 (values sha256:v2)") and not approvals.pins(whole, "6.6.0")


# -- only what the webhook sealed counts (docs/decisions/0064) ----------------------------


def test_an_approval_written_without_the_webhook_is_shown_unverified_and_lets_nothing_through():
    # Written while the approval entries were absent: a by and an at, but no seal of ours.
    forged = gate("freeze", default="closed", annotations={KEY: stamped(by="bob")})
    forged["metadata"]["uid"] = "uid-freeze"
    assert source_write([forged]).held
    state = evaluate(compile_gate(forged, approval_key=APPROVAL_KEY), FIXED_NOW)
    assert state.approvals == () and [a.by for a in state.unverified_approvals] == ["bob"]
    assert f"ignoring {KEY}: it carries no seal: the webhook did not record it" in state.problems
    shown = gate_status(forged, state, FIXED_NOW)
    assert shown["approvals"] is None
    assert [(r["by"], r["unverified"]) for r in shown["unverifiedApprovals"]] == [
        ("bob", approvalseal.UNSEALED)
    ]


def test_a_sealed_approval_verifies_only_on_its_gate_under_its_key_and_unchanged():
    good = freeze(annotations={KEY: stamped()})
    assert not source_write([good]).held
    value = good["metadata"]["annotations"][KEY]

    other_gate = copy.deepcopy(good)  # the same name, deleted and created again: a new uid
    other_gate["metadata"]["uid"] = "uid-recreated"
    assert source_write([other_gate]).held
    other_key = gate("freeze", default="closed", annotations={KEY2: value})
    other_key["metadata"]["uid"] = good["metadata"]["uid"]
    assert source_write([other_key]).held
    for field, changed in (
        ("by", "bob"),
        ("at", "2026-06-10T11:59:00Z"),
        ("expires", "2027-01-01T00:00:00Z"),
    ):
        edited = copy.deepcopy(good)
        fields = json.loads(value)
        fields[field] = changed
        edited["metadata"]["annotations"][KEY] = json.dumps(fields)
        assert source_write([edited]).held, field
        state = evaluate(compile_gate(edited, approval_key=APPROVAL_KEY), FIXED_NOW)
        assert state.unverified_approvals[0].unverified == approvalseal.MISMATCH
    # Sealed with another key (another install's), or read without the key at all.
    other_install = freeze(annotations={KEY: stamped()})
    assert not evaluate(compile_gate(other_install, approval_key=b"another-key" * 4), FIXED_NOW).approvals
    no_key = evaluate(compile_gate(good), FIXED_NOW)
    assert no_key.approvals == () and no_key.unverified_approvals[0].unverified == approvalseal.NO_KEY
    assert not any(KEY in p for p in no_key.problems)  # the reader's limit, not the approval's fault


def test_the_seal_covers_every_field_of_the_value_whatever_fields_come_later():
    fields = {"content": GIT_B, "for": "*", "by": "alice", "at": "2026-06-10T12:00:00Z"}
    sealed_value = approvalseal.seal(APPROVAL_KEY, "uid-1", KEY, fields)
    assert approvalseal.unverified(APPROVAL_KEY, "uid-1", KEY, {**fields, "seal": sealed_value}) is None
    # A field no reader knows today (the policy an approval was given under, say) is sealed too:
    # adding, dropping or changing one breaks the seal.
    for changed in ({**fields, "policy": "required=1"}, {k: v for k, v in fields.items() if k != "for"}):
        assert approvalseal.unverified(APPROVAL_KEY, "uid-1", KEY, {**changed, "seal": sealed_value}) == (
            approvalseal.MISMATCH
        )
    assert (
        approvalseal.unverified(APPROVAL_KEY, "", KEY, {**fields, "seal": sealed_value})
        == approvalseal.NO_UID
    )
    assert approvalseal.canonical("u", KEY, {"b": "1", "a": "2"}) == approvalseal.canonical(
        "u", KEY, {"a": "2", "b": "1", "seal": "x"}
    )
    # Whatever a forger puts in the JSON (a lone surrogate, a seal that is not ASCII), an answer.
    odd = {**fields, "message": "\ud800", "seal": "v1:\u00e9"}
    assert approvalseal.unverified(APPROVAL_KEY, "uid-1", KEY, odd) == approvalseal.MISMATCH
    assert approvalseal.seal(APPROVAL_KEY, "uid-1", KEY, odd).startswith("v1:")


def test_the_validating_webhook_refuses_an_at_the_mutating_one_did_not_write_now():
    context = Context(lookup_from([]), FIXED_NOW, SEALING)
    # The mutating entry absent: the client's own by (the writer's name) and a back-dated at.
    chosen = handlers.validate(_gate_review({KEY: stamped(by="alice")}, {}), context).response
    assert not chosen["allowed"] and "not recorded by the approval webhook" in chosen["status"]["message"]
    # A value the webhook did seal, an hour ago, written again: a replay, not this write's stamp.
    old = json.loads(stamped(by="alice"))
    old["seal"] = approvalseal.seal(APPROVAL_KEY, "uid-freeze", KEY, old)
    replayed = handlers.validate(_gate_review({KEY: json.dumps(old)}, {}), context).response
    assert not replayed["allowed"] and "is not now" in replayed["status"]["message"]


def test_a_gate_is_approved_once_it_exists_and_only_by_a_server_holding_the_key():
    raw = json.dumps({"content": GIT_B, "for": "*", "message": "CHG-1"})
    created = handlers.mutate(_gate_review({KEY: raw}), Context(lookup_from([]), FIXED_NOW, SEALING))
    assert not created.response["allowed"]
    assert "approved once it exists" in created.response["status"]["message"]
    keyless = handlers.mutate(_gate_review({KEY: raw}, {}), Context(lookup_from([]), FIXED_NOW, Settings()))
    assert not keyless.response["allowed"] and "no approval key" in keyless.response["status"]["message"]


def test_a_relayed_name_is_shown_and_never_counted_as_an_approver():
    relay = "system:serviceaccount:gate-admission-system:gate-admission"
    context = Context(lookup_from([]), FIXED_NOW, replace(SEALING, approval_relays=frozenset({relay})))
    recorded = {}
    for key, said in ((KEY, "alice"), (KEY2, "bob")):
        raw = approvals.value(GIT_B, "*", "CHG-1", None, "receiver token ci", requested_by=said)
        outcome = handlers.mutate(_gate_review({key: raw}, {}, user=relay), context)
        recorded[key] = json.loads(orjson.loads(base64.b64decode(outcome.response["patch"]))[0]["value"])
    assert {r["by"] for r in recorded.values()} == {f"receiver token ci via {relay}"}
    assert {r["requestedBy"] for r in recorded.values()} == {"alice", "bob"}
    two = gate("freeze", default="closed", annotations={k: json.dumps(v) for k, v in recorded.items()})
    two["metadata"]["uid"], two["spec"]["approvals"] = "uid-freeze", {"required": 2}
    assert source_write([two]).held  # one token, one approver, whatever names its callers gave
    one = evaluate(compile_gate(two, approval_key=APPROVAL_KEY), FIXED_NOW).approvals[0]
    assert "(requested by 'alice', unverified)" in one.describe() or "'bob'" in one.describe()


def test_kubectl_gate_pending_without_the_key_counts_only_what_the_controller_verified():
    from admission.core.admission.pending import pending_rows

    recorded = freeze(annotations={KEY: stamped(), KEY2: stamped(by="mallory")})
    # The controller (it holds the key) verified KEY only, as its status says; KEY2 is forged.
    state = evaluate(compile_gate(recorded, approval_key=APPROVAL_KEY), FIXED_NOW)
    forged = copy.deepcopy(recorded)
    forged["metadata"]["annotations"][KEY2] = stamped(by="mallory")  # its seal dropped
    recorded["status"] = gate_status(recorded, state, FIXED_NOW)
    forged["status"] = recorded["status"]
    forged["status"]["approvals"] = [r for r in forged["status"]["approvals"] if r["id"] == "a1"]
    held = flux("GitRepository", gates="flux-system/freeze", status={"artifact": art(GIT_A)})
    held["status"]["conditions"] = [
        {
            "type": names.BLOCKED_CONDITION,
            "status": "True",
            "reason": names.GATE_CLOSED_REASON,
            "lastTransitionTime": "2026-06-10T11:00:00Z",
            "message": f"Reconciliation is blocked as gate 'flux-system/freeze' is closed: {GIT_B} waits, serving {GIT_A}",
        }
    ]
    [row] = pending_rows([held], {"flux-system/freeze": forged}, FIXED_NOW)
    assert [a["by"] for a in row["approvals"]] == ["alice"]
    assert [(a["by"], a["unverified"]) for a in row["unverifiedApprovals"]] == [
        ("mallory", approvalview.NOT_VOUCHED)
    ]
    # A status entry that does not match what the annotation now says vouches for nothing.
    forged["metadata"]["annotations"][KEY] = stamped(message="changed afterwards")
    [row] = pending_rows([held], {"flux-system/freeze": forged}, FIXED_NOW)
    assert row["approvals"] == [] and len(row["unverifiedApprovals"]) == 2
