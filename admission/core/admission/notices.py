"""Holds and releases worth a notification: what changed between two versions of a Flux object.

The mutating webhook marks a held Flux object with a condition whose reason is ``GateClosed``
(``Blocked=True`` on sources and ImagePolicy, ``Approved=False`` on Kustomization and
HelmRelease) and removes it on the first status write after the release. Comparing an object's
old and new conditions therefore says when a change was held and when it was released, once,
however many status writes happen in between.

A hold seen for the first time (``old`` is None: the controller started, or a follower that
saw it became leader) is announced only if it began within ``FIRST_SIGHT_WINDOW``: an older
one was announced by the controller that ran before, and every rollout would otherwise repeat
every hold in the cluster to every Alert. A hold that began while no controller led for longer
than that window goes unannounced; ``kubectl gate get`` and the object's conditions show it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from admission.core.admission.decision import Hold, Lookup, own_hold
from admission.core.base import names
from admission.core.base.objects import Object, metadata
from admission.core.base.timefmt import format_time, parse_time
from admission.core.flux import holdmessage
from admission.core.flux.conditions import holding_condition
from admission.core.gates.gates import GateState

HELD, RELEASED = "held", "released"
FIRST_SIGHT_WINDOW = timedelta(minutes=5)  # a controller restart or leader handover is shorter
RELEASED_REASON = "HoldReleased"


@dataclass(frozen=True)
class Notice:
    """One notification about a Flux object: held or released, with the details as metadata."""

    what: str  # HELD or RELEASED
    reason: str
    message: str
    metadata: dict[str, str] = field(default_factory=dict)  # keys without the API group prefix


def _announced_before(condition: Object, now: datetime) -> bool:
    """Whether a hold first seen now is old enough to have been announced already."""
    stamp = condition.get("lastTransitionTime")
    try:
        since = parse_time(stamp) if isinstance(stamp, str) else None
    except ValueError:
        since = None
    if since is None:
        return False  # unknown: say it rather than stay silent
    return now - since > FIRST_SIGHT_WINDOW


def _revisions(message: str) -> dict[str, str]:
    hold = holdmessage.parse(message)
    if hold is None:
        return {}
    return {k: v for k, v in (("waiting", hold.content.waits), ("serving", hold.content.serves)) if v}


def expected_opening(closed: tuple[GateState, ...], require: str) -> datetime | None:
    """When the closed gates are expected to let the object through: under ``all`` the last of
    their next openings, under ``oneOf`` the first; None when one that matters is unknown."""
    times = [s.next_transition for s in closed]
    if not times:
        return None
    if require == names.REQUIRE_ONE_OF:
        known = [t for t in times if t is not None]
        # A gate whose search gave up may open first: then the first opening is not known.
        if known and all(min(known) <= after for s in closed if (after := s.transition_unknown_after)):
            return min(known)
        return None
    known = [t for t in times if t is not None]
    return None if len(known) < len(times) else max(known)


def opening_not_before(closed: tuple[GateState, ...], require: str) -> datetime | None:
    """When the opening is not known because a search gave up (not because none is scheduled):
    the instant before which the object is not let through. None otherwise."""
    bounds = [s.next_transition or s.transition_unknown_after for s in closed]
    if not any(s.transition_unknown_after for s in closed):
        return None
    if require == names.REQUIRE_ONE_OF:
        return min(b for b in bounds if b is not None)
    return (
        None if None in bounds else max(b for b in bounds if b is not None)
    )  # one never opens: none scheduled


def _opened_clause(state: GateState) -> str:
    detail = state.message
    if state.reason == names.REASON_OPEN_REQUESTED and (
        state.toggled_by or state.requested_by or state.request_message
    ):
        # Who the API server said opened it (our webhook's stamp), else the client's own words.
        by = state.toggled_by.describe() if state.toggled_by is not None else state.requested_by
        detail += "; opened" + (f" by {by}" if by else "")
        detail += f": '{state.request_message}'" if state.request_message else ""
    return f"gate '{state.key}' is open ({detail})"


def notice(old: Object | None, new: Object | None, lookup: Lookup, now: datetime) -> Notice | None:
    """The notification that the change from ``old`` to ``new`` deserves, if any: a new hold (or a
    hold whose message changed: another revision waits), or a release; None for anything else."""
    before, after = holding_condition(old), holding_condition(new)
    obj = new if new is not None else old
    meta = metadata(obj)
    label = f"{(obj or {}).get('kind', 'object')} {meta.get('namespace')}/{meta.get('name')}"
    if after is not None and (before is None or before.get("message") != after.get("message")):
        if old is None and _announced_before(after, now):
            return None
        return _held(label, str(after.get("message") or f"{label} is held"), own_hold(new, lookup, now))
    if before is not None and after is None and new is not None:
        return _released(label, str(before.get("message") or ""), own_hold(new, lookup, now))
    return None


def _opening_clauses(hold: Hold, details: dict[str, str]) -> list[str]:
    """What a held notice says of the opening (and puts in ``details``)."""
    opening = expected_opening(hold.closed, hold.policy.require)
    if opening is not None:
        details["opensAt"] = format_time(opening)
        return [f"expected to open at {format_time(opening)}"]
    not_before = opening_not_before(hold.closed, hold.policy.require)
    if not_before is not None:
        details["opensNotBefore"] = format_time(not_before)
        return [f"when it opens is not known, not before {format_time(not_before)}"]
    return ["no opening is scheduled"] if hold.closed else []


def _held(label: str, text: str, hold: Hold) -> Notice:
    details = {"gates": ", ".join(s.key for s in hold.closed), **_revisions(text)}
    clauses = [f"gate '{s.key}': {s.message}" for s in hold.closed]
    clauses += _opening_clauses(hold, details)
    message = f"{label} is held: {text}" + (f" ({'; '.join(clauses)})" if clauses else "")
    return Notice(HELD, names.GATE_CLOSED_REASON, message, {k: v for k, v in details.items() if v})


def _released(label: str, held_message: str, hold: Hold) -> Notice:
    opened = [s for s in hold.states if s.open]
    revisions = _revisions(held_message)
    what = f"{revisions['waiting']} proceeds" if "waiting" in revisions else "the held change proceeds"
    message = f"{label} released: {what}"
    if opened:
        message += "; " + "; ".join(_opened_clause(s) for s in opened)
    details = {"gates": ", ".join(s.key for s in opened), "released": revisions.get("waiting", "")}
    by = sorted(
        {s.requested_by for s in opened if s.reason == names.REASON_OPEN_REQUESTED and s.requested_by}
    )
    if by:
        details["requestedBy"] = ", ".join(by)
    toggled = sorted(
        {
            s.toggled_by.describe()
            for s in opened
            if s.reason == names.REASON_OPEN_REQUESTED and s.toggled_by is not None
        }
    )
    if toggled:
        details["openedBy"] = ", ".join(toggled)
    return Notice(RELEASED, RELEASED_REASON, message, {k: v for k, v in details.items() if v})
