"""A Gate's status (SPEC §2), computed from its state: what the controller writes."""

from __future__ import annotations

from datetime import datetime

from admission.core.base import names
from admission.core.base.objects import Object, metadata
from admission.core.base.timefmt import format_time
from admission.core.flux.conditions import find, status_of, transition_time
from admission.core.gates.gates import GateState


def _previous_condition(status: Object | None) -> Object | None:
    return find({"status": status}, names.OPENED_CONDITION)


def was_open(status: Object | None) -> bool | None:
    """The state the stored status shows: True, False, or None when there is none yet."""
    condition = _previous_condition(status)
    if condition is None or condition.get("status") not in ("True", "False"):
        return None
    return bool(condition["status"] == "True")


def gate_status(gate: Object, state: GateState, now: datetime, previous: Object | None = None) -> Object:
    """The full status for ``gate`` in ``state``; lastTransitionTime moves only on a flip.

    ``previous`` is the last status written, when the caller knows one fresher than the
    object's. Absent optional fields are None, so a JSON merge patch of this dict removes them.
    """
    if previous is None:
        previous = gate.get("status") if isinstance(gate.get("status"), dict) else None
    condition = _previous_condition(previous)
    generation = metadata(gate).get("generation")
    message = state.message
    if state.problems:
        message += " (" + "; ".join(state.problems) + ")"
    return {
        "state": names.STATE_OPENED if state.open else names.STATE_CLOSED,
        "observedGeneration": generation,
        "requestedAt": format_time(state.requested_at) if state.requested_at else None,
        "resetToDefaultAt": format_time(state.reset_to_default_at) if state.reset_to_default_at else None,
        "nextTransitionAt": format_time(state.next_transition) if state.next_transition else None,
        "problems": list(state.problems) or None,
        # Who approved which content (live ones; the ended are in endedApprovals, written by the controller).
        "approvals": [a.row() for a in state.approvals if a.live(now)] or None,
        # Approvals the webhook did not seal (written while its entries were absent, copied, or
        # edited): shown, with why, and never counted.
        "unverifiedApprovals": [a.row() for a in state.unverified_approvals] or None,
        # Who made the toggle in effect, as our webhook's seal says (verified here, with the key).
        names.TOGGLED_BY_FIELD: state.toggled_by.row() if state.toggled_by is not None else None,
        "conditions": [
            {
                "type": names.OPENED_CONDITION,
                "status": "True" if state.open else "False",
                "observedGeneration": generation,
                "lastTransitionTime": transition_time(condition, "True" if state.open else "False", now),
                "reason": state.reason,
                "message": message,
            }
        ],
    }


def status_differs(gate: Object, desired: Object) -> bool:
    """Whether writing ``desired`` would change the stored status."""
    current = status_of(gate)
    return any(current.get(key) != value for key, value in desired.items())


def transition_message(state: GateState) -> str:
    """An Event and log message for a gate that just opened or closed, with who asked and why."""
    verb = "opening" if state.open else "closing"
    text = f"{verb} gate"
    if state.request_message:
        text += f": '{state.request_message}'"
    if state.toggled_by is not None:
        text += f" (by {state.toggled_by.describe()})"
    elif state.requested_by:
        text += f" (requested by {state.requested_by})"
    return f"{text}; {state.message}"
