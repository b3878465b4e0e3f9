"""Cron schedules: minute-match strings, ``{cron, duration}`` windows, time zones, DST.

Parsing and fire times come from cronsim, which follows Debian cron, DST quirks
included: a fire time in a spring-forward gap runs right after the gap, one in a
fall-back overlap runs once. So a window never opens twice.  A minute-match string
is matched against the wall clock of its zone, minute by minute.
"""

from __future__ import annotations

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
_CHAIN_HOPS = 2  # overlapping windows followed per search
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

        cronsim walks day by day to the next matching day (to a 29 February: years), so the
        day is found from the month tables first, and cronsim starts just before it."""
        if self.always or self.never:
            return None
        local = now.astimezone(self.zone)
        last = (until or now + horizon).astimezone(self.zone).date()
        day = self._first_day(local.date(), last)
        if day == local.date() and self._no_fire_left(local):
            day = self._first_day(day + timedelta(days=1), last)
        if day is None:
            return None
        return self._fire(max(now, self._before_first(day)), reverse=False)

    def fire_within(self, start: datetime, end: datetime) -> datetime | None:
        """The first fire time in ``(start, end]``, in UTC, or None: a search no longer than that span."""
        fire = self.next_fire(start, until=end)
        return fire if fire is not None and fire <= end else None

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
        from ``since`` (default: HORIZON back). cronsim walks back day by day; the month
        tables find the day, so cronsim starts at its end."""
        if self.always or self.never:
            return None
        local = now.astimezone(self.zone)
        first = (since or now - HORIZON).astimezone(self.zone).date()
        day = self._last_day(local.date(), first)
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
                else:
                    cur += MINUTE
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
    # The spans last computed, newest last: (from, until, active, next change, stable until).
    # ``active`` holds on [from, until), and each answer is the one a search from any instant
    # of the span gives, so that evaluation stays a function of ``now``. The next change is
    # _UNKNOWN in spans that only ``active`` needed. A search steps forward through several,
    # and the next lookup (a minute later) falls in the first again. Replaced whole, never
    # mutated, so readers in other threads see consistent tuples. Not part of the value.
    _memo: list = field(default_factory=lambda: [()], compare=False, repr=False)

    def _memoised(self, now: datetime, need_change: bool = False) -> tuple | None:
        for span in self._memo[0]:
            if span[0] <= now < span[1] and not (need_change and span[3] is _UNKNOWN):
                return span
        return None

    def _remember(self, span: tuple) -> tuple:
        self._memo[0] = (*self._memo[0][-(_SPANS - 1):], span)
        return span

    def _span(self, now: datetime, need_change: bool) -> tuple:
        span = self._memoised(now, need_change)
        return span if span is not None else self._remember(self._search(now, need_change))

    @property
    def _is_window(self) -> bool:
        return self.duration is not None and not (self.spec.always or self.spec.never)

    def search_cost(self, active: bool) -> int:
        """How many cron searches asking for its next change costs at most, when it is
        ``active`` at that time: a window's forward one, and for an open window the backward
        ones that follow its chain; a minute-match string's one scan of its fields."""
        return 1 + _CHAIN_HOPS if self._is_window and active else 1

    def active(self, now: datetime) -> bool:
        """Whether the entry is active at ``now``. No look-ahead, so this is cheap (a window
        searches only its own duration back); only ``next_change`` searches ahead."""
        span = self._memoised(now)
        if span is not None:
            return span[2]
        if not self._is_window:
            return self.spec.matches(now)
        first = self.spec.fire_within(now - self.duration, now)
        if first is None:
            return False
        self._remember((now, first + self.duration, True, _UNKNOWN, first + self.duration))
        return True

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

    def state_and_next_change(self, now: datetime) -> tuple[bool, datetime | None]:
        """``active`` and ``next_change`` at ``now``, found by one search."""
        span = self._span(now, need_change=True)
        return span[2], span[3]

    def _search(self, now: datetime, need_change: bool) -> tuple:
        """The span from ``now``. Searches reach HORIZON past the start of the UTC day, the same
        end for every ``now`` of that day, so a memoised "no change" is what a new search says."""
        day = now.replace(hour=0, minute=0, second=0, microsecond=0) if now.tzinfo is UTC else \
            now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        if not self._is_window:
            change = self.spec.next_flip(now, until=day + HORIZON)
            return now, change or day + timedelta(days=1), self.spec.matches(now), change, change
        # Open means a fire in (now - duration, now]: a forward search from now - duration
        # answers that (a backward search costs cronsim several times more on sparse schedules).
        first = self.spec.next_fire(now - self.duration, until=day + HORIZON)
        if first is None:
            return now, day + timedelta(days=1), False, None, None
        if first > now:
            return now, first, False, first, first
        # ``first`` is the same from any instant before its window ends, and so is all that
        # is worked out from it.
        ends = first + self.duration
        return now, ends, True, self._chain_end(first) if need_change else _UNKNOWN, ends

    def _chain_end(self, first: datetime) -> datetime:
        """When the windows overlapping one another from the one that starts at ``first`` end,
        following the chain _CHAIN_HOPS windows ahead (callers ask again there if it goes on)."""
        latest = first
        for _ in range(_CHAIN_HOPS):
            # The latest start within the current window: no gap up to it, so it continues.
            nxt = self.spec.last_fire(latest + self.duration, since=latest)
            if nxt is None or nxt <= latest:
                break
            latest = nxt
        return latest + self.duration

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
