"""Freeze calendars: each gate's open and closed intervals over the coming days, as a text
timeline (``kubectl gate calendar``) or an iCalendar feed (``-o ics``, ``GET /calendar.ics``).

The intervals are ``admission.core.gates.timeline.intervals``: the change points and evaluation that
admission decisions use, so the calendar cannot disagree with the webhook. Days are the gate's
own (the time zone its GateKeepers share, else UTC) and start at its local midnight today.
"""

from __future__ import annotations

import bisect
import hashlib
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, tzinfo
from typing import Any, NamedTuple

from admission.core.base import names
from admission.core.base.controls import escaped
from admission.core.base.objects import object_key
from admission.core.base.timefmt import format_distinct_time, format_label, format_time, parse_time
from admission.core.gates.gates import evaluate
from admission.core.gates.gatespec import CompiledGate
from admission.core.gates.references import is_name, is_namespace
from admission.core.gates.timeline import Interval, intervals, time_zone
from admission.core.time.calendarentries import CalendarEntry
from admission.store.index import GateIndex

MAX_DAYS = 366
DEFAULT_DAYS = 14  # GET /calendar.ics without ?days=, and kubectl gate calendar without --days
BAR_WIDTH = 84  # characters of timeline: with the indent, a calendar fits 100 columns
LISTED = 8  # intervals listed under a gate's bar; more are counted
MAX_EVENTS_PER_GATE = 500  # a feed stays small even for a gate whose schedule flips every few minutes
DAYS_RANGE = f"days must be between 1 and {MAX_DAYS} (a whole number)"


class CalendarQuery(NamedTuple):
    """What a calendar shows: one namespace's gates or every namespace's (""), how many days,
    one gate or every gate (""). A tuple: the feeds are kept per query."""

    namespace: str = ""
    days: int = DEFAULT_DAYS
    gate: str = ""


def days_of(value: str | int) -> int:
    """A calendar's length in days, from ``?days=``, ``--days`` or a caller; ValueError(DAYS_RANGE)
    when it is not a whole number from 1 to MAX_DAYS."""
    try:
        days = int(value) if isinstance(value, str) else value
    except ValueError:
        raise ValueError(DAYS_RANGE) from None
    if not 1 <= days <= MAX_DAYS:
        raise ValueError(DAYS_RANGE)
    return days


def calendar_query(days: str | int = DEFAULT_DAYS, namespace: str = "", gate: str = "") -> CalendarQuery:
    """The query a caller asks for, checked; ValueError says which part is wrong."""
    query = CalendarQuery(namespace, days_of(days), gate)
    if namespace and not is_namespace(namespace):
        raise ValueError("namespace must be a namespace's name (a DNS-1123 label)")
    if gate and not is_name(gate):
        raise ValueError("gate must be a gate's name (a DNS-1123 subdomain)")
    return query


@dataclass(frozen=True)
class GateCalendar:
    """One gate's intervals from its local midnight today, ``days`` days on."""

    namespace: str
    name: str
    zone: tzinfo
    start: datetime
    end: datetime
    intervals: tuple[Interval, ...]
    # What the first interval's event is named by, when it began before ``start``: the toggle
    # that closed the gate, or its default; so the event keeps its UID from one day to the next.
    since: str = ""
    feeds: tuple[
        CalendarEntry, ...
    ] = ()  # the GateKeeper calendars that decide it (calendarentries.CalendarEntry)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def zone_name(zone: tzinfo) -> str:
    return getattr(zone, "key", None) or str(zone)


def _local_midnight(day: date, zone: tzinfo) -> datetime:
    return datetime.combine(day, time(0), tzinfo=zone)


def calendars(
    index: GateIndex,
    now: datetime,
    days: int = DEFAULT_DAYS,
    namespace: str | None = None,
    gate: str | None = None,
) -> list[GateCalendar]:
    """Every gate's calendar (of ``namespace`` only, and the gate called ``gate`` only, when
    given), sorted by namespace and name."""
    days = days_of(days)
    out = []
    for obj in sorted(index.gates(), key=object_key):
        ns, name = object_key(obj)
        compiled = index.compiled(ns, name)
        if compiled is None or (namespace and ns != namespace) or (gate and name != gate):
            continue
        zone = time_zone(compiled)
        start = _local_midnight(now.astimezone(zone).date(), zone)
        end = _local_midnight(start.date() + timedelta(days=days), zone)
        spans = intervals(compiled, start, end)
        out.append(
            GateCalendar(
                ns,
                name,
                zone,
                start,
                end,
                spans,
                _since(compiled, spans[0]) if spans else "",
                feeds_of(compiled),
            )
        )
    return out


def _since(compiled: CompiledGate, first: Interval) -> str:
    """What the first interval is named by when it began before the range: the toggle that
    closed the gate (its time), or its default."""
    if first.reason == names.REASON_DEFAULT:
        return names.REASON_DEFAULT
    if first.reason == names.REASON_CLOSE_REQUESTED:
        state = evaluate(compiled, first.start)
        return format_distinct_time(state.requested_at) if state.requested_at else ""
    return ""


def feeds_of(compiled: CompiledGate | None) -> tuple[CalendarEntry, ...]:
    """The GateKeeper calendars of a compiled gate, each once (none of a gate not compiled)."""
    if compiled is None:
        return ()
    found = [
        entry
        for _, entry in compiled.closed_entries + compiled.opened_entries
        if isinstance(entry, CalendarEntry)
    ]
    return tuple(dict.fromkeys(found))


def feed_rows(feeds: tuple[CalendarEntry, ...], now: datetime, coming: int = 5) -> list[dict[str, Any]]:
    """What each calendar a gate follows (``feeds_of``) says now: its URL (without the query,
    which may hold a secret), last fetch and success, error, whether it is unknown and why, and
    its next events."""
    rows = []
    for entry in feeds:
        url = entry.cal.url.split("?", 1)[0] + ("?…" if "?" in entry.cal.url else "")
        rows.append(
            {
                "keeper": entry.keeper,
                "name": entry.cal.name,
                "url": url,
                "action": entry.cal.action,
                "lastFetchTime": format_time(entry.last_fetch) if entry.last_fetch else None,
                "lastSuccessTime": format_time(entry.last_success) if entry.last_success else None,
                "error": entry.error,
                "unknown": entry.unknown(now),
                "next": [
                    {"start": format_time(e.start), "end": format_time(e.end), "summary": e.summary}
                    for e in entry.coming(now)[:coming]
                ],
            }
        )
    return rows


# -- text -------------------------------------------------------------------------------


def _hours_per_char(days: int) -> int:
    """The finest whole-hour step that divides a day and fits ``days`` in the bar."""
    for hours in (1, 2, 3, 4, 6, 8, 12, 24):
        if days * 24 // hours <= BAR_WIDTH:
            return hours
    return 24


def _state_char(cal: GateCalendar, starts: list[datetime], start: datetime, end: datetime) -> str:
    seen = set()
    i = max(0, bisect.bisect_right(starts, start) - 1)  # intervals are sorted and contiguous
    while i < len(cal.intervals) and cal.intervals[i].start < end:
        interval = cal.intervals[i]
        if interval.end > start:
            seen.add("?" if not interval.known else "." if interval.open else "#")
        i += 1
    if "?" in seen:
        return "?"
    return seen.pop() if len(seen) == 1 else "+"


def _bar(cal: GateCalendar, hours: int) -> tuple[str, str]:
    """The day labels and the state characters of the timeline, in the gate's local time."""
    labels, chars = "", ""
    starts = [i.start for i in cal.intervals]
    day = cal.start.date()
    while day < cal.end.date():
        per_day = 24 // hours
        for k in range(per_day):
            a = datetime.combine(day, time(k * hours), tzinfo=cal.zone)
            b = (
                datetime.combine(day, time((k + 1) * hours), tzinfo=cal.zone)
                if (k + 1) * hours < 24
                else _local_midnight(day + timedelta(days=1), cal.zone)
            )
            chars += _state_char(cal, starts, a, b)
        label = (
            (format_label(day, "weekday") if per_day >= 6 else format_label(day, "day"))
            if per_day >= 3
            else ""
        )
        if per_day < 3 and day.weekday() == 0:  # too narrow for every day: label Mondays
            label = format_label(day, "day-month")
        labels = labels.ljust(len(chars) - per_day) + label
        day += timedelta(days=1)
    return labels, chars


def _when(value: datetime, zone: tzinfo) -> str:
    return format_label(value.astimezone(zone), "minute")


def to_lines(cals: list[GateCalendar], now: datetime, days: int) -> list[str]:
    """A compact timeline per gate, at most 100 columns wide (before its printer escapes controls)."""
    if not cals:
        return ["no gates found"]
    hours = _hours_per_char(days)
    lines = [
        f"{days} days from today, in each gate's time zone. One character: {hours}h; "
        f"# closed . open + both ? unknown"
    ]
    for cal in cals:
        closed = [i for i in cal.intervals if not i.open and i.known]
        closed_time = sum(((i.end - i.start) for i in closed), timedelta())
        now_state = next((i for i in cal.intervals if i.start <= now < i.end), None)
        current = "" if now_state is None else " open now;" if now_state.open else " closed now;"
        lines += [
            "",
            f"{cal.key}  ({zone_name(cal.zone)};{current} closed {_duration(closed_time)} of {days}d)",
        ]
        labels, chars = _bar(cal, hours)
        for offset in range(0, len(chars), BAR_WIDTH):
            lines += [
                "  " + labels[offset : offset + BAR_WIDTH].rstrip(),
                "  " + chars[offset : offset + BAR_WIDTH],
            ]
        shown = [i for i in cal.intervals if i.end > now]
        for interval in shown[:LISTED]:
            state = "?" if not interval.known else "open" if interval.open else "closed"
            text = f"  {state:<7}{_when(interval.start, cal.zone)} - {_when(interval.end, cal.zone)}  {interval.message}"
            text = text.replace("Gate closed by GateKeeper", "GateKeeper").replace(
                "Gate opened by GateKeeper", "GateKeeper"
            )
            lines.append(text if len(text) <= 100 else text[:99] + "…")
        if len(shown) > LISTED:
            lines.append(f"  ... {len(shown) - LISTED} more intervals (-o json lists them all)")
        for row in feed_rows(cal.feeds, now, coming=1):
            state = (
                f"unknown: {row['unknown']}"
                if row["unknown"]
                else f"error: {row['error']}"
                if row["error"]
                else f"fetched {_when(parse_time(row['lastSuccessTime']), cal.zone)}"
            )
            said = [f"  calendar '{row['name']}' ({row['action']}, GateKeeper {row['keeper']}): {state}"]
            if row["next"] and not row["unknown"]:
                said.append(
                    f"    next {_when(parse_time(row['next'][0]['start']), cal.zone)}  {row['next'][0]['summary']}"
                )
            lines += [text if len(text) <= 100 else text[:99] + "…" for text in said]
    return lines


def _duration(delta: timedelta) -> str:
    hours = round(delta.total_seconds() / 3600)
    return f"{hours // 24}d{hours % 24}h" if hours >= 24 else f"{hours}h"


def feeds_text(rows: list[dict[str, Any]]) -> list[str]:
    """``feed_rows`` for people: ``kubectl gate get``'s Calendars section."""
    lines = ["Calendars:"] if rows else []
    for feed in rows:
        said = (
            f"unknown: {feed['unknown']}"
            if feed["unknown"]
            else f"error: {feed['error']}"
            if feed["error"]
            else "ok"
        )
        lines += [
            f"  {feed['name']} ({feed['action']} during its events; GateKeeper {feed['keeper']})",
            f"    URL:          {feed['url']}",
            f"    Last fetch:   {feed['lastFetchTime'] or '-'} (last success {feed['lastSuccessTime'] or '-'})",
            f"    State:        {said}",
        ]
        lines += [
            f"    Next:         {e['start']} - {e['end']}  {e['summary']}".rstrip() for e in feed["next"]
        ]
        if not feed["next"]:
            lines.append("    Next:         no coming events listed")
    return lines


def to_rows(cals: list[GateCalendar], now: datetime | None = None) -> list[dict[str, Any]]:
    """The calendars as plain data, for ``-o json|yaml``."""
    return [
        {
            "namespace": c.namespace,
            "name": c.name,
            "timeZone": zone_name(c.zone),
            **({"calendars": feed_rows(c.feeds, now or c.start)} if c.feeds else {}),
            "intervals": [
                {
                    "start": format_time(i.start),
                    "end": format_time(i.end),
                    "state": names.REASON_UNKNOWN
                    if not i.known
                    else names.STATE_OPENED
                    if i.open
                    else names.STATE_CLOSED,
                    "reason": i.reason,
                    "message": i.message,
                }
                for i in c.intervals
            ],
        }
        for c in cals
    ]


# -- iCalendar --------------------------------------------------------------------------


def complete_until(gate: GateCalendar) -> datetime:
    """Up to when the feed lists every closed interval of ``gate``: its range's end, or the first
    interval not computed, or the first closed interval past the events listed."""
    unknown = [i.start for i in gate.intervals if not i.known]
    closed = [i for i in gate.intervals if not i.open and i.known]
    unlisted = [closed[MAX_EVENTS_PER_GATE].start] if len(closed) > MAX_EVENTS_PER_GATE else []
    return min([gate.end, *unknown, *unlisted])


def to_ics(cals: list[GateCalendar], now: datetime, name: str = "Flux gates") -> bytes:
    """An iCalendar file with one event per closed interval, in each gate's time zone.

    What a spoke's GateKeeper that follows this feed needs is in it: each event names its gate
    (``X-FLUX-GATE``, and a category) and why it is closed (``X-FLUX-GATE-REASON``, the
    description); its UID stays the same from one fetch to the next; and the calendar says up to
    when it is complete (``X-FLUX-GATE-COMPLETE-UNTIL``: its range, or where a gate's closed
    intervals stop being computed or listed), so a follower never reads "no event" as "open"."""
    from icalendar import Calendar, Event

    cal = Calendar()
    cal.add("prodid", "-//flux-gate-admission//gate calendar//EN")
    cal.add("version", "2.0")
    cal.add("calscale", "GREGORIAN")
    cal.add("x-wr-calname", name)
    cal.add("refresh-interval", timedelta(hours=1), parameters={"VALUE": "DURATION"})
    cal.add("x-published-ttl", "PT1H")
    if cals:
        cal.add(names.FEED_COMPLETE_UNTIL_PROPERTY, format_time(min(complete_until(gate) for gate in cals)))
    for gate in cals:
        closed = [i for i in gate.intervals if not i.open and i.known]
        for number, interval in enumerate(closed[:MAX_EVENTS_PER_GATE], 1):
            event = Event()
            # Stable across fetches: the same gate closing at the same time (or, for a closure that
            # began before the range, by the same toggle or default) is the same event.
            began_before = number == 1 and interval.start == gate.start and gate.since
            origin = gate.since if began_before else format_distinct_time(interval.start)
            uid = hashlib.sha256(f"{gate.key}\n{origin}".encode()).hexdigest()[:32]
            event.add("uid", f"{uid}@{names.GATING_GROUP}")
            event.add("dtstamp", now)
            event.add("dtstart", interval.start.astimezone(gate.zone))
            event.add("dtend", interval.end.astimezone(gate.zone))
            # RFC 5545 allows no control characters in text, and a feed may be read on a terminal.
            key = escaped(gate.key)
            event.add("summary", f"Gate {key} closed")
            description = f"{escaped(interval.message)}\nReason: {escaped(interval.reason)}"
            if number == MAX_EVENTS_PER_GATE < len(closed):
                description += f"\n{len(closed) - number} later closed intervals of this gate are not listed"
            event.add("description", description)
            event.add("categories", ["gate", escaped(gate.namespace), key])
            event.add(names.FEED_GATE_PROPERTY, key)
            event.add(names.FEED_REASON_PROPERTY, escaped(interval.reason))
            event.add("transp", "OPAQUE")
            cal.add_component(event)
    cal.add_missing_timezones()
    return bytes(cal.to_ical())
