"""Cron schedules: minute-match strings, ``{cron, duration}`` windows, time zones, DST.

Parsing and fire times come from cronsim, which follows Debian cron, DST quirks
included: a fire time in a spring-forward gap runs right after the gap, one in a
fall-back overlap runs once. So a window never opens twice.  A minute-match string
is matched against the wall clock of its zone, minute by minute.
"""

from __future__ import annotations

import bisect
import calendar
import copy
import functools
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from admission.core.timefmt import format_duration, parse_duration

UTC = timezone.utc
MINUTE = timedelta(minutes=1)
# How far ahead a transition is looked for; beyond this, "no transition known".
HORIZON = timedelta(days=400)
# The longest window: whether one is open is a search over its duration back from now.
MAX_DURATION = HORIZON
MAX_CRON_LENGTH = 256
_SPANS = 8  # spans memoised per schedule entry
# How far a chain of overlapping windows is followed per search: steps (a day or a month of
# steady clock, by arithmetic) and cron searches (on days the clock changes).
_CHAIN_STEPS = 64
_CHAIN_SEARCHES = 2
_UNKNOWN = object()  # a span's next change, not searched for

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


class ScheduleError(ValueError):
    """A schedule that cannot be evaluated; the message says why."""


@functools.lru_cache(maxsize=512)
def zone(name: str | None) -> tzinfo:
    """The IANA time zone called ``name`` (UTC when empty); raise ScheduleError."""
    if not name or name in ("UTC", "Etc/UTC"):
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError, OSError):  # OSError: a directory, a name too long
        raise ScheduleError(f"unknown time zone {name!r}") from None


class _DayTable:
    """The days that match one pair of day-of-month and day-of-week fields, month by month.

    A month's matching days depend only on its length and the weekday of its 1st, so at most
    28 are ever worked out (by cronsim's own match_day) per pair of fields. Filled on use,
    never changed, shared by every expression with these day fields; threads that race both
    work out the same tuple."""

    __slots__ = ("by_month", "by_shape")

    def __init__(self) -> None:
        self.by_month: dict[tuple[int, int], tuple[int, ...]] = {}
        self.by_shape: dict[tuple[int, int], tuple[int, ...]] = {}

    def days(self, fields: CronSim, year: int, month: int) -> tuple[int, ...]:
        """The days of ``year-month`` that match (the month field is not checked), ascending."""
        days = self.by_month.get((year, month))
        if days is None:
            first_weekday, length = calendar.monthrange(year, month)
            days = self.by_shape.get((first_weekday, length))
            if days is None:
                days = self.by_shape[(first_weekday, length)] = _matching_days(fields, year, month, first_weekday, length)
            self.by_month[(year, month)] = days
        return days


def _matching_days(f: CronSim, year: int, month: int, first_weekday: int, length: int) -> tuple[int, ...]:
    # A superset of the matching days, read off the parsed fields; cronsim's own match_day
    # decides each, so cron's day rules (L, LW, #n, AND or OR of the two fields) stay cronsim's.
    by_dom = {d for d in f.days if isinstance(d, int) and 1 <= d <= length}
    if f.LAST in f.days or f.LAST_WEEKDAY in f.days:
        by_dom.update(range(length - 2, length + 1))
    # Cron numbers Sunday 0 (and 7), Monday 1; day d of the month is cron weekday
    # (first_weekday + d) % 7, with Python's Monday-0 first_weekday.
    weekdays = {(w if isinstance(w, int) else w[0]) % 7 for w in f.weekdays}
    by_dow = {d for d in range(1, length + 1) if (first_weekday + d) % 7 in weekdays}
    candidates = by_dom & by_dow if f.day_and else by_dom | by_dow
    return tuple(d for d in sorted(candidates) if f.match_day(date(year, month, d)))


def _next_month(year: int, month: int) -> tuple[int, int]:
    return (year + 1, 1) if month == 12 else (year, month + 1)


def _previous_month(year: int, month: int) -> tuple[int, int]:
    return (year - 1, 12) if month == 1 else (year, month - 1)


@dataclass(frozen=True)
class CronSpec:
    """A parsed cron expression with the zone its wall clock is read in."""

    text: str
    expr: str  # five fields, macros expanded; "" for @always/@never
    zone: tzinfo
    always: bool = False
    never: bool = False
    fields: CronSim | None = None  # parsed sets; searches start from copies of it
    # Its matching days, month by month (shared; not part of the value).
    _days: _DayTable = field(default_factory=_DayTable, compare=False, repr=False)

    def matches(self, now: datetime) -> bool:
        """Whether the wall-clock minute containing ``now`` matches."""
        if self.always or self.never:
            return self.always
        local = now.astimezone(self.zone)
        f = self.fields
        return (
            local.minute in f.minutes
            and local.hour in f.hours
            and local.month in f.months
            and f.match_day(local.date())
        )

    def next_fire(self, now: datetime, horizon: timedelta = HORIZON, until: datetime | None = None) -> datetime | None:
        """The first fire time strictly after ``now``, in UTC; None if there is none on a day
        up to ``until`` (default: ``horizon`` ahead).

        cronsim walks day by day to the next matching day (to a 29 February: years) and ticks
        minute by minute within it, so the day is found from the month tables, and on a day of
        steady clock (one UTC offset all day: all but a few a year) the fire is the next of the
        day's wall-clock minutes at that offset; on a day the clock changes, cronsim decides,
        started just before that day's first fire."""
        if self.always or self.never:
            return None
        local = now.astimezone(self.zone)
        last = (until or now + horizon).astimezone(self.zone).date()
        day = self._first_day(local.date(), last)
        while day is not None and (offset := _steady_offset(day, self.zone)) is not None:
            minute = self._wall_after(local.hour * 60 + local.minute if day == local.date() else -1)
            if minute is not None:
                return _wall(day, minute, offset)
            day = self._first_day(day + timedelta(days=1), last)
        if day == local.date() and self._no_fire_left(local):
            day = self._first_day(day + timedelta(days=1), last)
        if day is None:
            return None
        return self._fire(max(now, self._before_first(day)), reverse=False)

    def _wall_after(self, minute: int) -> int | None:
        """The first wall-clock minute of a day it fires at that is after ``minute`` (-1: the first)."""
        hours, minutes = self._hours_minutes
        hour, within = divmod(minute, 60) if minute >= 0 else (-1, 59)
        if hour in self.fields.hours and within < minutes[-1]:
            return hour * 60 + minutes[bisect.bisect_right(minutes, within)]
        i = bisect.bisect_right(hours, hour)
        return hours[i] * 60 + minutes[0] if i < len(hours) else None

    def _wall_at_or_before(self, minute: int) -> int | None:
        """The last wall-clock minute of a day it fires at that is not after ``minute`` (1440: the last)."""
        hours, minutes = self._hours_minutes
        hour, within = divmod(minute, 60) if minute < 1440 else (24, 0)
        if hour in self.fields.hours and within >= minutes[0]:
            return hour * 60 + minutes[bisect.bisect_right(minutes, within) - 1]
        i = bisect.bisect_left(hours, hour)
        return hours[i - 1] * 60 + minutes[-1] if i > 0 else None

    @functools.cached_property
    def _hours_minutes(self) -> tuple[list[int], list[int]]:
        return sorted(self.fields.hours), sorted(self.fields.minutes)

    def _no_fire_left(self, local: datetime) -> bool:
        """Whether the matching day of ``local`` has no fire after it: it is at or past the
        day's last wall-clock time, and the clock runs on without a change of offset to the end
        of the day (else cronsim decides)."""
        f = self.fields
        last_hour = max(f.hours)
        if (local.hour, local.minute) < (last_hour, max(f.minutes)):
            return False
        end = _at_local_midnight(local.date() + timedelta(days=1), self.zone) - timedelta(microseconds=1)
        return end.astimezone(self.zone).utcoffset() == local.utcoffset()

    def _no_fire_before(self, local: datetime) -> bool:
        """Whether the matching day of ``local`` has no fire at or before it: it is before the
        day's first wall-clock time, and the clock ran without a change of offset since midnight."""
        f = self.fields
        if (local.hour, local.minute) >= (min(f.hours), min(f.minutes)):
            return False
        return _at_local_midnight(local.date(), self.zone).astimezone(self.zone).utcoffset() == local.utcoffset()

    def _first_day(self, day: date, last: date, matching: bool = True) -> date | None:
        """The first day from ``day`` to ``last`` that matches the month and day fields (with
        ``matching=False``: that does not), or None."""
        months = self.fields.months
        year, month, start = day.year, day.month, day.day
        while (year, month) <= (last.year, last.month):
            if month not in months:
                if not matching:
                    found = start
                    break
            else:
                days = self._days.days(self.fields, year, month)
                if matching:
                    found = next((d for d in days if d >= start), None)
                else:
                    found = next((d for d in range(start, calendar.monthrange(year, month)[1] + 1) if d not in days), None)
                if found is not None:
                    break
            (year, month), start = _next_month(year, month), 1
        else:
            return None
        day = date(year, month, found)
        return day if day <= last else None

    def _last_day(self, day: date, first: date) -> date | None:
        """The last day from ``day`` back to ``first`` that matches the month and day fields, or None."""
        months = self.fields.months
        year, month, end = day.year, day.month, day.day
        while (year, month) >= (first.year, first.month):
            if month in months:
                found = next((d for d in reversed(self._days.days(self.fields, year, month)) if d <= end), None)
                if found is not None:
                    day = date(year, month, found)
                    return day if day >= first else None
            (year, month), end = _previous_month(year, month), 31
        return None

    def last_fire(self, now: datetime, since: datetime | None = None) -> datetime | None:
        """The latest fire time at or before ``now``, in UTC; None if there is none on a day
        from ``since`` (default: HORIZON back). As ``next_fire``, backwards."""
        if self.always or self.never:
            return None
        local = now.astimezone(self.zone)
        first = (since or now - HORIZON).astimezone(self.zone).date()
        day = self._last_day(local.date(), first)
        while day is not None and (offset := _steady_offset(day, self.zone)) is not None:
            minute = self._wall_at_or_before(local.hour * 60 + local.minute if day == local.date() else 1440)
            if minute is not None:
                return _wall(day, minute, offset)
            day = self._last_day(day - timedelta(days=1), first)
        if day == local.date() and self._no_fire_before(local):
            day = self._last_day(day - timedelta(days=1), first)
        if day is None:
            return None
        return self._fire(min(now, self._at_last(day)), reverse=True)

    # cronsim ticks hour by hour and minute by minute to a fire: started right before a
    # matching day's first fire, or at its last one, it has no ticking to do (3-6x cheaper).
    def _before_first(self, day: date) -> datetime:
        """An instant after the fires of the days before ``day`` (none of which match) and
        before the first fire of ``day``."""
        midnight = _at_local_midnight(day, self.zone)
        first = _wall_instant(day, min(self.fields.hours), min(self.fields.minutes), self.zone)
        if first is None or first.astimezone(self.zone).utcoffset() != midnight.astimezone(self.zone).utcoffset():
            return midnight - timedelta(hours=3)  # a clock change that day: before a midnight it may skip
        return first - timedelta(seconds=1)

    def _at_last(self, day: date) -> datetime:
        """An instant at or after the last fire of ``day`` and before the fires of the days
        after it (none of which match)."""
        following = _at_local_midnight(day + timedelta(days=1), self.zone)
        last = _wall_instant(day, max(self.fields.hours), max(self.fields.minutes), self.zone)
        end = following - timedelta(microseconds=1)
        if last is None or last.astimezone(self.zone).utcoffset() != end.astimezone(self.zone).utcoffset():
            return following  # a clock change after it that day: from the day's end
        return last

    def _sim(self, start: datetime, reverse: bool) -> CronSim:
        """What ``CronSim(self.expr, start, reverse)`` makes, from a copy of the parsed
        expression instead of parsing it again (tests/unit/test_schedule.py compares the two)."""
        sim = copy.copy(self.fields)
        sim.skip_initial_tick = bool(reverse and start.microsecond)
        sim.dt = start.replace(microsecond=0)
        sim.tick_direction = -1 if reverse else 1
        sim.fixup_tz = None
        # cronsim runs fixed-time jobs on the naive wall clock, as Debian cron does.
        if sim.dt.tzinfo not in (None, UTC) and not sim.parts[1].startswith("*") and not sim.parts[2].startswith("*"):
            sim.fixup_tz = sim.dt.tzinfo
            sim.dt = sim.dt.replace(tzinfo=None)
        return sim

    def _fire(self, now: datetime, reverse: bool) -> datetime | None:
        if self.always or self.never:
            return None
        local = now.astimezone(self.zone)
        if reverse:
            # cronsim steps back one second before searching; start one second later
            # so that a fire exactly at ``now`` counts.
            local = local.replace(microsecond=0) + timedelta(seconds=1)
        # cronsim iterates fixed-time jobs on the naive wall clock (as Debian cron
        # does), so from inside a fall-back overlap it can yield the overlap's first
        # pass, which lies on the other side of ``now``: skip such results.
        for _, fire in zip(range(4), self._sim(local, reverse)):
            fire = fire.astimezone(UTC)
            if (fire <= now) if reverse else (fire > now):
                return fire
        return None

    def next_flip(self, now: datetime, horizon: timedelta = HORIZON, until: datetime | None = None) -> datetime | None:
        """The first minute boundary after ``now`` where ``matches`` changes, or None."""
        if self.always or self.never:
            return None
        f = self.fields
        state = self.matches(now)
        cur = now.astimezone(UTC).replace(second=0, microsecond=0) + MINUTE
        deadline = until or now + horizon
        full_minutes = len(f.minutes) == 60
        full_hours = len(f.hours) == 24
        last_day = deadline.astimezone(self.zone).date()
        while cur <= deadline:
            local = cur.astimezone(self.zone)
            if self.matches(cur) != state:
                return cur
            # Jump over spans whose match cannot change, instead of minute by minute.
            if state:
                if full_minutes and full_hours:
                    # Every minute of a matching day matches: it ends at the first day that does not.
                    day = self._first_day(local.date() + timedelta(days=1), last_day, matching=False)
                    if day is None:
                        return None
                    cur = _at_local_midnight(day, self.zone)
                elif full_minutes:
                    cur = _next_local_hour(cur, local)
                else:  # to the hour's next minute that does not match (clocks change on the hour)
                    later = [m for m in range(local.minute + 1, 60) if m not in f.minutes]
                    cur = cur + MINUTE * (later[0] - local.minute) if later else _next_local_hour(cur, local)
            elif local.month not in f.months or not f.match_day(local.date()):
                # Nothing matches before the first matching day.
                day = self._first_day(local.date() + timedelta(days=1), last_day)
                if day is None:
                    return None
                cur = _at_local_midnight(day, self.zone)
            elif local.hour not in f.hours:
                cur = _next_local_hour(cur, local)
            else:
                later = [m for m in f.minutes if m > local.minute]
                cur = cur + MINUTE * (min(later) - local.minute) if later else _next_local_hour(cur, local)
        return None

    @functools.cached_property
    def walls(self) -> tuple[int, ...]:
        """The wall-clock minutes of a day (hour * 60 + minute) at which it fires, ascending."""
        return tuple(sorted(h * 60 + m for h in self.fields.hours for m in self.fields.minutes))

    @functools.cached_property
    def gaps(self) -> tuple[int, int]:
        """The longest wait, in minutes, between two fires of a day, and from a day's last
        fire to the next day's first (on a steady clock)."""
        minutes, hours = sorted(self.fields.minutes), sorted(self.fields.hours)
        within_hours = max((b - a for a, b in zip(minutes, minutes[1:])), default=0)
        between_hours = max(((b - a) * 60 + minutes[0] - minutes[-1] for a, b in zip(hours, hours[1:])), default=0)
        return max(within_hours, between_hours), (24 - hours[-1] + hours[0]) * 60 + minutes[0] - minutes[-1]

    @functools.cached_property
    def every_day(self) -> bool:
        """Whether every day of every month matches."""
        f = self.fields
        return len(f.months) == 12 and all(d in f.days for d in range(1, 32)) and f.day_and and \
            all(w in f.weekdays or w + 7 in f.weekdays for w in range(7))

    def _full_month_from(self, day: date) -> bool:
        """Whether every day from ``day`` to the end of its month matches."""
        if day.month not in self.fields.months:
            return False
        days, length = self._days.days(self.fields, day.year, day.month), calendar.monthrange(day.year, day.month)[1]
        return len(days) >= length - day.day + 1 and days[-(length - day.day + 1)] == day.day

    def __str__(self) -> str:
        return self.text


def _next_local_hour(cur: datetime, local: datetime) -> datetime:
    return cur + MINUTE * (60 - local.minute)


def _wall_instant(day: date, hour: int, minute: int, tz: tzinfo) -> datetime | None:
    """The instant the wall clock of ``tz`` shows ``hour:minute`` on ``day``, if it does so
    exactly once (None in a gap or an overlap)."""
    local = datetime(day.year, day.month, day.day, hour, minute, tzinfo=tz)
    if tz is UTC:
        return local
    instant = local.astimezone(UTC)
    if instant.astimezone(tz).replace(tzinfo=None) != local.replace(tzinfo=None) or \
            local.replace(fold=1).utcoffset() != local.utcoffset():
        return None
    return instant


def _wall(day: date, minute: int, offset: timedelta) -> datetime:
    """The UTC instant of wall-clock ``minute`` of ``day`` at a UTC ``offset``."""
    return datetime(day.year, day.month, day.day, minute // 60, minute % 60, tzinfo=UTC) - offset


@functools.lru_cache(maxsize=4096)
def _steady_offset(day: date, tz: tzinfo) -> timedelta | None:
    """The UTC offset of ``tz`` all through ``day``, or None if it changes that day."""
    if tz is UTC:
        return timedelta(0)
    # Every wall-clock time of the day exists once: its first and last are neither skipped nor
    # repeated, with one offset (Santiago skips midnight; America/Nuuk's last Saturday of March
    # ends at 23:00). Zones change clocks once in a day at most.
    first, last = datetime.combine(day, time(0)), datetime.combine(day, time(23, 59, 59))
    offsets = {tz.utcoffset(first), tz.utcoffset(first.replace(fold=1)), tz.utcoffset(last), tz.utcoffset(last.replace(fold=1))}
    return offsets.pop() if len(offsets) == 1 else None


def _next_unsteady_day(day: date, last: date, tz: tzinfo) -> date | None:
    """The first day from ``day`` to ``last`` on which the clock of ``tz`` changes, or None."""
    for year in range(day.year, last.year + 1):  # a year's list may end with the next year's 1 January
        found = next((d for d in _unsteady_days(year, tz) if day <= d <= last), None)
        if found is not None:
            return found
    return None


@functools.lru_cache(maxsize=1024)
def _unsteady_days(year: int, tz: tzinfo) -> tuple[date, ...]:
    """The days of ``year`` on which the clock of ``tz`` changes: its offset is looked at at noon on the
    1st of each month (zones change clocks five weeks apart at the closest, in Morocco, so two
    changes never fall between two looks), and where it differs the day is found by bisection."""
    if tz is UTC:
        return ()
    months = [date(year, m, 1) for m in range(1, 13)] + [date(year + 1, 1, 1)]
    offsets = [tz.utcoffset(datetime.combine(m, time(12))) for m in months]
    days = set()
    for (lo, before), (hi, after) in zip(zip(months, offsets), zip(months[1:], offsets[1:])):
        if before == after:
            continue
        while (hi - lo).days > 1:  # the offset at noon is ``before`` on lo and ``after`` on hi
            middle = lo + timedelta(days=(hi - lo).days // 2)
            lo, hi = (middle, hi) if tz.utcoffset(datetime.combine(middle, time(12))) == before else (lo, middle)
        days.update(d for d in (lo, hi) if _steady_offset(d, tz) is None)
    return tuple(sorted(days))


def _last_steady_day(day: date, last: date, offset: timedelta, tz: tzinfo) -> date:
    """The last day from ``day`` (steady at ``offset``) to ``last``, at most a month later, up
    to which every day is steady at ``offset``: zones change clocks at most once a month
    (twice within five weeks at the closest, in Morocco), so it is found by bisection."""
    if _steady_offset(last, tz) == offset and _steady_offset(day + (last - day) / 2, tz) == offset:
        return last
    while (last - day).days > 1:
        middle = day + timedelta(days=(last - day).days // 2)
        if _steady_offset(middle, tz) == offset:
            day = middle
        else:
            last = middle
    return day


def _at_local_midnight(day: date, tz: tzinfo) -> datetime:
    return datetime.combine(day, time(0), tzinfo=tz).astimezone(UTC)


def parse_cron(text: object, default_zone: str | None = None) -> CronSpec:
    """Parse a cron string (five fields, a macro, ``@always``/``@never``, optional
    ``CRON_TZ=Area/City`` prefix) read in ``default_zone``; raise ScheduleError."""
    # Checked before the cache, which cannot hash a list or a dict, and must not keep
    # megabyte-long keys.
    if not isinstance(text, str) or not text.strip():
        raise ScheduleError("cron expression must be a non-empty string")
    if len(text) > MAX_CRON_LENGTH:
        raise ScheduleError(f"cron expression is {len(text)} characters long, more than {MAX_CRON_LENGTH}")
    return _parse_cron(text, default_zone)


@functools.lru_cache(maxsize=4096)
def _parse_cron(text: str, default_zone: str | None) -> CronSpec:
    """parse_cron for a non-empty string, memoised."""
    body = text.strip()
    zone_name = default_zone
    head, _, rest = body.partition(" ")
    if head.startswith(("CRON_TZ=", "TZ=")):
        zone_name = head.split("=", 1)[1]
        body = rest.strip()
        if not zone_name:
            raise ScheduleError(f"cron expression {text!r} has an empty CRON_TZ")
    tz = zone(zone_name)
    lowered = body.lower()
    if lowered == "@always":
        return CronSpec(text, "", tz, always=True)
    if lowered == "@never":
        return CronSpec(text, "", tz, never=True)
    expr = _MACROS.get(lowered, body)
    if expr.startswith("@"):
        raise ScheduleError(f"unknown cron macro {body!r}: use @always, @never, @hourly, @daily, @weekly, @monthly or @yearly")
    if len(expr.split()) != 5:
        raise ScheduleError(f"cron expression {text!r} must have five fields (minute hour day-of-month month day-of-week)")
    try:
        fields = CronSim(expr, datetime(2000, 1, 1))
    except (CronSimError, ValueError, IndexError) as err:
        raise ScheduleError(f"invalid cron expression {text!r}: {err}") from None
    return CronSpec(text, expr, tz, fields=fields, _days=_day_table(fields.parts[3], fields.parts[5]))


@functools.lru_cache(maxsize=4096)
def _day_table(day_of_month: str, day_of_week: str) -> _DayTable:
    """The table of matching days shared by the expressions with these day fields."""
    return _DayTable()


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
    _memo: list = field(default_factory=lambda: [()], compare=False, repr=False)

    def _memoised(self, now: datetime) -> tuple | None:
        found = None
        for span in self._memo[0]:
            if span[0] <= now < span[1]:
                found = span if found is None or found[3] is _UNKNOWN else found
        return found

    def _remember(self, span: tuple) -> tuple:
        self._memo[0] = (*self._memo[0][-(_SPANS - 1):], span)
        return span

    def _span(self, now: datetime, need_change: bool) -> tuple:
        span = self._memoised(now)
        if span is None:
            return self._remember(self._search(now, need_change))
        if need_change and span[3] is _UNKNOWN:  # an open window: its first start is known
            chain_end, cost = self._chain_end(span[4] - self.duration)
            return self._remember((*span[:3], chain_end, span[4], 1 + cost))
        return span

    @property
    def _is_window(self) -> bool:
        return self.duration is not None and not (self.spec.always or self.spec.never)

    @functools.cached_property
    def _breaks(self) -> tuple[int, ...]:
        """The indices i of ``spec.walls`` after which the next fire of the day comes later
        than ``duration``: where a chain of windows breaks on a day the clock is steady."""
        seconds = self.duration.total_seconds()
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
        return self._span(now, need_change=True)[3]

    def stable_until(self, now: datetime) -> datetime | None:
        """``next_change``, or earlier for an open window: the end of the window of its first
        start, which needs no search back (None: no change within HORIZON)."""
        return self._span(now, need_change=False)[4]

    def state_and_next_change(self, now: datetime) -> tuple[bool, datetime | None, int]:
        """``active`` and ``next_change`` at ``now``, and what finding them costs in cron
        searches (the same whether it was remembered or not)."""
        span = self._span(now, need_change=True)
        return span[2], span[3], span[5]

    def _search(self, now: datetime, need_change: bool) -> tuple:
        """The span from ``now``. Searches reach HORIZON past the start of the UTC day, the same
        end for every ``now`` of that day, so a memoised "no change" is what a new search says."""
        day = now.replace(hour=0, minute=0, second=0, microsecond=0) if now.tzinfo is UTC else \
            now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        if not self._is_window:
            change = self.spec.next_flip(now, until=day + HORIZON)
            return now, change or day + timedelta(days=1), self.spec.matches(now), change, change, 1
        # Open means a fire in (now - duration, now]: a forward search from now - duration
        # answers that (a backward search costs cronsim several times more on sparse schedules).
        first = self.spec.next_fire(now - self.duration, until=day + HORIZON)
        if first is None:
            return now, day + timedelta(days=1), False, None, None, 1
        if first > now:
            return now, first, False, first, first, 1
        # ``first`` is the same from any instant before its window ends, and so is all that
        # is worked out from it.
        ends = first + self.duration
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
        spec, d = self.spec, self.duration
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
            offset = _steady_offset(day, spec.zone)
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
                return _wall(day, walls[breaks[b]], offset) + d, searches + step
            if always_on and spec.every_day:
                # Every day matches and no gap between fires is longer than a window: on to the
                # day before the clock next changes.
                change = _next_unsteady_day(day + timedelta(days=1), last_day, spec.zone)
                if change is None:
                    return None, searches + step
                day = change - timedelta(days=1)
            elif always_on and spec._full_month_from(day):
                # Every day to the month's end matches, and no gap between fires is longer than
                # a window: on to the last of those days with the same steady clock.
                day = _last_steady_day(day, date(day.year, day.month, calendar.monthrange(day.year, day.month)[1]),
                                       offset, spec.zone)
            day_last = _wall(day, walls[-1], offset)
            following = spec._first_day(day + timedelta(days=1), last_day)
            next_offset = _steady_offset(following, spec.zone) if following is not None else None
            if following is None or next_offset is None:
                searches += 1  # none matches to the limit, or the clock changes that day
                nxt = spec.next_fire(day_last, until=limit)
            else:
                nxt = _wall(following, walls[0], next_offset)
            if nxt is None or nxt - day_last > d:
                return (day_last + d if day_last + d < limit else None), searches + step
            latest = nxt
        return latest + d, searches + step + 1

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
            raise ScheduleError(f"schedule entry has unknown fields {sorted(unknown)}: use 'cron' and 'duration'")
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
            raise ScheduleError(f"duration {item['duration']!r} is longer than {format_duration(MAX_DURATION)}")
        return _entry(spec, duration)
    raise ScheduleError(f"schedule entry must be a cron string or {{cron, duration}}, got {type(item).__name__}")
