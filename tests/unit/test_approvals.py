"""Approvals of exact content: parsing, the approver's stamp, the webhooks' answers, and the hold
points letting exactly the approved content through (admission.core.approvals, approvalreview)."""

from __future__ import annotations

import base64
import copy
import json
from dataclasses import replace
from datetime import timedelta

import orjson

from admission.core import approvals
from admission.core import approvalseal
from admission.core import names
from admission.core.decision import Context, Settings, decide
from admission.core.gates import evaluate
from admission.core.gatespec import compile_gate
from admission.core.status import gate_status
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
) -> str:
    return json.dumps(
        {
            "content": content,
            "for": target,
            "message": message,
            "by": by,
            "at": "2026-06-10T11:00:00Z",
            "expires": expires,
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
    out = json.loads(approvals.stamp(raw, "alice", FIXED_NOW, timedelta(hours=1), frozenset(), seal_with))
    assert (out["by"], out["at"], out["expires"]) == ("alice", "2026-06-10T12:00:00Z", "2026-06-10T13:00:00Z")
    relay = "system:serviceaccount:gate-admission-system:gate-admission"
    relayed = json.loads(
        approvals.stamp(raw, relay, FIXED_NOW, timedelta(hours=1), frozenset({relay}), seal_with)
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


def test_a_chart_version_approval_covers_a_release_whose_values_stay():
    gates = [freeze(annotations={KEY: stamped(content="6.6.0")})]
    old = flux("HelmRelease", gates="flux-system/freeze", spec={}, status=hr_status())
    same_values = flux(
        "HelmRelease",
        gates="flux-system/freeze",
        spec={},
        status=hr_status(attempted=("6.6.0", "", "sha256:v1")),
    )
    new_values = flux(
        "HelmRelease",
        gates="flux-system/freeze",
        spec={},
        status=hr_status(attempted=("6.6.0", "", "sha256:v2")),
    )
    context = Context(lookup_from(gates), FIXED_NOW, Settings())
    assert not decide(
        request("UPDATE", same_values, old, sub_resource="status", user=FLUX_USER), context
    ).held
    assert decide(request("UPDATE", new_values, old, sub_resource="status", user=FLUX_USER), context).held


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
    from admission.cli.approve import pending_rows

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
        ("mallory", approvals.NOT_VOUCHED)
    ]
    # A status entry that does not match what the annotation now says vouches for nothing.
    forged["metadata"]["annotations"][KEY] = stamped(message="changed afterwards")
    [row] = pending_rows([held], {"flux-system/freeze": forged}, FIXED_NOW)
    assert row["approvals"] == [] and len(row["unverifiedApprovals"]) == 2
