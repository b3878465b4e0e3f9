"""Wall-clock arithmetic in a time zone: the days its clock changes, and the instants of local times."""

from __future__ import annotations

import functools
import itertools
from datetime import UTC as UTC  # re-exported: the core's modules name UTC from here
from datetime import date, datetime, time, timedelta, tzinfo


def wall_instant(day: date, hour: int, minute: int, tz: tzinfo) -> datetime | None:
    """The instant the wall clock of ``tz`` shows ``hour:minute`` on ``day``, if it does so
    exactly once (None in a gap or an overlap)."""
    local = datetime(day.year, day.month, day.day, hour, minute, tzinfo=tz)
    if tz is UTC:
        return local
    instant = local.astimezone(UTC)
    if (
        instant.astimezone(tz).replace(tzinfo=None) != local.replace(tzinfo=None)
        or local.replace(fold=1).utcoffset() != local.utcoffset()
    ):
        return None
    return instant


def wall_at_offset(day: date, minute: int, offset: timedelta) -> datetime:
    """The UTC instant of wall-clock ``minute`` of ``day`` at a UTC ``offset``."""
    return datetime(day.year, day.month, day.day, minute // 60, minute % 60, tzinfo=UTC) - offset


def local_midnight(day: date, tz: tzinfo) -> datetime:
    """The UTC instant of 00:00 on ``day`` in ``tz`` (its first pass, should it repeat)."""
    return datetime.combine(day, time(0), tzinfo=tz).astimezone(UTC)


@functools.lru_cache(maxsize=4096)
def steady_offset(day: date, tz: tzinfo) -> timedelta | None:
    """The UTC offset of ``tz`` all through ``day``, or None if it changes that day."""
    if tz is UTC:
        return timedelta(0)
    # Every wall-clock time of the day exists once: its first and last are neither skipped nor
    # repeated, with one offset (Santiago skips midnight; America/Nuuk's last Saturday of March
    # ends at 23:00). Zones change clocks once in a day at most.
    first, last = datetime.combine(day, time(0)), datetime.combine(day, time(23, 59, 59))
    offsets = {
        tz.utcoffset(first),
        tz.utcoffset(first.replace(fold=1)),
        tz.utcoffset(last),
        tz.utcoffset(last.replace(fold=1)),
    }
    return offsets.pop() if len(offsets) == 1 else None


def next_unsteady_day(day: date, last: date, tz: tzinfo) -> date | None:
    """The first day from ``day`` to ``last`` on which the clock of ``tz`` changes, or None."""
    for year in range(day.year, last.year + 1):  # a year's list may end with the next year's 1 January
        found = next((d for d in unsteady_days(year, tz) if day <= d <= last), None)
        if found is not None:
            return found
    return None


@functools.lru_cache(maxsize=1024)
def unsteady_days(year: int, tz: tzinfo) -> tuple[date, ...]:
    """The days of ``year`` on which the clock of ``tz`` changes: its offset is looked at at noon on the
    1st of each month (zones change clocks five weeks apart at the closest, in Morocco, so two
    changes never fall between two looks), and where it differs the day is found by bisection."""
    if tz is UTC:
        return ()
    months = [date(year, m, 1) for m in range(1, 13)] + [date(year + 1, 1, 1)]
    offsets = [tz.utcoffset(datetime.combine(m, time(12))) for m in months]
    days: set[date] = set()
    for (lo, before), (hi, after) in itertools.pairwise(zip(months, offsets, strict=True)):
        if before == after:
            continue
        while (hi - lo).days > 1:  # the offset at noon is ``before`` on lo and ``after`` on hi
            middle = lo + timedelta(days=(hi - lo).days // 2)
            lo, hi = (
                (middle, hi) if tz.utcoffset(datetime.combine(middle, time(12))) == before else (lo, middle)
            )
        days.update(d for d in (lo, hi) if steady_offset(d, tz) is None)
    return tuple(sorted(days))


def last_steady_day(day: date, last: date, offset: timedelta, tz: tzinfo) -> date:
    """The last day from ``day`` (steady at ``offset``) to ``last``, at most a month later, up
    to which every day is steady at ``offset``: zones change clocks at most once a month
    (twice within five weeks at the closest, in Morocco), so it is found by bisection."""
    if steady_offset(last, tz) == offset and steady_offset(day + (last - day) / 2, tz) == offset:
        return last
    while (last - day).days > 1:
        middle = day + timedelta(days=(last - day).days // 2)
        if steady_offset(middle, tz) == offset:
            day = middle
        else:
            last = middle
    return day
