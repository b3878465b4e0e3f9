"""The Gate status the controller writes, computed from a state (SPEC §2)."""

from admission.core.base.names import (
    CLOSE_ANNOTATION,
    MESSAGE_ANNOTATION,
    OPEN_ANNOTATION,
    REQUESTED_BY_ANNOTATION,
)
from admission.core.gates.gates import evaluate
from admission.core.gates.gatespec import compile_gate
from admission.core.gates.status import gate_status, status_differs, transition_message, was_open
from admission.core.gates.togglestamp import UNSTAMPED
from tests.builders import at, gate


def state_of(obj, now):
    return evaluate(compile_gate(obj), now)


def test_rfc_story_1_status_after_an_open_request():
    obj = gate(
        "sre-approval", default="closed", window="1h", annotations={OPEN_ANNOTATION: "2021-03-26T10:00:00Z"}
    )
    obj["metadata"]["generation"] = 2
    now = at("2021-03-26T10:00")
    status = gate_status(obj, state_of(obj, now), now)
    assert status == {
        "state": "Opened",
        "observedGeneration": 2,
        "requestedAt": "2021-03-26T10:00:00Z",
        "resetToDefaultAt": "2021-03-26T11:00:00Z",
        "nextTransitionAt": "2021-03-26T11:00:00Z",
        "problems": None,
        "approvals": None,
        "unverifiedApprovals": None,
        # No stamp of our webhook: who opened it is not known (break-glass, or a gates file).
        "toggledBy": {"verified": False, "reason": UNSTAMPED},
        "conditions": [
            {
                "type": "Opened",
                "status": "True",
                "observedGeneration": 2,
                "lastTransitionTime": "2021-03-26T10:00:00Z",
                "reason": "OpenRequested",
                "message": "Gate scheduled for closing at 2021-03-26T11:00:00Z",
            }
        ],
    }


def test_last_transition_time_moves_only_when_the_state_flips():
    obj = gate("g", default="closed")
    first = gate_status(obj, state_of(obj, at("2026-01-01T00:00")), at("2026-01-01T00:00"))
    obj["status"] = first
    again = gate_status(obj, state_of(obj, at("2026-01-02T00:00")), at("2026-01-02T00:00"))
    assert again["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert not status_differs(obj, again)
    obj["metadata"]["annotations"] = {OPEN_ANNOTATION: "2026-01-03T00:00:00Z"}
    flipped = gate_status(obj, state_of(obj, at("2026-01-03T00:00")), at("2026-01-03T00:00"))
    assert flipped["conditions"][0]["lastTransitionTime"] == "2026-01-03T00:00:00Z" and status_differs(
        obj, flipped
    )


def test_a_fresher_previous_status_wins_over_the_objects():
    obj = gate("g", default="closed")
    previous = gate_status(obj, state_of(obj, at("2026-01-01T00:00")), at("2026-01-01T00:00"))
    status = gate_status(
        obj, state_of(obj, at("2026-01-05T00:00")), at("2026-01-05T00:00"), previous=previous
    )
    assert status["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"


def test_problems_are_reported_in_status_and_message():
    obj = gate("g", annotations={CLOSE_ANNOTATION: "tomorrow"})
    status = gate_status(obj, state_of(obj, at("2026-01-01T00:00")), at("2026-01-01T00:00"))
    assert "close.gate.fluxcd.io/requestedAt" in status["problems"][0]
    assert status["conditions"][0]["message"].startswith("Gate opened by default (ignoring close.gate")


def test_invalid_gates_explain_themselves():
    obj = gate("g", default="opened", closed=True)
    status = gate_status(obj, state_of(obj, at("2026-01-01T00:00")), at("2026-01-01T00:00"))
    assert status["state"] == "Closed" and status["conditions"][0]["reason"] == "Invalid"
    assert "contradicts" in status["conditions"][0]["message"]


def test_was_open_reads_the_stored_condition():
    assert was_open(None) is None and was_open({}) is None
    assert was_open({"conditions": [{"type": "Opened", "status": "True"}]}) is True
    assert was_open({"conditions": [{"type": "Opened", "status": "False"}]}) is False


def test_transition_messages_carry_the_toggle_message_and_requester():
    obj = gate(
        "bypass-signoff",
        closed=True,
        annotations={
            OPEN_ANNOTATION: "2026-01-01T00:00:00Z",
            MESSAGE_ANNOTATION: "Patching a CVE",
            REQUESTED_BY_ANNOTATION: "bob",
        },
    )
    text = transition_message(state_of(obj, at("2026-01-01T00:00")))
    assert text == (
        "opening gate: 'Patching a CVE' (by an unverified identity (requestedBy says 'bob', "
        f"{UNSTAMPED})); Gate open requested"
    )
    plain = transition_message(state_of(gate("g", closed=True), at("2026-01-01T00:00")))
    assert plain == "closing gate; Gate closed by default"
