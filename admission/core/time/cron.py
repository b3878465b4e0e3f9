"""Cron expressions: parsing (macros, @always/@never, CRON_TZ=), minute matching, bounded fire-time searches."""

from __future__ import annotations

import bisect
import calendar
import copy
import functools
import itertools
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from admission.core.time.crondays import DayTable, day_table, next_month, previous_month
from admission.core.time.localtime import UTC, local_midnight, steady_offset, wall_at_offset, wall_instant

MINUTE = timedelta(minutes=1)
# How far ahead a transition is looked for; beyond this, "no transition known".
HORIZON = timedelta(days=400)
MAX_CRON_LENGTH = 256

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


@dataclass(frozen=True)
class CronSpec:
    """A parsed cron expression with the zone its wall clock is read in.

    Fire times are cronsim's, which follows Debian cron, DST quirks included: a fire time in a
    spring-forward gap runs right after the gap, one in a fall-back overlap runs once, so a
    window never opens twice. ``matches`` reads the wall clock of the zone, minute by minute."""

    text: str
    expr: str  # five fields, macros expanded; "" for @always/@never
    zone: tzinfo
    always: bool = False
    never: bool = False
    # The parsed sets; searches start from copies of it. None only for @always and @never,
    # whose methods return before reading it (the asserts below say so to the type checker).
    fields: CronSim | None = None
    # Its matching days, month by month (shared; not part of the value).
    _days: DayTable = field(default_factory=DayTable, compare=False, repr=False)

    def matches(self, now: datetime) -> bool:
        """Whether the wall-clock minute containing ``now`` matches."""
        if self.always or self.never:
            return self.always
        local = now.astimezone(self.zone)
        f = self.fields
        assert f is not None
        return (
            local.minute in f.minutes
            and local.hour in f.hours
            and local.month in f.months
            and f.match_day(local.date())
        )

    def next_fire(
        self, now: datetime, horizon: timedelta = HORIZON, until: datetime | None = None
    ) -> datetime | None:
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
        day = self.first_day(local.date(), last)
        while day is not None and (offset := steady_offset(day, self.zone)) is not None:
            minute = self._wall_after(local.hour * 60 + local.minute if day == local.date() else -1)
            if minute is not None:
                return wall_at_offset(day, minute, offset)
            day = self.first_day(day + timedelta(days=1), last)
        if day == local.date() and self._no_fire_left(local):
            day = self.first_day(day + timedelta(days=1), last)
        if day is None:
            return None
        return self._fire(max(now, self._before_first(day)), reverse=False)

    def _wall_after(self, minute: int) -> int | None:
        """The first wall-clock minute of a day it fires at that is after ``minute`` (-1: the first)."""
        f = self.fields
        assert f is not None
        hours, minutes = self._hours_minutes
        hour, within = divmod(minute, 60) if minute >= 0 else (-1, 59)
        if hour in f.hours and within < minutes[-1]:
            return hour * 60 + minutes[bisect.bisect_right(minutes, within)]
        i = bisect.bisect_right(hours, hour)
        return hours[i] * 60 + minutes[0] if i < len(hours) else None

    def _wall_at_or_before(self, minute: int) -> int | None:
        """The last wall-clock minute of a day it fires at that is not after ``minute`` (1440: the last)."""
        f = self.fields
        assert f is not None
        hours, minutes = self._hours_minutes
        hour, within = divmod(minute, 60) if minute < 1440 else (24, 0)
        if hour in f.hours and within >= minutes[0]:
            return hour * 60 + minutes[bisect.bisect_right(minutes, within) - 1]
        i = bisect.bisect_left(hours, hour)
        return hours[i - 1] * 60 + minutes[-1] if i > 0 else None

    @functools.cached_property
    def _hours_minutes(self) -> tuple[list[int], list[int]]:
        f = self.fields
        assert f is not None
        return sorted(f.hours), sorted(f.minutes)

    def _no_fire_left(self, local: datetime) -> bool:
        """Whether the matching day of ``local`` has no fire after it: it is at or past the
        day's last wall-clock time, and the clock runs on without a change of offset to the end
        of the day (else cronsim decides)."""
        f = self.fields
        assert f is not None
        last_hour = max(f.hours)
        if (local.hour, local.minute) < (last_hour, max(f.minutes)):
            return False
        end = local_midnight(local.date() + timedelta(days=1), self.zone) - timedelta(microseconds=1)
        return end.astimezone(self.zone).utcoffset() == local.utcoffset()

    def _no_fire_before(self, local: datetime) -> bool:
        """Whether the matching day of ``local`` has no fire at or before it: it is before the
        day's first wall-clock time, and the clock ran without a change of offset since midnight."""
        f = self.fields
        assert f is not None
        if (local.hour, local.minute) >= (min(f.hours), min(f.minutes)):
            return False
        return local_midnight(local.date(), self.zone).astimezone(self.zone).utcoffset() == local.utcoffset()

    def first_day(self, day: date, last: date, matching: bool = True) -> date | None:
        """The first day from ``day`` to ``last`` that matches the month and day fields (with
        ``matching=False``: that does not), or None."""
        f = self.fields
        assert f is not None
        months = f.months
        year, month, start = day.year, day.month, day.day
        found: int | None
        while (year, month) <= (last.year, last.month):
            if month not in months:
                if not matching:
                    found = start
                    break
            else:
                days = self._days.days(f, year, month)
                if matching:
                    found = next((d for d in days if d >= start), None)
                else:
                    found = next(
                        (d for d in range(start, calendar.monthrange(year, month)[1] + 1) if d not in days),
                        None,
                    )
                if found is not None:
                    break
            (year, month), start = next_month(year, month), 1
        else:
            return None
        day = date(year, month, found)
        return day if day <= last else None

    def _last_day(self, day: date, first: date) -> date | None:
        """The last day from ``day`` back to ``first`` that matches the month and day fields, or None."""
        f = self.fields
        assert f is not None
        months = f.months
        year, month, end = day.year, day.month, day.day
        while (year, month) >= (first.year, first.month):
            if month in months:
                found = next((d for d in reversed(self._days.days(f, year, month)) if d <= end), None)
                if found is not None:
                    day = date(year, month, found)
                    return day if day >= first else None
            (year, month), end = previous_month(year, month), 31
        return None

    def last_fire(self, now: datetime, since: datetime | None = None) -> datetime | None:
        """The latest fire time at or before ``now``, in UTC; None if there is none on a day
        from ``since`` (default: HORIZON back). As ``next_fire``, backwards."""
        if self.always or self.never:
            return None
        local = now.astimezone(self.zone)
        first = (since or now - HORIZON).astimezone(self.zone).date()
        day = self._last_day(local.date(), first)
        while day is not None and (offset := steady_offset(day, self.zone)) is not None:
            minute = self._wall_at_or_before(local.hour * 60 + local.minute if day == local.date() else 1440)
            if minute is not None:
                return wall_at_offset(day, minute, offset)
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
        f = self.fields
        assert f is not None
        midnight = local_midnight(day, self.zone)
        first = wall_instant(day, min(f.hours), min(f.minutes), self.zone)
        if (
            first is None
            or first.astimezone(self.zone).utcoffset() != midnight.astimezone(self.zone).utcoffset()
        ):
            return midnight - timedelta(hours=3)  # a clock change that day: before a midnight it may skip
        return first - timedelta(seconds=1)

    def _at_last(self, day: date) -> datetime:
        """An instant at or after the last fire of ``day`` and before the fires of the days
        after it (none of which match)."""
        f = self.fields
        assert f is not None
        following = local_midnight(day + timedelta(days=1), self.zone)
        last = wall_instant(day, max(f.hours), max(f.minutes), self.zone)
        end = following - timedelta(microseconds=1)
        if last is None or last.astimezone(self.zone).utcoffset() != end.astimezone(self.zone).utcoffset():
            return following  # a clock change after it that day: from the day's end
        return last

    def _sim(self, start: datetime, reverse: bool) -> CronSim:
        """What ``CronSim(self.expr, start, reverse)`` makes, from a copy of the parsed
        expression instead of parsing it again (tests/unit/test_schedule_search.py compares the two)."""
        f = self.fields
        assert f is not None
        sim = copy.copy(f)
        sim.skip_initial_tick = bool(reverse and start.microsecond)
        sim.dt = start.replace(microsecond=0)
        sim.tick_direction = -1 if reverse else 1
        sim.fixup_tz = None
        # cronsim runs fixed-time jobs on the naive wall clock, as Debian cron does.
        if (
            sim.dt.tzinfo not in (None, UTC)
            and not sim.parts[1].startswith("*")
            and not sim.parts[2].startswith("*")
        ):
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
        for fire in itertools.islice(self._sim(local, reverse), 4):
            fire = fire.astimezone(UTC)
            if (fire <= now) if reverse else (fire > now):
                return fire
        return None

    def next_flip(
        self, now: datetime, horizon: timedelta = HORIZON, until: datetime | None = None
    ) -> datetime | None:
        """The first minute boundary after ``now`` where ``matches`` changes, or None."""
        if self.always or self.never:
            return None
        f = self.fields
        assert f is not None
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
                    day = self.first_day(local.date() + timedelta(days=1), last_day, matching=False)
                    if day is None:
                        return None
                    cur = local_midnight(day, self.zone)
                elif full_minutes:
                    cur = _next_local_hour(cur, local)
                else:  # to the hour's next minute that does not match (clocks change on the hour)
                    later = [m for m in range(local.minute + 1, 60) if m not in f.minutes]
                    cur = cur + MINUTE * (later[0] - local.minute) if later else _next_local_hour(cur, local)
            elif local.month not in f.months or not f.match_day(local.date()):
                # Nothing matches before the first matching day.
                day = self.first_day(local.date() + timedelta(days=1), last_day)
                if day is None:
                    return None
                cur = local_midnight(day, self.zone)
            elif local.hour not in f.hours:
                cur = _next_local_hour(cur, local)
            else:
                later = [m for m in f.minutes if m > local.minute]
                cur = cur + MINUTE * (min(later) - local.minute) if later else _next_local_hour(cur, local)
        return None

    @functools.cached_property
    def walls(self) -> tuple[int, ...]:
        """The wall-clock minutes of a day (hour * 60 + minute) at which it fires, ascending."""
        f = self.fields
        assert f is not None
        return tuple(sorted(h * 60 + m for h in f.hours for m in f.minutes))

    @functools.cached_property
    def gaps(self) -> tuple[int, int]:
        """The longest wait, in minutes, between two fires of a day, and from a day's last
        fire to the next day's first (on a steady clock)."""
        f = self.fields
        assert f is not None
        minutes, hours = sorted(f.minutes), sorted(f.hours)
        within_hours = max((b - a for a, b in itertools.pairwise(minutes)), default=0)
        between_hours = max(
            ((b - a) * 60 + minutes[0] - minutes[-1] for a, b in itertools.pairwise(hours)), default=0
        )
        return max(within_hours, between_hours), (24 - hours[-1] + hours[0]) * 60 + minutes[0] - minutes[-1]

    @functools.cached_property
    def every_day(self) -> bool:
        """Whether every day of every month matches."""
        f = self.fields
        assert f is not None
        return (
            len(f.months) == 12
            and all(d in f.days for d in range(1, 32))
            and f.day_and
            and all(w in f.weekdays or w + 7 in f.weekdays for w in range(7))
        )

    def full_month_from(self, day: date) -> bool:
        """Whether every day from ``day`` to the end of its month matches."""
        f = self.fields
        assert f is not None
        if day.month not in f.months:
            return False
        days, length = self._days.days(f, day.year, day.month), calendar.monthrange(day.year, day.month)[1]
        return len(days) >= length - day.day + 1 and days[-(length - day.day + 1)] == day.day

    def __str__(self) -> str:
        return self.text


def _next_local_hour(cur: datetime, local: datetime) -> datetime:
    return cur + MINUTE * (60 - local.minute)


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
        raise ScheduleError(
            f"unknown cron macro {body!r}: use @always, @never, @hourly, @daily, @weekly, @monthly or @yearly"
        )
    if len(expr.split()) != 5:
        raise ScheduleError(
            f"cron expression {text!r} must have five fields (minute hour day-of-month month day-of-week)"
        )
    try:
        fields = CronSim(expr, datetime(2000, 1, 1))
    except (CronSimError, ValueError, IndexError) as err:
        raise ScheduleError(f"invalid cron expression {text!r}: {err}") from None
    return CronSpec(text, expr, tz, fields=fields, _days=day_table(fields.parts[3], fields.parts[5]))
