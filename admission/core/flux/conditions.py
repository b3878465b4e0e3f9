"""Status conditions: find one, set one (the lastTransitionTime rule), and recognise the ones that say we hold an object."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from admission.core.base import names
from admission.core.base.objects import Object
from admission.core.base.objects import status_of as status_of  # read from here too
from admission.core.base.timefmt import format_time
from admission.core.flux import kinds

Condition = dict[str, Any]


def conditions_of(obj: Object | None) -> list[Condition]:
    """The conditions in the object's status (those that are mappings)."""
    found = status_of(obj).get("conditions")
    return [c for c in found if isinstance(c, dict)] if isinstance(found, list) else []


def find(obj: Object | None, kind: str) -> Condition | None:
    """The condition of type ``kind`` in the object's status, or None."""
    return next((c for c in conditions_of(obj) if c.get("type") == kind), None)


def transition_time(previous: Condition | None, status: str, now: datetime) -> str:
    """A condition's lastTransitionTime: it moves only when its status does."""
    since = previous.get("lastTransitionTime") if previous and previous.get("status") == status else None
    return since if isinstance(since, str) and since else format_time(now)


def with_condition(
    conditions: list[Condition],
    kind: str,
    status: str,
    reason: str,
    message: str,
    now: datetime,
    generation: object = None,
) -> list[Condition]:
    """``conditions`` with the one of type ``kind`` set; an identical condition is kept as it is."""
    previous = next((c for c in conditions if c.get("type") == kind), None)
    wanted: Condition = {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": transition_time(previous, status, now),
    }
    if generation is not None:
        wanted["observedGeneration"] = generation
    elif previous and "observedGeneration" in previous:
        wanted["observedGeneration"] = previous["observedGeneration"]
    if previous is None:
        return [*conditions, wanted]
    return [wanted if c is previous else c for c in conditions]


def without_condition(conditions: list[Condition], kind: str) -> list[Condition]:
    """``conditions`` without our condition of type ``kind`` (reason GateClosed): a condition
    of that type someone else wrote is theirs."""
    return [c for c in conditions if c.get("type") != kind or c.get("reason") != names.GATE_CLOSED_REASON]


# Our hold conditions, and the status each has while the object is held.
_HOLDING = {names.BLOCKED_CONDITION: "True", names.APPROVED_CONDITION: "False"}


def holding_condition(obj: Object | None, kind: str | None = None) -> Condition | None:
    """Our Blocked (True) or Approved (False) condition with reason GateClosed: the object is held
    now. ``kind`` (else the object's own) says which of the two its kind carries; an object of
    no kind we know is looked at for either."""
    kind = kind if kind is not None else (obj or {}).get("kind")
    row = kinds.BY_KIND.get(kind) if isinstance(kind, str) else None
    types = (row.hold_condition,) if row is not None else tuple(_HOLDING)
    for condition in conditions_of(obj):
        if (
            condition.get("type") in types
            and condition.get("reason") == names.GATE_CLOSED_REASON
            and condition.get("status") == _HOLDING.get(str(condition.get("type")))
        ):
            return condition
    return None
