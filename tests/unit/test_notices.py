"""Which status changes of a Flux object deserve a notification: one per hold and per release."""

import copy

from admission.core.admission.notices import HELD, RELEASED, RELEASED_REASON, expected_opening, notice
from admission.core.base import names
from admission.core.flux.conditions import holding_condition
from admission.core.gates.gates import GateState, Lazy, Transition
from admission.core.gates.togglestamp import UNSTAMPED
from tests.builders import at, flux, gate, keeper, lookup_from

NOW = at("2026-12-21T10:00")
FREEZE = gate("change-freeze", default="opened")
FREEZE_KEEPER = keeper("freeze", "change-freeze", closed=["* * 20-31 12 *"], timeZone="Europe/Berlin")
OPENED = gate(
    "change-freeze",
    default="opened",
    annotations={
        names.OPEN_ANNOTATION: "2026-12-21T09:59:00Z",
        names.REQUESTED_BY_ANNOTATION: "bob",
        names.MESSAGE_ANNOTATION: "Patching a CVE",
    },
)
BLOCKED = "Reconciliation is blocked as gate 'flux-system/change-freeze' is closed: main@sha1:9f2c waits, serving main@sha1:41ab"


def source(*conditions: dict) -> dict:
    return flux(
        "GitRepository",
        "podinfo",
        "flux-system",
        gates="flux-system/change-freeze",
        status={"conditions": list(conditions), "artifact": {"revision": "main@sha1:41ab"}},
    )


def blocked(message: str = BLOCKED) -> dict:
    return {
        "type": names.BLOCKED_CONDITION,
        "status": "True",
        "reason": names.GATE_CLOSED_REASON,
        "message": message,
    }


READY = {
    "type": "Ready",
    "status": "True",
    "reason": "Succeeded",
    "message": "stored artifact for revision 'main@sha1:41ab'",
}


def test_a_new_hold_is_one_notice_with_gates_revisions_and_expected_opening():
    found = notice(source(READY), source(READY, blocked()), lookup_from([FREEZE], [FREEZE_KEEPER]), NOW)
    assert found.what == HELD and found.reason == "GateClosed"
    assert found.message.startswith("GitRepository flux-system/podinfo is held: " + BLOCKED)
    assert "gate 'flux-system/change-freeze': Gate closed by GateKeeper 'freeze'" in found.message
    assert found.message.endswith("expected to open at 2026-12-31T23:00:00Z)")  # midnight Berlin
    assert found.metadata == {
        "gates": "flux-system/change-freeze",
        "waiting": "main@sha1:9f2c",
        "serving": "main@sha1:41ab",
        "opensAt": "2026-12-31T23:00:00Z",
    }


def test_status_writes_that_keep_the_hold_as_it_was_send_nothing():
    held = source(READY, blocked())
    again = copy.deepcopy(held)
    again["status"]["conditions"][0]["lastTransitionTime"] = "2026-12-21T10:05:00Z"
    assert notice(held, again, lookup_from([FREEZE], [FREEZE_KEEPER]), NOW) is None


def test_another_revision_waiting_is_a_new_hold():
    newer = BLOCKED.replace("9f2c", "77aa")
    found = notice(source(blocked()), source(blocked(newer)), lookup_from([FREEZE], [FREEZE_KEEPER]), NOW)
    assert found.what == HELD and found.metadata["waiting"] == "main@sha1:77aa"


def test_a_release_says_what_proceeds_and_who_opened_the_gate():
    found = notice(source(blocked()), source(READY), lookup_from([OPENED], [FREEZE_KEEPER]), NOW)
    assert found.what == RELEASED and found.reason == RELEASED_REASON
    assert found.message == (
        "GitRepository flux-system/podinfo released: main@sha1:9f2c proceeds; gate "
        "'flux-system/change-freeze' is open (Gate open requested; opened by an unverified identity "
        f"(requestedBy says 'bob', {UNSTAMPED}): 'Patching a CVE')"
    )
    assert found.metadata == {
        "gates": "flux-system/change-freeze",
        "released": "main@sha1:9f2c",
        "requestedBy": "bob",
        "openedBy": f"an unverified identity (requestedBy says 'bob', {UNSTAMPED})",
    }


def test_a_kustomization_waiting_for_approval_is_held_and_released():
    waiting = {
        "type": names.APPROVED_CONDITION,
        "status": "False",
        "reason": names.GATE_CLOSED_REASON,
        "message": "Reconciliation is waiting approval, gate 'flux-system/sre-approval' is closed.",
    }
    approval = gate("sre-approval", default="closed")
    ks = flux(gates="flux-system/sre-approval", status={"conditions": [READY]})
    held = flux(gates="flux-system/sre-approval", status={"conditions": [waiting]})
    found = notice(ks, held, lookup_from([approval]), NOW)
    assert found.what == HELD and found.message.endswith(
        "(gate 'flux-system/sre-approval': Gate closed by default; no opening is scheduled)"
    )
    assert "opensAt" not in found.metadata
    approved = {"type": names.APPROVED_CONDITION, "status": "True", "reason": "Approved", "message": "ok"}
    done = notice(
        held,
        flux(gates="flux-system/sre-approval", status={"conditions": [approved]}),
        lookup_from([gate("sre-approval", default="opened")]),
        NOW,
    )
    assert done.what == RELEASED and done.message.startswith(
        "Kustomization apps/podinfo released: the held change proceeds"
    )


def test_other_conditions_and_deletions_send_nothing():
    lookup = lookup_from([FREEZE], [FREEZE_KEEPER])
    not_ours = {"type": names.BLOCKED_CONDITION, "status": "True", "reason": "SomethingElse", "message": "x"}
    assert holding_condition(source(not_ours)) is None
    assert notice(source(READY), source(READY, not_ours), lookup, NOW) is None
    assert notice(source(blocked()), None, lookup, NOW) is None  # deleted while held
    assert notice(None, source(READY), lookup, NOW) is None
    assert notice({"status": "garbage"}, {"status": {"conditions": "nope"}}, lookup, NOW) is None


def test_expected_opening_is_the_last_under_all_and_the_first_under_one_of():
    a = GateState("ns", "a", False, "Default", "", transition=Lazy.of(Transition(at("2026-12-22T00:00"))))
    b = GateState("ns", "b", False, "Default", "", transition=Lazy.of(Transition(at("2026-12-24T00:00"))))
    never = GateState("ns", "c", False, "Default", "")
    assert expected_opening((a, b), "all") == at("2026-12-24T00:00")
    assert expected_opening((a, b, never), "all") is None
    assert expected_opening((b, a, never), "oneOf") == at("2026-12-22T00:00")
    assert expected_opening((), "all") is None


def test_a_hold_whose_opening_was_not_found_in_time_never_says_no_opening_is_scheduled():
    # Closed every quarter hour, open at night: the search gives up long before 00:01 Berlin.
    approval = gate("sre-approval", default="closed")
    nights = keeper(
        "nights",
        "sre-approval",
        closed=["*/15 * * * *"],
        opened=["* 0-4 * * *", "0,15,30,45 * * * *"],
        timeZone="Europe/Berlin",
    )
    waiting = {
        "type": names.APPROVED_CONDITION,
        "status": "False",
        "reason": names.GATE_CLOSED_REASON,
        "message": "Reconciliation is waiting approval, gate 'flux-system/sre-approval' is closed.",
    }
    found = notice(
        flux(gates="flux-system/sre-approval", status={"conditions": [READY]}),
        flux(gates="flux-system/sre-approval", status={"conditions": [waiting]}),
        lookup_from([approval], [nights]),
        NOW,
    )
    assert "no opening is scheduled" not in found.message and "opensAt" not in found.metadata
    assert found.message.endswith(
        f"when it opens is not known, not before {found.metadata['opensNotBefore']})"
    )


def test_revisions_with_dots_ellipses_and_spaces_are_read_whole():
    chart = BLOCKED.replace("main@sha1:9f2c", "6.1.0@sha256:ab12…").replace(
        "main@sha1:41ab", "6.0.2@sha256:cd34…"
    )
    found = notice(source(READY), source(READY, blocked(chart)), lookup_from([FREEZE], [FREEZE_KEEPER]), NOW)
    assert (found.metadata["waiting"], found.metadata["serving"]) == (
        "6.1.0@sha256:ab12…",
        "6.0.2@sha256:cd34…",
    )
    # A HelmRelease's values: what waits has spaces in it, and is read as the webhook wrote it.
    values = BLOCKED.replace("main@sha1:9f2c", "6.5.0 (values sha256:v2)").replace(
        "main@sha1:41ab", "6.5.0 (values sha256:v1)"
    )
    found = notice(source(READY), source(READY, blocked(values)), lookup_from([FREEZE], [FREEZE_KEEPER]), NOW)
    assert (found.metadata["waiting"], found.metadata["serving"]) == (
        "6.5.0 (values sha256:v2)",
        "6.5.0 (values sha256:v1)",
    )


def test_a_hold_first_seen_is_announced_only_if_it_began_recently():
    # A controller that starts (a rollout, a new leader) sees every held object for the first time.
    lookup = lookup_from([FREEZE], [FREEZE_KEEPER])

    def held_since(stamp: str | None) -> dict:
        condition = blocked()
        if stamp is not None:
            condition["lastTransitionTime"] = stamp
        return source(READY, condition)

    assert (
        notice(None, held_since("2026-12-21T09:00:00Z"), lookup, NOW) is None
    )  # announced by the last controller
    assert notice(None, held_since("2026-12-21T09:58:00Z"), lookup, NOW).what == HELD  # may have been missed
    assert notice(None, held_since(None), lookup, NOW).what == HELD  # unknown: said rather than lost
    assert (
        notice(source(READY), held_since("2026-12-21T09:00:00Z"), lookup, NOW).what == HELD
    )  # seen to begin
