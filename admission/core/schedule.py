"""Cron schedules: minute-match strings, ``{cron, duration}`` windows, time zones, DST.

Parsing and fire times come from cronsim, which follows Debian cron, DST quirks
included: a fire time in a spring-forward gap runs right after the gap, one in a
fall-back overlap runs once. So a window never opens twice.  A minute-match string
is matched against the wall clock of its zone, minute by minute.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from admission.core.timefmt import format_duration, parse_duration

UTC = timezone.utc
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

    def next_fire(self, now: datetime) -> datetime | None:
        """The first fire time strictly after ``now``, in UTC."""
        return self._fire(now, reverse=False)

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

    def next_flip(self, now: datetime, horizon: timedelta = HORIZON) -> datetime | None:
        """The first minute boundary after ``now`` where ``matches`` changes, or None."""
        if self.always or self.never:
            return None
        f = self.fields
        state = self.matches(now)
        cur = now.astimezone(UTC).replace(second=0, microsecond=0) + MINUTE
        deadline = now + horizon
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
    """One schedule entry: a minute-match string, or a window of ``duration`` from each fire."""

    spec: CronSpec
    duration: timedelta | None = None

    def active(self, now: datetime) -> bool:
        """Whether the entry is active at ``now``."""
        if self.duration is None or self.spec.always or self.spec.never:
            return self.spec.matches(now)
        start = self.spec.last_fire(now)
        return start is not None and now < start + self.duration

    def next_change(self, now: datetime) -> datetime | None:
        """A time after ``now`` before which ``active`` cannot change (None: never).

        For windows this may be a window's end that a later, overlapping window
        continues; callers re-evaluate there.
        """
        if self.duration is None or self.spec.always or self.spec.never:
            return self.spec.next_flip(now)
        start = self.spec.last_fire(now)
        if start is not None and now < start + self.duration:
            return start + self.duration
        return self.spec.next_fire(now)

    def __str__(self) -> str:
        if self.duration is None:
            return f"'{self.spec}'"
        return f"'{self.spec}' for {format_duration(self.duration)}"


def parse_entry(item: object, default_zone: str | None = None) -> Entry:
    """Parse a GateKeeper entry: a cron string or ``{cron, duration}``; raise ScheduleError."""
    if isinstance(item, str):
        return Entry(parse_cron(item, default_zone))
    if isinstance(item, dict):
        unknown = set(item) - {"cron", "duration"}
        if unknown:
            raise ScheduleError(f"schedule entry has unknown fields {sorted(unknown)}: use 'cron' and 'duration'")
        spec = parse_cron(item.get("cron"), default_zone)
        if item.get("duration") in (None, ""):
            return Entry(spec)
        try:
            duration = parse_duration(item["duration"])
        except ValueError as err:
            raise ScheduleError(str(err)) from None
        if duration <= timedelta(0):
            raise ScheduleError(f"duration {item['duration']!r} must be positive")
        return Entry(spec, duration)
    raise ScheduleError(f"schedule entry must be a cron string or {{cron, duration}}, got {type(item).__name__}")
