"""GateKeeper calendars as schedule entries: the intervals in ``status.calendars``, evaluated at ``now``."""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from admission.core.base.timefmt import bounded, format_duration, format_time, parse_time
from admission.core.time.subscriptions import (
    MAX_ERROR,
    MAX_INTERVALS,
    MAX_SUMMARY,
    MAX_UID,
    CalendarSpec,
    FeedEvent,
    clean,
    find_status,
    parse_calendars,
)


def _instant(text: object) -> datetime:
    """A status timestamp: the controller's own format read directly, anything else as RFC 3339."""
    if type(text) is str and len(text) == 20 and text[19] == "Z" and text[10] == "T":
        return bounded(datetime.fromisoformat(text), text)  # UTC (3.11 reads the Z)
    return parse_time(text)


class CalendarEntry:
    """A calendar's intervals as a schedule entry (the interface of ``schedule.Entry``): active
    during its events, changing at their boundaries, and unknown (see ``unknown``) when its
    status cannot say. Compared by identity: each compiled gate has its own."""

    def __init__(self, keeper: str, cal: CalendarSpec, status: dict[str, Any] | None):
        self.keeper, self.cal = keeper, cal
        self.events: tuple[FeedEvent, ...] = ()
        self.starts: list[datetime] = []  # the events' union as disjoint spans, sorted
        self.ends: list[datetime] = []
        # Set when the status is read; always, once `broken` is None.
        self.last_success: datetime | None = None
        self.last_fetch: datetime | None = None
        self.known_until: datetime | None = None
        self.complete: datetime | None = None
        self.error: str | None = None
        self.broken: str | None = None  # why nothing is known whatever the time
        try:
            self._read(status)
        except (ValueError, TypeError, AttributeError, KeyError) as err:
            self.broken = f"{cal} has a malformed status: {clean(err, MAX_ERROR)}"

    def _read(self, status: dict[str, Any] | None) -> None:
        if status is not None:
            self.error = clean(status["error"], MAX_ERROR) if status.get("error") else None
            self.last_fetch = _instant(status["lastFetchTime"]) if status.get("lastFetchTime") else None
        if status is None or not status.get("lastSuccessTime") or not status.get("completeUntil"):
            self.broken = f"{self.cal} has not been fetched yet" + (f": {self.error}" if self.error else "")
            return
        self.last_success = _instant(status["lastSuccessTime"])
        complete = _instant(status["completeUntil"])
        items = status.get("intervals") or []
        if not isinstance(items, list):
            raise ValueError("intervals must be a list")
        events = []
        for item in items[:MAX_INTERVALS]:
            start, end = _instant(item["start"]), _instant(item["end"])
            if end <= start:
                raise ValueError(f"an interval ends before it starts ({item['start']})")
            events.append(FeedEvent(start, end, item.get("uid") or "", item.get("summary") or ""))
        events.sort(key=lambda e: (e.start, e.end))
        if len(items) > MAX_INTERVALS:
            complete = min(complete, events[-1].end)
        self.events = tuple(events)
        self.complete = complete
        self.known_until = min(complete, self.last_success + self.cal.stale_after)
        for event in events:  # merge into disjoint spans
            if self.ends and event.start <= self.ends[-1]:
                self.ends[-1] = max(self.ends[-1], event.end)
            else:
                self.starts.append(event.start)
                self.ends.append(event.end)

    def unknown(self, now: datetime) -> str | None:
        """Why the calendar's state at ``now`` is not known, or None."""
        if self.broken is not None:
            return self.broken
        assert self.known_until is not None and self.last_success is not None  # see __init__
        if now < self.known_until:
            return None
        if now >= self.last_success + self.cal.stale_after:
            return (
                f"{self.cal} is stale: last fetched successfully at {format_time(self.last_success)}, more than "
                f"{format_duration(self.cal.stale_after)} ago" + (f" ({self.error})" if self.error else "")
            )
        return f"{self.cal} lists events only until {format_time(self.known_until)}"

    def _span(self, now: datetime) -> int:
        return bisect.bisect_right(self.starts, now) - 1

    def active(self, now: datetime) -> bool:
        if self.unknown(now) is not None:
            return False
        i = self._span(now)
        return i >= 0 and now < self.ends[i]

    def next_change(self, now: datetime) -> datetime | None:
        """The next boundary of its events after ``now``, or when it becomes unknown (None:
        unknown now, and so until its status changes)."""
        if self.unknown(now) is not None:
            return None
        known_until = self.known_until
        assert known_until is not None  # known at now: the status was read
        i = self._span(now)
        boundary: datetime | None
        if i >= 0 and now < self.ends[i]:
            boundary = self.ends[i]
        else:
            boundary = self.starts[i + 1] if i + 1 < len(self.starts) else None
        return known_until if boundary is None else min(boundary, known_until)

    stable_until = next_change

    def searched_from(self, origin: datetime) -> _Searched:
        """This calendar as the next-transition search from ``origin`` sees it (see _Searched)."""
        return _Searched(self, origin, guard=False)

    def event_at(self, now: datetime) -> FeedEvent | None:
        i = bisect.bisect_right(self.events, now, key=lambda e: e.start)
        return next((e for e in reversed(self.events[:i]) if now < e.end), None)

    def coming(self, now: datetime) -> list[FeedEvent]:
        """Its events that have not ended at ``now``, in order, their text cleaned."""
        return [
            FeedEvent(e.start, e.end, clean(e.uid, MAX_UID), clean(e.summary, MAX_SUMMARY))
            for e in self.events
            if e.end > now
        ]

    def describe(self, now: datetime) -> str:
        event = self.event_at(now)
        return f"{self.cal}" + (
            f" event '{clean(event.summary, MAX_SUMMARY)}'" if event and event.summary else ""
        )

    def __str__(self) -> str:
        return str(self.cal)


class CalendarGuard:
    """The closing entry every calendar brings: active while the calendar is unknown, so a gate
    whose calendar cannot be read is closed (reason Unknown), whatever the calendar's action."""

    def __init__(self, entry: CalendarEntry):
        self.entry = entry

    def active(self, now: datetime) -> bool:
        return self.entry.unknown(now) is not None

    def next_change(self, now: datetime) -> datetime | None:
        return None if self.active(now) else self.entry.known_until

    stable_until = next_change

    def searched_from(self, origin: datetime) -> _Searched:
        return _Searched(self.entry, origin, guard=True)

    def unknown(self, now: datetime) -> str | None:
        return self.entry.unknown(now)

    def __str__(self) -> str:
        return str(self.entry)


class _Searched:
    """A calendar (or its guard) as the search for a gate's next transition from ``origin`` sees
    it: its listed events count up to ``completeUntil``, and it is assumed to be fetched again
    before it goes stale, unless it is stale (or cannot be read) at ``origin`` already: then it
    stays unknown. Without that, every closure longer than ``staleAfter`` would open at
    "unknown". Whether the gate is open, and how long a state is memoised (``stable_until``),
    never assume it."""

    def __init__(self, entry: CalendarEntry, origin: datetime, guard: bool):
        self.entry, self.guard = entry, guard
        unreadable = (
            entry.broken is not None
            or entry.last_success is None  # None only when broken
            or origin >= entry.last_success + entry.cal.stale_after
        )
        self.until = None if unreadable else entry.complete  # unknown from here on (None: from the start)

    def state_and_next_change(self, now: datetime) -> tuple[bool, datetime | None, int]:
        if self.until is None or now >= self.until:
            return self.guard, None, 1
        if self.guard:
            return False, self.until, 1
        entry, i = self.entry, self.entry._span(now)
        if i >= 0 and now < entry.ends[i]:
            return True, min(entry.ends[i], self.until), 1
        following = entry.starts[i + 1] if i + 1 < len(entry.starts) else None
        return False, self.until if following is None else min(following, self.until), 1


@dataclass(frozen=True)
class KeeperCalendars:
    """A GateKeeper's calendars as entries: guards (closing while unknown), and the entries
    that close or open the gate during their events."""

    guards: tuple[CalendarGuard, ...] = ()
    closed: tuple[CalendarEntry, ...] = ()
    opened: tuple[CalendarEntry, ...] = ()


def keeper_calendars(keeper: str, spec: dict[str, Any], status: object) -> KeeperCalendars:
    """The entries of a GateKeeper's ``spec.calendars`` with what its ``status`` says of them;
    raise ScheduleError for a spec that cannot be evaluated."""
    cals = parse_calendars(spec)
    if not cals:
        return KeeperCalendars()
    entries = [CalendarEntry(keeper, cal, find_status(status, cal)) for cal in cals]
    return KeeperCalendars(
        tuple(CalendarGuard(e) for e in entries),
        tuple(e for e in entries if e.cal.action == "closed"),
        tuple(e for e in entries if e.cal.action == "opened"),
    )
