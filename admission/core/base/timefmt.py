"""RFC 3339 timestamps and Go durations, as Kubernetes and Flux write them."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

# No instant we read may be this late: a toggle, an approval's expiry or a calendar's interval
# dated near year 9999 would overflow the arithmetic every reader does with it (a toggle plus its
# window, a search from it), and one such value would break every gate's metrics and calendars.
# Nothing we plan reaches this far, so a later instant is input we refuse.
LATEST = datetime(3000, 1, 1, tzinfo=UTC)

_GO_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


def parse_duration(text: object) -> timedelta:
    """Parse a Go duration such as ``1h``, ``62h`` or ``1h30m5.5s``; raise ValueError."""
    if not isinstance(text, str):
        raise ValueError(f"duration must be a string like '1h30m', got {type(text).__name__}")
    s = text.strip()
    sign = 1
    if s[:1] in "+-" and s:
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    if s == "0":
        return timedelta(0)
    pos, total = 0, 0.0
    for match in _GO_DURATION.finditer(s):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if not s or pos != len(s):
        raise ValueError(f"invalid duration {text!r}: use Go syntax such as '30s', '1h' or '2h45m'")
    try:
        return timedelta(seconds=sign * total)
    except OverflowError:  # more than a timedelta holds (2.7 million years), or infinite
        raise ValueError(f"duration {text!r} is too long") from None


def format_duration(delta: timedelta) -> str:
    """Format a timedelta the way Go prints whole-second durations (``1h2m3s``)."""
    seconds = int(delta.total_seconds())
    if seconds == 0:
        return "0s"
    sign = "-" if seconds < 0 else ""
    hours, rest = divmod(abs(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    out = f"{hours}h" if hours else ""
    if hours or minutes:
        out += f"{minutes}m"
    return f"{sign}{out}{secs}s"


def parse_time(text: object) -> datetime:
    """Parse an RFC 3339 timestamp into an aware UTC datetime; raise ValueError."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("timestamp must be an RFC 3339 string such as 2021-03-26T10:00:00Z")
    s = text.strip()
    if s[-1] in "zZ":
        s = s[:-1] + "+00:00"
    try:
        value = datetime.fromisoformat(s)
    except ValueError:
        raise ValueError(f"invalid timestamp {text!r}: use RFC 3339 such as 2021-03-26T10:00:00Z") from None
    if value.tzinfo is None:
        raise ValueError(f"invalid timestamp {text!r}: a time zone offset (such as Z) is required")
    return bounded(value.astimezone(UTC), text)


def bounded(value: datetime, text: object = None) -> datetime:
    """``value``, or ValueError when it is not before LATEST."""
    if value >= LATEST:
        raise ValueError(
            f"timestamp {text if text is not None else format_time(value)!r} is too late: "
            f"instants from {format_time(LATEST)} on are refused"
        )
    return value


def format_time(value: datetime) -> str:
    """Format an aware datetime as RFC 3339 in UTC, to the second, as Kubernetes does
    (status fields, Event timestamps, messages)."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_distinct_time(value: datetime) -> str:
    """RFC 3339 in UTC with microseconds, for instants that must stay distinct and ordered
    within one second: a toggle written right after another (ties close), a reconcile request
    Flux must see as new (it compares with lastHandledReconcileAt), a Lease's MicroTime."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def format_log_time(value: datetime) -> str:
    """RFC 3339 in UTC to the millisecond: the ``ts`` of a log line."""
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def format_label(value: date | datetime, style: str) -> str:
    """Short labels for people, in the value's own zone (the freeze calendar's timeline, the
    board): ``weekday`` 'Mo 23', ``day`` '23', ``day-month`` '23 Nov', ``minute`` '23 Nov 14:05',
    ``hour`` '14:05', ``zoned`` 'Mon 23 Nov 14:05 CET' (the zone's abbreviation)."""
    if style == "weekday":
        return value.strftime("%a")[:2] + value.strftime(" %d")
    if style == "zoned" and isinstance(value, datetime):
        return value.strftime("%a %d %b %H:%M ") + (value.tzname() or "")
    return value.strftime(
        {"day": "%d", "day-month": "%d %b", "minute": "%d %b %H:%M", "hour": "%H:%M"}[style]
    )
