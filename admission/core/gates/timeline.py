"""A gate's open and closed spans over a range of time (the freeze calendar), from the same
change points and evaluation that admission decisions use (``admission.core.gates.gates``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, tzinfo

from admission.core.base import names
from admission.core.gates.gates import OUT_OF_RANGE, cause_of, change_points, out_of_range
from admission.core.gates.gatespec import CompiledGate
from admission.core.time.localtime import UTC
from admission.core.time.schedule import Entry

MAX_INTERVAL_STEPS = 5000  # bound on change points examined for one calendar


@dataclass(frozen=True)
class Interval:
    """A span ``[start, end)`` during which a gate is open or closed, and why it is at its start.

    ``known`` is False for the tail of a calendar whose schedule changes too often to list
    within the bound: its state there is not computed (and shown as unknown, not as open).
    """

    start: datetime
    end: datetime
    open: bool
    reason: str
    message: str
    known: bool = True


def _calendar_cause(cg: CompiledGate, now: datetime) -> tuple[bool, str, str]:
    """The state at ``now``, why, and who asked for a toggle in effect."""
    cause = cause_of(cg, now)
    message = cause.message
    if cause.toggle is not None:
        message += f" by {cg.requested_by}" if cg.requested_by else ""
        message += f": {cg.request_message}" if cg.request_message else ""
    return cause.open, cause.reason, message


def intervals(
    cg: CompiledGate, start: datetime, end: datetime, max_steps: int = MAX_INTERVAL_STEPS
) -> list[Interval]:
    """The gate's open and closed spans covering ``[start, end)``, adjacent spans of the same
    state merged; they come from the change points the admission decisions use.

    At most ``max_steps`` change points are examined: past them the rest of the range is one
    interval with ``known=False`` (a schedule that flips every minute cannot be listed for weeks).
    """
    if end <= start:
        return []
    out: list[Interval] = []
    cur = start
    for _ in range(max_steps):
        try:
            is_open, reason, message = _calendar_cause(cg, cur)
            points = [p for p in change_points(cg, cur) if p > cur] if not cg.fixed else []
        except OUT_OF_RANGE as err:  # as evaluate says it: invalid (closed) from here, and why
            state = out_of_range(cg, cur, err)
            out.append(Interval(cur, end, False, state.reason, state.message, known=False))
            return out
        nxt = min(min(points), end) if points else end
        if out and out[-1].open == is_open and out[-1].known:
            out[-1] = Interval(out[-1].start, nxt, is_open, out[-1].reason, out[-1].message)
        else:
            out.append(Interval(cur, nxt, is_open, reason, message))
        if nxt >= end:
            return out
        cur = nxt
    out.append(
        Interval(
            cur,
            end,
            False,
            names.REASON_UNKNOWN,
            f"the schedule changes more than {max_steps} times in this range; not computed further",
            known=False,
        )
    )
    return out


def time_zone(cg: CompiledGate) -> tzinfo:
    """The zone a gate's schedules are read in: their common zone, else UTC (no schedule, or mixed)."""
    zones = {
        entry.spec.zone for _, entry in cg.closed_entries + cg.opened_entries if isinstance(entry, Entry)
    }
    return zones.pop() if len(zones) == 1 else UTC
