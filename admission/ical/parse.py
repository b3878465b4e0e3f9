"""A feed's events over the coming days: parsed by icalendar, recurrences (RRULE, RDATE,
EXDATE, RECURRENCE-ID overrides) expanded by recurring-ical-events, in the right zones
(TZID with or without VTIMEZONE, Google's X-WR-TIMEZONE, floating times and all-day events in
the calendar's zone, else the GateKeeper's), filtered by summary and categories.

Parsing a hostile feed can cost without bound (a FREQ=SECONDLY rule is expanded from its
start; a regular expression can backtrack), so the controller parses in a child process
(``parse_in_child``) that sets its own CPU and memory limits before it reads the feed, at a
lower priority, killed at a wall-clock deadline; a feed that cannot be parsed within them is an
error like any other (the last good intervals stay). ``expand`` bounds what it keeps and what it
looks at too: at most ``max_events`` events and ``MAX_EXAMINED`` occurrences; the intervals are
then complete only up to where it stopped.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from admission.core.base import names
from admission.core.base.timefmt import format_distinct_time, parse_time
from admission.core.time.subscriptions import MAX_INTERVALS, MAX_SUMMARY, MAX_UID, FeedEvent, clean

if TYPE_CHECKING:  # imported where a feed is parsed: a child process's, not every importer's
    from icalendar.cal import Component

MAX_EXAMINED = 20 * MAX_INTERVALS  # occurrences looked at (filtered out or kept)
CPU_SECONDS = 20  # the child's CPU limit
MEMORY_BYTES = (
    256 << 20
)  # the child's address space: with the controller's own ~150 MB, inside its pod's 512 MiB
# (a 3.6 MB feed of 22,000 events parses within 192 MiB); the controller parses one feed at a time
WALL_SECONDS = 60.0
NICENESS = 10


class ParseError(Exception):
    """The feed could not be read as iCalendar, or not within the limits; ``str()`` says why."""


@dataclass(frozen=True)
class Expanded:
    """A feed's events in ``[start, complete_until)``: every event that overlaps that range and
    passes the filter is listed (beyond it, nothing is known)."""

    events: list[FeedEvent]
    complete_until: datetime


def _zone(name: object) -> tzinfo | None:
    if not isinstance(name, str) or not name.strip():
        return None
    try:
        return ZoneInfo(name.strip())
    except (ValueError, OSError, KeyError):
        return None


def _utc(value: date | datetime, zone: tzinfo) -> datetime:
    """An event's start or end as an instant: dates start at the zone's midnight (so an all-day
    event lasts 23 or 25 hours on the days clocks change), floating times are read in the zone."""
    if not isinstance(value, datetime):
        value = datetime.combine(value, time(0))
    if value.tzinfo is None:
        value = value.replace(tzinfo=zone)
    return value.astimezone(UTC)


def _text(component: Component, key: str) -> str:
    value = component.get(key)
    return str(value) if value is not None else ""


def _categories(component: Component) -> set[str]:
    found = component.get("CATEGORIES")
    values = found if isinstance(found, list) else [found] if found is not None else []
    out: set[str] = set()
    for value in values:
        cats = getattr(value, "cats", None)
        for cat in cats if cats is not None else str(value).split(","):
            out.add(str(cat).strip().casefold())
    return out


def _windows(query: Any, start: datetime, end: datetime) -> Iterator[list[Any]]:
    """The occurrences overlapping ``[start, end)``, window by window: an hour first, twice as
    long after each window with few occurrences. A dense rule (every second) is looked at an
    hour at a time, never a month at once; a sparse one in a few windows. (The library's own
    ``after`` narrows to 15 minutes where it finds occurrences, and each window expands every
    rule from its start again: quadratic for dense rules.)"""
    window, at = timedelta(hours=1), start
    while at < end:
        until = min(at + window, end)
        found = query.between(at, until)
        yield found
        if len(found) < 64:
            window = min(window * 2, timedelta(days=8))
        at = until


def expand(
    body: bytes,
    start: datetime,
    end: datetime,
    *,
    time_zone: str | None = None,
    summary: str | None = None,
    categories: tuple[str, ...] = (),
    max_events: int = MAX_INTERVALS,
) -> Expanded:
    """The events of the feed ``body`` that overlap ``[start, end)``; raise ParseError."""
    import icalendar
    import recurring_ical_events

    try:
        calendar = icalendar.Calendar.from_ical(body)
    except MemoryError:
        raise
    except Exception as err:  # noqa: BLE001 (icalendar raises ValueError, and worse, on malformed input)
        raise ParseError(f"not an iCalendar feed: {clean(err, 300)}") from None
    if getattr(calendar, "name", "") != "VCALENDAR":
        raise ParseError("not an iCalendar feed: no VCALENDAR")
    zone = _zone(calendar.get("X-WR-TIMEZONE")) or _zone(time_zone) or UTC
    complete_until = end
    listed = calendar.get(
        names.FEED_COMPLETE_UNTIL_PROPERTY
    )  # a gate-admission hub's feed says where it ends
    if listed is not None:
        try:
            complete_until = min(end, parse_time(str(listed)))
        except ValueError:
            raise ParseError(
                f"{names.FEED_COMPLETE_UNTIL_PROPERTY} is not a timestamp: {clean(listed, 60)}"
            ) from None
    pattern = re.compile(summary) if summary else None
    wanted = {c.casefold() for c in categories}
    events: list[FeedEvent] = []
    try:
        query = recurring_ical_events.of(calendar, components=["VEVENT"])
        examined, seen = 0, set()
        for occurrences in _windows(query, start, complete_until):
            for first, last, occurrence in sorted(
                ((_utc(o.start, zone), _utc(o.end, zone), o) for o in occurrences),
                key=lambda found: found[:2],
            ):
                key = (_text(occurrence, "UID"), first, last)
                if first >= complete_until or key in seen:
                    continue  # a later window's, or one an earlier window had
                if examined >= MAX_EXAMINED or len(events) >= max_events:
                    return Expanded(
                        events, max(first, start)
                    )  # listed up to here; later events are not known
                seen.add(key)
                examined += 1
                if last <= start or last <= first or _text(occurrence, "STATUS").upper() == "CANCELLED":
                    continue
                title = _text(occurrence, "SUMMARY")
                if pattern is not None and not pattern.search(title[:1024]):
                    continue
                if wanted and not wanted & _categories(occurrence):
                    continue
                events.append(FeedEvent(first, last, clean(key[0], MAX_UID), clean(title, MAX_SUMMARY)))
    except (ParseError, MemoryError):
        raise
    except Exception as err:  # noqa: BLE001 (a series that cannot be expanded: the whole feed is unusable)
        raise ParseError(
            f"the feed's events cannot be read: {type(err).__name__}: {clean(err, 300)}"
        ) from None
    return Expanded(events, complete_until)


# -- the child process ------------------------------------------------------------------------


def parse_in_child(
    body: bytes,
    start: datetime,
    end: datetime,
    *,
    time_zone: str | None = None,
    summary: str | None = None,
    categories: tuple[str, ...] = (),
    max_events: int = MAX_INTERVALS,
    cpu_seconds: int = CPU_SECONDS,
    memory_bytes: int = MEMORY_BYTES,
    wall_seconds: float = WALL_SECONDS,
) -> Expanded:
    """``expand`` in a child process with a CPU limit, an address-space limit and a deadline."""
    header = json.dumps(
        {
            "start": format_distinct_time(start),
            "end": format_distinct_time(end),
            "timeZone": time_zone,
            "summary": summary,
            "categories": list(categories),
            "maxEvents": max_events,
            "cpu": cpu_seconds,
            "memory": memory_bytes,
        }
    ).encode()
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    try:
        done = subprocess.run(
            [sys.executable, "-m", __name__],
            input=header + b"\n" + body,
            capture_output=True,
            timeout=wall_seconds,
            env=env,
            close_fds=True,
        )
    except subprocess.TimeoutExpired:
        raise ParseError(f"the feed could not be parsed within {wall_seconds:g}s") from None
    except OSError as err:
        raise ParseError(f"the parser could not start: {err}") from None
    if done.returncode != 0:
        if done.returncode in (-9, -24, 137, 152) or b"MemoryError" in done.stderr[-2000:]:
            raise ParseError(
                f"the feed could not be parsed within the parser's limits ({cpu_seconds}s of CPU, "
                f"{memory_bytes >> 20} MiB)"
            )
        raise ParseError(
            f"the parser failed (exit {done.returncode}): {clean(done.stderr[-300:].decode(errors='replace'), 300)}"
        )
    try:
        answer = json.loads(done.stdout)
        if answer.get("error"):
            raise ParseError(answer["error"])
        events = [
            FeedEvent(parse_time(s), parse_time(e), uid, title) for s, e, uid, title in answer["events"]
        ]
        return Expanded(events, parse_time(answer["completeUntil"]))
    except (ValueError, KeyError, TypeError) as err:
        raise ParseError(f"the parser answered nonsense: {err}") from None


def _limit(cpu_seconds: int, memory_bytes: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    os.nice(NICENESS)


def _child() -> int:
    header, _, body = sys.stdin.buffer.read().partition(b"\n")
    request = json.loads(header)
    _limit(int(request["cpu"]), int(request["memory"]))  # before anything of the feed is parsed
    try:
        found = expand(
            body,
            parse_time(request["start"]),
            parse_time(request["end"]),
            time_zone=request["timeZone"],
            summary=request["summary"],
            categories=tuple(request["categories"]),
            max_events=int(request["maxEvents"]),
        )
        answer = {
            "events": [
                [format_distinct_time(e.start), format_distinct_time(e.end), e.uid, e.summary]
                for e in found.events
            ],
            "completeUntil": format_distinct_time(found.complete_until),
        }
    except ParseError as err:
        answer = {"error": str(err)}
    except MemoryError:
        answer = {"error": "the feed needs more memory than the parser may use"}
    except RecursionError:
        answer = {"error": "the feed nests too deeply"}
    sys.stdout.write(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(_child())
