"""The verdict on a request, and the one message that explains a denial (SPEC §5)."""

import copy

import pytest

from admission.core.admission.decision import Context, Settings, decide
from admission.core.base.names import OPEN_ANNOTATION
from tests.builders import FLUX_USER, at, changed, flux, gate, keeper, lookup_from, request

NOW = at("2026-06-10T12:00")
ENFORCE = Settings()
AUDIT = Settings(mode="audit")
CLOSED = gate("sre-approval", default="closed")
OPEN = gate("qa-approval")


def judge(req, gates=(CLOSED, OPEN), keepers=(), settings=ENFORCE, now=NOW):
    return decide(req, Context(lookup_from(list(gates), list(keepers)), now, settings))


def spec_update(obj, user=None):
    return request("UPDATE", changed(obj, path="./v2"), obj, user=user)


KS = flux(gates="flux-system/sre-approval, flux-system/qa-approval")


def test_spec_message_example():
    d = judge(spec_update(flux(gates="flux-system/sre-approval")))
    assert not d.allowed and d.held and d.mode == "enforce" and d.change == "spec change"
    assert d.message == (
        "Kustomization apps/podinfo is held: gate 'flux-system/sre-approval' is closed "
        "(Gate closed by default); require=all; changed: spec.path"
    )


def test_require_all_held_while_any_gate_is_closed_and_lists_only_closed_ones():
    d = judge(spec_update(KS))
    assert not d.allowed and "qa-approval" not in d.message


def test_require_one_of_passes_when_one_is_open_and_lists_every_gate_when_none_is():
    one_of = flux(gates="flux-system/sre-approval, flux-system/qa-approval", require="oneOf")
    assert judge(spec_update(one_of)).allowed
    both_closed = [CLOSED, gate("qa-approval", closed=True)]
    d = judge(spec_update(one_of), gates=both_closed)
    assert not d.allowed
    assert "gate 'flux-system/sre-approval' is closed" in d.message
    assert "gate 'flux-system/qa-approval' is closed" in d.message
    assert d.message.endswith("require=oneOf; changed: spec.path")


def test_a_missing_gate_is_closed_and_named():
    d = judge(spec_update(flux(gates="flux-system/nope")))
    assert not d.allowed and "gate 'flux-system/nope' is closed (Gate not found)" in d.message


def test_an_unusable_reference_is_closed_with_its_error():
    d = judge(spec_update(flux(gates="a/b/c")))
    assert not d.allowed and "not a valid [namespace/]name" in d.message


def test_the_next_opening_time_is_in_the_message_when_known():
    planned = gate(
        "sre-approval", default="closed", window="1h", annotations={OPEN_ANNOTATION: "2026-06-11T09:00:00Z"}
    )
    d = judge(spec_update(flux(gates="flux-system/sre-approval")), gates=[planned])
    assert "(Gate closed by default; opens at 2026-06-11T09:00:00Z)" in d.message


def test_scheduled_freeze_names_the_gatekeeper_and_the_opening():
    k = keeper("change-freeze-gatekeeper", "change-freeze", closed=["* * 20-30 11 *"])
    d = judge(
        spec_update(flux(gates="flux-system/change-freeze")),
        gates=[gate("change-freeze")],
        keepers=[k],
        now=at("2026-11-21T20:00"),
    )
    assert (
        "gate 'flux-system/change-freeze' is closed (Gate closed by GateKeeper 'change-freeze-gatekeeper' "
        "schedule '* * 20-30 11 *'; opens at 2026-12-01T00:00:00Z)"
    ) in d.message


def test_open_gates_allow_and_report_the_judged_gates():
    d = judge(spec_update(flux(gates="flux-system/qa-approval")))
    assert d.allowed and not d.held and d.gated
    assert [s.key for s in d.hold.states] == ["flux-system/qa-approval"]


def test_objects_without_gates_pass():
    assert judge(spec_update(flux())).allowed


@pytest.mark.parametrize("operation", ["CREATE", "DELETE"])
def test_create_and_delete_are_held(operation):
    req = request(operation, KS if operation == "CREATE" else None, KS if operation == "DELETE" else None)
    d = judge(req)
    assert not d.allowed and d.change == ("creation" if operation == "CREATE" else "deletion")


def test_delete_by_namespace_controller_or_garbage_collector_always_passes():
    for user in (
        "system:serviceaccount:kube-system:namespace-controller",
        "system:serviceaccount:kube-system:generic-garbage-collector",
    ):
        assert judge(request("DELETE", None, KS, user={"username": user, "groups": []})).allowed


def test_adding_an_owner_reference_to_a_held_object_is_held():
    # A dangling owner would let the garbage collector delete what a closed gate holds.
    new = copy.deepcopy(KS)
    new["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "gone", "uid": "dead"}
    ]
    d = judge(request("UPDATE", new, KS))
    assert not d.allowed and d.change == "owner references change"
    assert d.message.endswith("require=all; changed: metadata.ownerReferences")
    assert judge(request("UPDATE", new, KS), gates=(gate("sre-approval"), OPEN)).allowed
    assert judge(request("UPDATE", KS, new)).allowed  # removing it cannot delete anything


def test_the_garbage_collector_removes_owner_references_of_held_objects():
    owners = [{"apiVersion": "v1", "kind": "ConfigMap", "name": n, "uid": n} for n in ("gone", "alive")]
    old = copy.deepcopy(KS)
    old["metadata"]["ownerReferences"] = owners
    new = copy.deepcopy(KS)
    new["metadata"]["ownerReferences"] = owners[1:]
    gc = {"username": "system:serviceaccount:kube-system:generic-garbage-collector", "groups": []}
    assert judge(request("UPDATE", new, old, user=gc)).allowed
    assert not judge(request("UPDATE", new, old)).allowed  # anyone else: the owner left may be gone
    spec_change = changed(new, path="./v2")
    assert not judge(request("UPDATE", spec_change, old, user=gc)).allowed


def a_delete_without_old_object(user=None):
    req = request("DELETE", None, KS, user=user)
    req["oldObject"] = None  # what API servers before 1.15 sent
    return req


def test_a_delete_without_the_old_object_is_held_as_its_gates_cannot_be_read():
    d = judge(a_delete_without_old_object(), gates=(gate("sre-approval"), OPEN))  # held even if all are open
    assert not d.allowed and d.held and d.change == "deletion"
    assert d.message == (
        "Kustomization apps/podinfo is held: the request carries no oldObject (the object being "
        "deleted), so whether its gates allow deleting it is unknown"
    )
    audited = judge(a_delete_without_old_object(), settings=AUDIT)
    assert audited.allowed and audited.held and audited.mode == "audit"


def test_a_delete_without_the_old_object_passes_for_exempt_users_and_the_namespace_controller():
    assert judge(a_delete_without_old_object(), settings=Settings(exempt_users=frozenset({"alice"}))).allowed
    controller = {"username": "system:serviceaccount:kube-system:namespace-controller", "groups": []}
    assert judge(a_delete_without_old_object(controller)).allowed
    req = a_delete_without_old_object()
    req["kind"] = {"group": "apps", "version": "v1", "kind": "Deployment"}
    assert judge(req).allowed  # not a kind we gate


def test_metadata_only_updates_pass_while_held():
    new = copy.deepcopy(KS)
    new["metadata"]["labels"] = {"team": "web"}
    assert judge(request("UPDATE", new, KS)).allowed


def test_an_update_must_satisfy_the_policy_it_leaves():
    # Removing the reference to a closed gate is itself held.
    d = judge(request("UPDATE", flux(gates="flux-system/qa-approval"), KS))
    assert not d.allowed and d.change == "removes gate references 'flux-system/sre-approval'"
    assert "gate 'flux-system/sre-approval' is closed" in d.message


def test_under_one_of_a_reference_added_to_an_open_gate_is_held_while_held():
    # Two closed gates under oneOf; the update only names a third, open, in another namespace.
    old = flux(gates="flux-system/sre-approval, flux-system/qa-approval", require="oneOf")
    new = flux(gates="flux-system/sre-approval, flux-system/qa-approval, team/open", require="oneOf")
    both_closed = [CLOSED, gate("qa-approval", closed=True), gate("open", "team")]
    d = judge(request("UPDATE", new, old), gates=both_closed)
    assert not d.allowed and d.change == "adds gate references 'team/open' under require oneOf"
    assert d.message == (
        "Kustomization apps/podinfo is held: gate 'flux-system/sre-approval' is closed (Gate closed "
        "by default), gate 'flux-system/qa-approval' is closed (Gate closed by default); "
        "require=oneOf; adds gate references 'team/open' under require oneOf"
    )
    # Not held, the same update passes: nothing is released that was held.
    assert judge(
        request("UPDATE", new, old), gates=[CLOSED, gate("qa-approval"), gate("open", "team")]
    ).allowed


def test_a_policy_change_that_would_release_a_held_object_is_held_however_it_is_spelt():
    # The same reference key, unusable before (a namespace that is a number) and usable after:
    # nothing is removed or loosened as written, yet the gate it now names is open.
    old = flux(spec={"interval": "1m", "gates": [{"name": "approval", "namespace": 5}]})
    new = flux(spec={"interval": "1m", "gates": [{"name": "approval", "namespace": "5"}]})
    d = judge(request("UPDATE", new, old), gates=[gate("approval", "5")])
    assert not d.allowed and d.held
    assert d.message.startswith(
        "Kustomization apps/podinfo is held: gate '5/approval' is closed (Gate is invalid: gate reference"
    )
    assert d.message.endswith(
        "; require=all; the new gate policy would release it: gate '5/approval' is open"
    )


def test_an_update_must_satisfy_the_policy_it_enters():
    # A spec change that also adds a closed gate is held by the new policy.
    old = flux(gates="flux-system/qa-approval")
    new = changed(flux(gates="flux-system/qa-approval, flux-system/sre-approval"), path="./v2")
    assert not judge(request("UPDATE", new, old)).allowed


def test_adding_a_closed_gate_without_other_changes_passes():
    old = flux(gates="flux-system/qa-approval")
    assert judge(
        request("UPDATE", flux(gates="flux-system/qa-approval, flux-system/sre-approval"), old)
    ).allowed


def test_suspend_during_window_holds_like_a_closed_gate():
    obj = flux(annotations={"reconcile.fluxcd.io/suspendDuring": "* 0-4 * * *"})
    d = judge(spec_update(obj), now=at("2026-06-10T03:00"))
    assert not d.allowed
    assert d.message == (
        "Kustomization apps/podinfo is held: suspended by reconcile.fluxcd.io/suspendDuring "
        "'* 0-4 * * *' until 2026-06-10T05:00:00Z; changed: spec.path"
    )
    assert judge(spec_update(obj)).allowed


def test_spec_suspend_alone_does_not_hold():
    assert judge(spec_update(flux(spec={"suspend": True, "path": "./a"}))).allowed


def test_exempt_users_and_groups_always_pass():
    settings = Settings(exempt_users=frozenset({"alice"}))
    d = judge(spec_update(KS), settings=settings)
    assert d.allowed and d.exempt == "user 'alice' is exempt"
    settings = Settings(exempt_groups=frozenset({"sre", "developers"}))
    assert judge(spec_update(KS), settings=settings).exempt == "group 'developers' is exempt"
    assert not judge(spec_update(KS, user=FLUX_USER), settings=settings).allowed


def test_audit_mode_allows_what_enforce_denies():
    d = judge(spec_update(KS), settings=AUDIT)
    assert d.allowed and d.held and d.mode == "audit" and "is held" in d.message


def test_a_gate_in_audit_mode_only_warns_on_an_enforcing_server():
    d = judge(spec_update(flux(gates="flux-system/soft")), gates=[gate("soft", closed=True, mode="audit")])
    assert d.allowed and d.held and d.mode == "audit"


def test_an_enforcing_gate_enforces_on_an_audit_server():
    d = judge(
        spec_update(flux(gates="flux-system/hard")),
        gates=[gate("hard", closed=True, mode="enforce")],
        settings=AUDIT,
    )
    assert not d.allowed and d.mode == "enforce"


def test_one_enforcing_closed_gate_is_enough_to_deny():
    gates = [gate("soft", closed=True, mode="audit"), gate("hard", closed=True)]
    d = judge(spec_update(flux(gates="flux-system/soft, flux-system/hard")), gates=gates)
    assert not d.allowed


def test_kinds_that_are_not_gated_pass_untouched():
    req = spec_update(KS)
    req["kind"] = {"group": "apps", "version": "v1", "kind": "Deployment"}
    d = judge(req)
    assert d.allowed and not d.gated


def test_status_writes_of_sources_that_advance_the_artifact_are_held():
    repo = flux(
        "GitRepository",
        "podinfo",
        "flux-system",
        gates="sre-approval",
        status={"artifact": {"revision": "main@sha1:aaa", "digest": "sha256:1"}},
    )
    newer = copy.deepcopy(repo)
    newer["status"]["artifact"] = {"revision": "main@sha1:bbb", "digest": "sha256:2"}
    d = judge(request("UPDATE", newer, repo, sub_resource="status", user=FLUX_USER))
    assert not d.allowed and d.message.startswith("GitRepository flux-system/podinfo is held")
    newer["status"]["artifact"] = repo["status"]["artifact"]
    newer["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    assert judge(request("UPDATE", newer, repo, sub_resource="status", user=FLUX_USER)).allowed


def test_a_values_edit_from_false_to_0_is_held_and_the_message_names_it():
    release = flux(
        "HelmRelease",
        gates="flux-system/sre-approval",
        spec={"interval": "10m", "values": {"debug": False, "replicas": 1, "ratio": 0}},
    )
    new = changed(release, values={"debug": 0, "replicas": 1.0, "ratio": -0.0})
    d = judge(request("UPDATE", new, release))
    assert not d.allowed and d.change == "spec change"
    assert d.message.endswith("; changed: spec.values.debug, spec.values.replicas, spec.values.ratio")


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE", "DELETE"])
def test_a_closed_gate_named_after_65_repeats_of_an_open_one_still_holds(operation):
    freeze, still_open = gate("freeze", closed=True), gate("open")
    obj = flux(gates=", ".join(["flux-system/open"] * 65 + ["flux-system/freeze"]))
    req = {
        "CREATE": request("CREATE", obj),
        "UPDATE": spec_update(obj),
        "DELETE": request("DELETE", None, obj),
    }[operation]
    d = judge(req, gates=[freeze, still_open])
    assert not d.allowed and "gate 'flux-system/freeze' is closed" in d.message
    assert judge(req, gates=[gate("freeze"), still_open]).allowed


def test_an_object_naming_too_many_gates_is_held_and_told_the_limit():
    obj = flux(gates=", ".join(f"flux-system/g{i}" for i in range(65)))
    d = judge(spec_update(obj), gates=[gate(f"g{i}") for i in range(65)])
    assert not d.allowed and "more than the 64 distinct gate references allowed" in d.message


def test_dry_run_gets_the_same_verdict():
    req = spec_update(KS)
    req["dryRun"] = True
    assert judge(req) == judge(spec_update(KS))
