"""Schedule entries: a GateKeeper's cron strings and {cron, duration} windows, and when each is active."""

from __future__ import annotations

import bisect
import calendar
import enum
import functools
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Final, cast

from admission.core.base.timefmt import format_duration, parse_duration
from admission.core.time.cron import HORIZON, CronSpec, ScheduleError, parse_cron
from admission.core.time.localtime import (
    UTC,
    last_steady_day,
    next_unsteady_day,
    steady_offset,
    wall_at_offset,
)

# The longest window: whether one is open is a search over its duration back from now.
MAX_DURATION = HORIZON
_SPANS = 8  # spans memoised per schedule entry
# How far a chain of overlapping windows is followed per search: steps (a day or a month of
# steady clock, by arithmetic) and cron searches (on days the clock changes).
_CHAIN_STEPS = 64
_CHAIN_SEARCHES = 2


class _Unsearched(enum.Enum):
    """A span's next change, not searched for (an enum, so that ``is not _UNKNOWN`` narrows types)."""

    UNKNOWN = "unknown"


_UNKNOWN: Final = _Unsearched.UNKNOWN
# (from, until, active, next change, stable until, cost in cron searches): see Entry._memo.
_Span = tuple[datetime, datetime, bool, datetime | None | _Unsearched, datetime | None, int]


@dataclass(frozen=True)
class Entry:
    """One schedule entry: a minute-match string, or a window of ``duration`` from each fire.

    ``active`` and ``next_change`` are memoised together: the entry is known to stay as it is
    from the time they were computed until its next change, so a search that steps through
    many instants asks cron (the costly part) once per change of this entry, not per step.
    """

    spec: CronSpec
    duration: timedelta | None = None
    # The spans last computed, newest last: (from, until, active, next change, stable until,
    # cost). ``active`` holds on [from, until), and each answer is the one a search from any
    # instant of the span gives, so that evaluation stays a function of ``now``; so is the cost
    # of finding the next change, in cron searches, which budgets count. The next change is
    # _UNKNOWN in spans that only ``active`` needed. A search steps forward through several,
    # and the next lookup (a minute later) falls in the first again. Replaced whole, never
    # mutated, so readers in other threads see consistent tuples. Not part of the value.
    _memo: list[tuple[_Span, ...]] = field(default_factory=lambda: [()], compare=False, repr=False)

    def _memoised(self, now: datetime) -> _Span | None:
        found: _Span | None = None
        for span in self._memo[0]:
            if span[0] <= now < span[1]:
                found = span if found is None or found[3] is _UNKNOWN else found
        return found

    def _remember(self, span: _Span) -> _Span:
        self._memo[0] = (*self._memo[0][-(_SPANS - 1) :], span)
        return span

    def _span(self, now: datetime, need_change: bool) -> _Span:
        span = self._memoised(now)
        if span is None:
            return self._remember(self._search(now, need_change))
        if need_change and span[3] is _UNKNOWN:  # an open window: its first start is known
            # Only an open window's span leaves it so, ``stable until`` the end of that window.
            ends, duration = cast(datetime, span[4]), cast(timedelta, self.duration)
            chain_end, cost = self._chain_end(ends - duration)
            return self._remember((*span[:3], chain_end, span[4], 1 + cost))
        return span

    @property
    def _is_window(self) -> bool:
        return self.duration is not None and not (self.spec.always or self.spec.never)

    @functools.cached_property
    def _breaks(self) -> tuple[int, ...]:
        """The indices i of ``spec.walls`` after which the next fire of the day comes later
        than ``duration``: where a chain of windows breaks on a day the clock is steady."""
        seconds = cast(timedelta, self.duration).total_seconds()  # asked of windows only
        if self.spec.gaps[0] * 60 <= seconds:
            return ()
        walls = self.spec.walls
        return tuple(i for i in range(len(walls) - 1) if (walls[i + 1] - walls[i]) * 60 > seconds)

    def active(self, now: datetime) -> bool:
        """Whether the entry is active at ``now``: a minute-match string's wall clock, or a
        window's one forward search from ``now - duration`` (no search back, and no following
        of overlapping windows, which only ``next_change`` needs)."""
        if not self._is_window:
            return self.spec.matches(now)
        return self._span(now, need_change=False)[2]

    def next_change(self, now: datetime) -> datetime | None:
        """A time after ``now`` before which ``active`` cannot change (None: none within HORIZON).

        For windows this may be the end of a chain of overlapping windows that a later window
        continues; callers re-evaluate there.
        """
        change = self._span(now, need_change=True)[3]
        assert change is not _UNKNOWN  # need_change: it was searched for
        return change

    def stable_until(self, now: datetime) -> datetime | None:
        """``next_change``, or earlier for an open window: the end of the window of its first
        start, which needs no search back (None: no change within HORIZON)."""
        return self._span(now, need_change=False)[4]

    def state_and_next_change(self, now: datetime) -> tuple[bool, datetime | None, int]:
        """``active`` and ``next_change`` at ``now``, and what finding them costs in cron
        searches (the same whether it was remembered or not)."""
        span = self._span(now, need_change=True)
        change = span[3]
        assert change is not _UNKNOWN  # need_change: it was searched for
        return span[2], change, span[5]

    def _search(self, now: datetime, need_change: bool) -> _Span:
        """The span from ``now``. Searches reach HORIZON past the start of the UTC day, the same
        end for every ``now`` of that day, so a memoised "no change" is what a new search says."""
        day = (
            now.replace(hour=0, minute=0, second=0, microsecond=0)
            if now.tzinfo is UTC
            else now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        )
        if not self._is_window:
            change = self.spec.next_flip(now, until=day + HORIZON)
            return now, change or day + timedelta(days=1), self.spec.matches(now), change, change, 1
        # Open means a fire in (now - duration, now]: a forward search from now - duration
        # answers that (a backward search costs cronsim several times more on sparse schedules).
        duration = cast(timedelta, self.duration)
        first = self.spec.next_fire(now - duration, until=day + HORIZON)
        if first is None:
            return now, day + timedelta(days=1), False, None, None, 1
        if first > now:
            return now, first, False, first, first, 1
        # ``first`` is the same from any instant before its window ends, and so is all that
        # is worked out from it.
        ends = first + duration
        if not need_change:
            return now, ends, True, _UNKNOWN, ends, 1
        chain_end, cost = self._chain_end(first)
        return now, ends, True, chain_end, ends, 1 + cost

    def _chain_end(self, first: datetime) -> tuple[datetime | None, int]:
        """When the chain of overlapping windows from the one that starts at ``first`` ends:
        the first fire with no other within ``duration`` after it, plus ``duration``; None if
        it goes on past HORIZON from ``first``. And its cost in cron searches (a step
        costs about one).

        On a day of steady clock (one UTC offset all day) the fires are the wall-clock minutes
        at that offset, so the chain is followed by arithmetic, whole months at a time where
        every day matches and it cannot break; on a day the clock changes, one window at a time
        by cronsim. After _CHAIN_STEPS steps or _CHAIN_SEARCHES searches it answers where it
        has got to (callers ask again there). All is worked out from ``first`` alone, so the
        answer is the same from any instant of its window."""
        spec, d = self.spec, cast(timedelta, self.duration)  # asked of windows only
        breaks = self._breaks
        always_on = not breaks and spec.gaps[1] * 60 <= d.total_seconds()
        if always_on and spec.zone is UTC and spec.every_day:
            return None, 0  # no gap between fires is longer than a window, ever
        walls = spec.walls
        limit = first + HORIZON
        last_day = limit.astimezone(spec.zone).date()
        latest, searches, step = first, 0, 0
        for step in range(_CHAIN_STEPS):
            if latest + d >= limit:
                return None, searches + step
            if searches >= _CHAIN_SEARCHES:
                break
            local = latest.astimezone(spec.zone)
            day, minute = local.date(), local.hour * 60 + local.minute
            offset = steady_offset(day, spec.zone)
            i = bisect.bisect_left(walls, minute)
            if offset is None or i == len(walls) or walls[i] != minute or local.second or local.microsecond:
                # The clock changes that day: as far as the latest start within this window.
                searches += 1
                nxt = spec.last_fire(latest + d, since=latest)
                if nxt is None or nxt <= latest:
                    return latest + d, searches + step
                latest = nxt
                continue
            b = bisect.bisect_left(breaks, i)
            if b < len(breaks):  # a gap longer than a window, later that day
                return wall_at_offset(day, walls[breaks[b]], offset) + d, searches + step
            unbroken = self._unbroken_to(day, offset, last_day, always_on)
            if unbroken is None:
                return None, searches + step
            day_last = wall_at_offset(unbroken, walls[-1], offset)
            nxt, searched = self._first_fire_after(unbroken, day_last, last_day, limit)
            searches += searched
            if nxt is None or nxt - day_last > d:
                return (day_last + d if day_last + d < limit else None), searches + step
            latest = nxt
        return latest + d, searches + step + 1

    def _unbroken_to(self, day: date, offset: timedelta, last_day: date, always_on: bool) -> date | None:
        """The last day of steady clock (at ``offset``) the chain cannot break before, from
        ``day`` whose fires have no gap longer than a window; None if that runs past ``last_day``."""
        spec = self.spec
        if always_on and spec.every_day:
            # Every day matches and no gap between fires is longer than a window: on to the
            # day before the clock next changes.
            change = next_unsteady_day(day + timedelta(days=1), last_day, spec.zone)
            return None if change is None else change - timedelta(days=1)
        if always_on and spec.full_month_from(day):
            # Every day to the month's end matches, and no gap between fires is longer than
            # a window: on to the last of those days with the same steady clock.
            month_end = date(day.year, day.month, calendar.monthrange(day.year, day.month)[1])
            return last_steady_day(day, month_end, offset, spec.zone)
        return day

    def _first_fire_after(
        self, day: date, day_last: datetime, last_day: date, limit: datetime
    ) -> tuple[datetime | None, int]:
        """The first fire after ``day``'s last one (``day_last``), and the cron searches it took:
        arithmetic on a following day of steady clock, else one search."""
        spec = self.spec
        following = spec.first_day(day + timedelta(days=1), last_day)
        next_offset = steady_offset(following, spec.zone) if following is not None else None
        if following is None or next_offset is None:
            # None matches to the limit, or the clock changes that day.
            return spec.next_fire(day_last, until=limit), 1
        return wall_at_offset(following, spec.walls[0], next_offset), 0

    def __str__(self) -> str:
        if self.duration is None:
            return f"'{self.spec}'"
        return f"'{self.spec}' for {format_duration(self.duration)}"


@functools.lru_cache(maxsize=4096)
def _entry(spec: CronSpec, duration: timedelta | None) -> Entry:
    """One Entry per distinct schedule, shared by every gate and GateKeeper that uses it, so
    its memo is too: fifty copies of an entry cost cron one search, and so does a GateKeeper
    re-read with the same entries."""
    return Entry(spec, duration)


def parse_entry(item: object, default_zone: str | None = None) -> Entry:
    """Parse a GateKeeper entry: a cron string or ``{cron, duration}``; raise ScheduleError."""
    if isinstance(item, str):
        return _entry(parse_cron(item, default_zone), None)
    if isinstance(item, dict):
        unknown = set(item) - {"cron", "duration"}
        if unknown:
            raise ScheduleError(
                f"schedule entry has unknown fields {sorted(unknown)}: use 'cron' and 'duration'"
            )
        spec = parse_cron(item.get("cron"), default_zone)
        if item.get("duration") in (None, ""):
            return _entry(spec, None)
        try:
            duration = parse_duration(item["duration"])
        except ValueError as err:
            raise ScheduleError(str(err)) from None
        if duration <= timedelta(0):
            raise ScheduleError(f"duration {item['duration']!r} must be positive")
        if duration > MAX_DURATION:
            raise ScheduleError(
                f"duration {item['duration']!r} is longer than {format_duration(MAX_DURATION)}"
            )
        return _entry(spec, duration)
    raise ScheduleError(
        f"schedule entry must be a cron string or {{cron, duration}}, got {type(item).__name__}"
    )
