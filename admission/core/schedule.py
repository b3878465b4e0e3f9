"""Cron schedules: minute-match strings, ``{cron, duration}`` windows, time zones, DST.

Parsing and fire times come from cronsim, which follows Debian cron, DST quirks
included: a fire time in a spring-forward gap runs right after the gap, one in a
fall-back overlap runs once. So a window never opens twice.  A minute-match string
is matched against the wall clock of its zone, minute by minute.
"""

from __future__ import annotations

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
MAX_CRON_LENGTH = 256
_SPANS = 8  # spans memoised per schedule entry

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
    """A parsed cron expression with the zone its wall clock is read in."""

    text: str
    expr: str  # five fields, macros expanded; "" for @always/@never
    zone: tzinfo
    always: bool = False
    never: bool = False
    fields: CronSim | None = None  # parsed sets, used for matching only

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
        """The first fire time strictly after ``now``, in UTC; None if there is none within
        ``horizon``. cronsim walks day by day to a rare date (29 February: years), so the
        first matching day is found from the parsed fields first, at most ``horizon`` ahead."""
        if self.always or self.never:
            return None
        day = self._first_day(now, until or now + horizon)
        if day is None:
            return None
        # From a few hours before that day's local midnight (a zone may skip midnight): the
        # days in between do not match, so no fire is skipped.
        return self._fire(max(now, _at_local_midnight(day, self.zone) - timedelta(hours=3)), reverse=False)

    def _first_day(self, now: datetime, until: datetime) -> date | None:
        f = self.fields
        day = now.astimezone(self.zone).date()
        last = until.astimezone(self.zone).date()
        while day <= last:
            if day.month not in f.months:
                day = (day.replace(day=1) + timedelta(days=32)).replace(day=1)
            elif not f.match_day(day):
                day += timedelta(days=1)
            else:
                return day
        return None

    def last_fire(self, now: datetime) -> datetime | None:
        """The latest fire time at or before ``now``, in UTC."""
        return self._fire(now, reverse=True)

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
        for _, fire in zip(range(4), CronSim(self.expr, local, reverse=reverse)):
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
        while cur <= deadline:
            local = cur.astimezone(self.zone)
            if self.matches(cur) != state:
                return cur
            # Jump over spans whose match cannot change, instead of minute by minute.
            if state:
                if full_minutes and full_hours:
                    cur = _next_local_midnight(local)
                elif full_minutes:
                    cur = _next_local_hour(cur, local)
                else:
                    cur += MINUTE
            elif local.month not in f.months:
                cur = _next_local_month(local)
            elif not f.match_day(local.date()):
                cur = _next_local_midnight(local)
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


def _at_local_midnight(day: date, tz: tzinfo) -> datetime:
    return datetime.combine(day, time(0), tzinfo=tz).astimezone(UTC)


def _next_local_midnight(local: datetime) -> datetime:
    return _at_local_midnight(local.date() + timedelta(days=1), local.tzinfo)


def _next_local_month(local: datetime) -> datetime:
    first = (local.date().replace(day=1) + timedelta(days=32)).replace(day=1)
    return _at_local_midnight(first, local.tzinfo)


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
    return CronSpec(text, expr, tz, fields=fields)


@dataclass(frozen=True)
class Entry:
    """One schedule entry: a minute-match string, or a window of ``duration`` from each fire.

    ``active`` and ``next_change`` are memoised together: the entry is known to stay as it is
    from the time they were computed until its next change, so a search that steps through
    many instants asks cron (the costly part) once per change of this entry, not per step.
    """

    spec: CronSpec
    duration: timedelta | None = None
    # [(from, until, active, next change)]: one slot, replaced whole, so readers in other threads see a
    # consistent triple. Not part of the value (equality, hashing, repr).
    # The spans last computed, newest last: a search steps forward through several, and the
    # next lookup (a minute later) falls in the first again. Replaced whole, never mutated,
    # so readers in other threads see consistent tuples. Not part of the value.
    _memo: list = field(default_factory=lambda: [()], compare=False, repr=False)

    def _span(self, now: datetime) -> tuple[datetime, datetime, bool, datetime | None]:
        spans = self._memo[0]
        for span in spans:
            if span[0] <= now < span[1]:
                return span
        # Searches reach HORIZON past the start of the UTC day, the same end for every ``now``
        # of that day, so that a memoised "no change" is the answer a new search would give.
        day = now.replace(hour=0, minute=0, second=0, microsecond=0) if now.tzinfo is UTC else \
            now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        active, change = self._compute(now, day + HORIZON)
        span = (now, change if change is not None else day + timedelta(days=1), active, change)
        if self.duration is not None and active and not (self.spec.always or self.spec.never):
            return span  # how long an open window lasts depends on ``now`` (chained fires): not memoised
        self._memo[0] = (*spans[-(_SPANS - 1):], span)
        return span

    def active(self, now: datetime) -> bool:
        """Whether the entry is active at ``now``."""
        return self._span(now)[2]

    def next_change(self, now: datetime) -> datetime | None:
        """A time after ``now`` before which ``active`` cannot change (None: never).

        For windows this may be a window's end that a later, overlapping window
        continues; callers re-evaluate there.
        """
        return self._span(now)[3]

    def _compute(self, now: datetime, until: datetime) -> tuple[bool, datetime | None]:
        if self.duration is None or self.spec.always or self.spec.never:
            return self.spec.matches(now), self.spec.next_flip(now, until=until)
        return self._window(now, until)

    def _window(self, now: datetime, until: datetime) -> tuple[bool, datetime | None]:
        """Whether a window is open at ``now``, and a time before which that cannot change.

        Open means a fire in (now - duration, now]: a forward search from now - duration
        answers that (a backward search costs cronsim several times more on sparse schedules).
        """
        first = self.spec.next_fire(now - self.duration, until=until)
        if first is None:
            return False, None
        if first > now:
            return False, first
        # Open: it lasts at least until the latest window that started by now ends (a later,
        # overlapping one is found there). That start is near, so searching back is cheap.
        latest = self.spec.last_fire(now)
        return True, max(first, latest or first) + self.duration

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
        return _entry(spec, duration)
    raise ScheduleError(f"schedule entry must be a cron string or {{cron, duration}}, got {type(item).__name__}")
