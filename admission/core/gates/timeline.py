"""A gate's open and closed spans over a range of time (the freeze calendar), from the same
change points and evaluation that admission decisions use (``admission.core.gates.gates``)."""

from __future__ import annotations

import bisect
import dataclasses
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from functools import lru_cache

from admission.core.base import names
from admission.core.gates.gates import OUT_OF_RANGE, cause_of, change_points, out_of_range
from admission.core.gates.gatespec import CompiledGate, GateEntry
from admission.core.time.localtime import UTC
from admission.core.time.schedule import Entry

MAX_INTERVAL_STEPS = 5000  # bound on change points examined for one calendar
# Calendars remembered, a few per gate of a large board: a board or a feed asks for the same
# range of the same gates again and again (every poll, each day's ranges start at midnight).
REMEMBERED_CALENDARS = 2048
# Entries walked over a range (``_Walked``): a board's distinct schedule entries, far fewer than
# its gates; only a look that works out a calendar anew reads them.
REMEMBERED_WALKS = 256


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
) -> tuple[Interval, ...]:
    """The gate's open and closed spans covering ``[start, end)``, adjacent spans of the same
    state merged; they come from the change points the admission decisions use.

    At most ``max_steps`` change points are examined: past them the rest of the range is one
    interval with ``known=False`` (a schedule that flips every minute cannot be listed for weeks).

    The answer is a function of its arguments, and of the gate only through its schedule (what
    ``_schedule_of`` keeps), so it is remembered by that: a gate compiled again from the same Gate
    and GateKeepers finds its calendar, and so does every gate with the same schedule (a team's
    template copied to each namespace is worked out once, not once a namespace). A schedule
    entry is walked through its changes over the range once for every gate that has it
    (``_Walked``): a gate of its own asks the walk, not cron, at those changes. Gates with
    subscribed calendars are compared by identity (each compile reads the feed's status anew),
    so they would only fill the memory: they are worked out every time.
    """
    if any(not isinstance(entry, Entry) for _, entry in cg.closed_entries + cg.opened_entries):
        return _intervals(cg, start, end, max_steps)
    # The folds are in the key because equal datetimes of one zone may differ in them.
    return _remembered(_schedule_of(cg), start, start.fold, end, end.fold, max_steps)


def _schedule_of(cg: CompiledGate) -> CompiledGate:
    """The gate without what its spans do not depend on: which gate it is, its mode, the
    problems its status reports and its approvals. The spans remembered are worked out from
    this, not from the gate, so they cannot depend on what it leaves out."""
    return dataclasses.replace(
        cg,
        namespace="",
        name="",
        mode=None,
        problems=(),
        keepers=(),
        approvals=(),
        required_approvals=1,
        unverified_approvals=(),
    )


@lru_cache(maxsize=REMEMBERED_CALENDARS)
def _remembered(
    cg: CompiledGate, start: datetime, start_fold: int, end: datetime, end_fold: int, max_steps: int
) -> tuple[Interval, ...]:
    if cg.fixed:
        return _intervals(cg, start, end, max_steps)

    def walked(entries: tuple[tuple[str, GateEntry], ...]) -> tuple[tuple[str, GateEntry], ...]:
        return tuple(
            (
                keeper,
                _walk(entry, start, start_fold, end, end_fold, max_steps)
                if isinstance(entry, Entry)
                else entry,
            )
            for keeper, entry in entries
        )

    cg = dataclasses.replace(
        cg, closed_entries=walked(cg.closed_entries), opened_entries=walked(cg.opened_entries)
    )
    return _intervals(cg, start, end, max_steps)


@dataclass(frozen=True)
class _Walked(Entry):
    """A schedule entry with its answers at each of its own changes over a range, asked once for
    every gate that has it: a gate with other entries or toggles asks it at those instants too.

    The answers are the entry's own: at an instant of the walk, what it said there; from there
    until its state could first change (``stable_until``), what it said there, as the entry's
    memo gives it (a search from any instant of that span gives the same answers,
    tests/unit/test_schedule_search.py); anywhere else, the entry is asked."""

    entry: Entry | None = field(default=None, compare=False, repr=False)
    points: tuple[datetime, ...] = field(default=(), compare=False, repr=False)
    # At each point: active, next change, stable until.
    answers: tuple[tuple[bool, datetime | None, datetime | None], ...] = field(
        default=(), compare=False, repr=False
    )

    def _answer(self, now: datetime) -> tuple[bool, datetime | None, datetime | None] | None:
        i = bisect.bisect_right(self.points, now) - 1
        if i < 0:
            return None
        found = self.answers[i]
        stable = found[2]
        return found if now == self.points[i] or (stable is not None and now < stable) else None

    def _own(self) -> Entry:
        assert self.entry is not None  # made by _walk only
        return self.entry

    def active(self, now: datetime) -> bool:
        found = self._answer(now)
        return found[0] if found is not None else self._own().active(now)

    def next_change(self, now: datetime) -> datetime | None:
        found = self._answer(now)
        return found[1] if found is not None else self._own().next_change(now)

    def stable_until(self, now: datetime) -> datetime | None:
        found = self._answer(now)
        return found[2] if found is not None else self._own().stable_until(now)

    def state_and_next_change(self, now: datetime) -> tuple[bool, datetime | None, int]:
        return self._own().state_and_next_change(now)


@lru_cache(maxsize=REMEMBERED_WALKS)
def _walk(
    entry: Entry, start: datetime, _start_fold: int, end: datetime, _end_fold: int, max_steps: int
) -> _Walked:
    """``entry`` walked from ``start`` through its changes to ``end`` (at most ``max_steps``)."""
    points: list[datetime] = []
    answers: list[tuple[bool, datetime | None, datetime | None]] = []
    cur = start
    try:
        for _ in range(max_steps):
            change = entry.next_change(cur)
            points.append(cur)
            answers.append((entry.active(cur), change, entry.stable_until(cur)))
            if change is None or change >= end or change <= cur:
                break
            cur = change
    except OUT_OF_RANGE:  # asked there, the entry says it itself
        pass
    return _Walked(entry.spec, entry.duration, entry=entry, points=tuple(points), answers=tuple(answers))


def forget() -> None:
    """Forget every calendar remembered: the next ``intervals`` works each out again (benches
    and tests compare the two)."""
    _remembered.cache_clear()
    _walk.cache_clear()


def _intervals(cg: CompiledGate, start: datetime, end: datetime, max_steps: int) -> tuple[Interval, ...]:
    if end <= start:
        return ()
    out: list[Interval] = []
    cur = start
    for _ in range(max_steps):
        try:
            is_open, reason, message = _calendar_cause(cg, cur)
            points = [p for p in change_points(cg, cur) if p > cur] if not cg.fixed else []
        except OUT_OF_RANGE as err:  # as evaluate says it: invalid (closed) from here, and why
            state = out_of_range(cg, cur, err)
            out.append(Interval(cur, end, False, state.reason, state.message, known=False))
            return tuple(out)
        nxt = min(min(points), end) if points else end
        if out and out[-1].open == is_open and out[-1].known:
            out[-1] = Interval(out[-1].start, nxt, is_open, out[-1].reason, out[-1].message)
        else:
            out.append(Interval(cur, nxt, is_open, reason, message))
        if nxt >= end:
            return tuple(out)
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
    return tuple(out)


def time_zone(cg: CompiledGate) -> tzinfo:
    """The zone a gate's schedules are read in: their common zone, else UTC (no schedule, or mixed)."""
    zones = {
        entry.spec.zone for _, entry in cg.closed_entries + cg.opened_entries if isinstance(entry, Entry)
    }
    return zones.pop() if len(zones) == 1 else UTC
