"""admission.ical.parse: recurrences (RRULE, RDATE, EXDATE, RECURRENCE-ID), all-day events,
TZID with and without VTIMEZONE, Google's X-WR-TIMEZONE and floating times across DST, filters;
and hostile feeds in the child process: malformed, endless expansions, bounded counts."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from admission.core.base import names
from admission.ical.parse import MAX_EXAMINED, ParseError, expand, parse_in_child
from tests.builders import at

START, END = at("2026-03-01T00:00"), at("2026-04-30T00:00")
BERLIN_VTIMEZONE = """BEGIN:VTIMEZONE
TZID:Custom Berlin
BEGIN:DAYLIGHT
TZOFFSETFROM:+0100
TZOFFSETTO:+0200
DTSTART:19810329T020000
RRULE:FREQ=YEARLY;BYMONTH=3;BYDAY=-1SU
END:DAYLIGHT
BEGIN:STANDARD
TZOFFSETFROM:+0200
TZOFFSETTO:+0100
DTSTART:19961027T030000
RRULE:FREQ=YEARLY;BYMONTH=10;BYDAY=-1SU
END:STANDARD
END:VTIMEZONE
"""


def ics(events: str, head: str = "") -> bytes:
    text = "BEGIN:VCALENDAR\nVERSION:2.0\nPRODID:-//test//EN\n" + head + events + "END:VCALENDAR\n"
    return text.replace("\n", "\r\n").encode()


def event(uid: str, *lines: str, summary: str = "Freeze") -> str:
    return (
        "BEGIN:VEVENT\n"
        + f"UID:{uid}\nSUMMARY:{summary}\n"
        + "".join(f"{line}\n" for line in lines)
        + "END:VEVENT\n"
    )


def spans(body: bytes, start: datetime = START, end: datetime = END, **kw) -> list[tuple[datetime, datetime]]:
    return [(e.start, e.end) for e in expand(body, start, end, **kw).events]


def test_a_weekly_rule_keeps_its_wall_clock_time_across_dst_with_exdate_rdate_and_an_override():
    body = ics(
        event(
            "w",
            "DTSTART;TZID=Europe/Berlin:20260302T090000",
            "DTEND;TZID=Europe/Berlin:20260302T100000",
            "RRULE:FREQ=WEEKLY;COUNT=6",
            "EXDATE;TZID=Europe/Berlin:20260316T090000",
            "RDATE;TZID=Europe/Berlin:20260318T140000",
        )
        + event(
            "w",
            "RECURRENCE-ID;TZID=Europe/Berlin:20260323T090000",
            "DTSTART;TZID=Europe/Berlin:20260324T120000",
            "DTEND;TZID=Europe/Berlin:20260324T150000",
            summary="Moved freeze",
        )
    )
    assert spans(body) == [
        (at("2026-03-02T08:00"), at("2026-03-02T09:00")),  # 09:00 CET
        (at("2026-03-09T08:00"), at("2026-03-09T09:00")),
        (at("2026-03-18T13:00"), at("2026-03-18T14:00")),  # RDATE, lasting as long as the others
        (at("2026-03-24T11:00"), at("2026-03-24T14:00")),  # the 23rd, moved and longer
        (at("2026-03-30T07:00"), at("2026-03-30T08:00")),  # 09:00 CEST: after the clocks changed
        (at("2026-04-06T07:00"), at("2026-04-06T08:00")),
    ]
    assert [e.summary for e in expand(body, START, END).events][3] == "Moved freeze"


def test_a_custom_vtimezone_is_used_for_its_tzid():
    body = ics(
        event("c", "DTSTART;TZID=Custom Berlin:20260327T090000", "DURATION:PT2H", "RRULE:FREQ=DAILY;COUNT=3"),
        head=BERLIN_VTIMEZONE,
    )
    assert spans(body) == [
        (at("2026-03-27T08:00"), at("2026-03-27T10:00")),
        (at("2026-03-28T08:00"), at("2026-03-28T10:00")),
        (at("2026-03-29T07:00"), at("2026-03-29T09:00")),
    ]


def test_all_day_events_cover_the_local_day_even_when_it_is_23_or_25_hours():
    body = ics(
        event("d", "DTSTART;VALUE=DATE:20260329")  # no DTEND: one day
        + event("e", "DTSTART;VALUE=DATE:20261024", "DTEND;VALUE=DATE:20261026")
    )
    assert spans(body, START, at("2026-11-30T00:00"), time_zone="Europe/Berlin") == [
        (at("2026-03-28T23:00"), at("2026-03-29T22:00")),  # 23 hours
        (at("2026-10-23T22:00"), at("2026-10-25T23:00")),  # 49 hours
    ]
    assert spans(body, START, at("2026-11-30T00:00"))[0] == (
        at("2026-03-29T00:00"),
        at("2026-03-30T00:00"),
    )  # UTC


def test_googles_x_wr_timezone_reads_utc_recurrences_and_dates_in_the_calendars_zone():
    # Google writes times in UTC and means the calendar's zone: 08:00Z is 09:00 in Berlin in
    # winter, and the series stays at 09:00 Berlin after the clocks change.
    body = ics(
        event("g", "DTSTART:20260323T080000Z", "DTEND:20260323T090000Z", "RRULE:FREQ=WEEKLY;COUNT=2")
        + event("h", "DTSTART;VALUE=DATE:20260329", "DTEND;VALUE=DATE:20260330"),
        head="X-WR-TIMEZONE:Europe/Berlin\n",
    )
    assert spans(body, time_zone="America/New_York") == [
        (at("2026-03-23T08:00"), at("2026-03-23T09:00")),
        (at("2026-03-28T23:00"), at("2026-03-29T22:00")),  # the calendar's zone wins over the GateKeeper's
        (at("2026-03-30T07:00"), at("2026-03-30T08:00")),
    ]


def test_floating_times_are_read_in_the_gatekeepers_zone():
    body = ics(event("f", "DTSTART:20260310T220000", "DTEND:20260311T060000"))
    assert spans(body, time_zone="America/New_York") == [(at("2026-03-11T02:00"), at("2026-03-11T10:00"))]


def test_filters_cancelled_and_zero_length_events():
    body = ics(
        event(
            "a",
            "DTSTART:20260302T000000Z",
            "DTEND:20260303T000000Z",
            "CATEGORIES:Freeze,Prod",
            summary="Quarter-end FREEZE",
        )
        + event(
            "b",
            "DTSTART:20260304T000000Z",
            "DTEND:20260305T000000Z",
            "CATEGORIES:holiday",
            summary="Team offsite",
        )
        + event("c", "DTSTART:20260306T000000Z", "DTEND:20260307T000000Z", "STATUS:CANCELLED")
        + event("d", "DTSTART:20260308T000000Z")
    )  # a moment, not a span
    assert len(spans(body)) == 2
    assert [e.uid for e in expand(body, START, END, summary="(?i)freeze").events] == ["a"]
    assert [e.uid for e in expand(body, START, END, categories=("prod", "nope")).events] == ["a"]
    assert [e.uid for e in expand(body, START, END, categories=("HOLIDAY",)).events] == ["b"]


def test_an_event_that_began_before_the_range_and_is_still_on_is_listed():
    body = ics(event("long", "DTSTART:20260220T000000Z", "DTEND:20260305T000000Z"))
    assert spans(body) == [(at("2026-02-20T00:00"), at("2026-03-05T00:00"))]


def test_a_hubs_feed_says_how_far_it_is_complete():
    body = ics(
        event("a", "DTSTART:20260302T000000Z", "DTEND:20260303T000000Z"),
        head=f"{names.FEED_COMPLETE_UNTIL_PROPERTY}:2026-03-15T00:00:00Z\n",
    )
    assert expand(body, START, END).complete_until == at("2026-03-15T00:00")
    bad = ics("", head=f"{names.FEED_COMPLETE_UNTIL_PROPERTY}:soon\n")
    with pytest.raises(ParseError, match="is not a timestamp"):
        expand(bad, START, END)


def test_at_most_max_events_are_listed_and_the_rest_is_unknown():
    body = ics(
        event(
            "s", "DTSTART:20260301T000000Z", "DTEND:20260301T000030Z", "RRULE:FREQ=MINUTELY;COUNT=1000000000"
        )
    )
    found = expand(body, START, END, max_events=50)
    assert len(found.events) == 50 and found.complete_until == START + timedelta(minutes=50)
    filtered = expand(body, START, END, summary="never matches")
    assert filtered.events == [] and filtered.complete_until == START + timedelta(minutes=MAX_EXAMINED)


@pytest.mark.parametrize(
    "body, why",
    [
        (b"<html>Sign in</html>", "not an iCalendar feed"),
        (b"BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nDTSTART:2026\r\n", "not an iCalendar feed"),
        (
            ics(event("x", "DTSTART:20260302T000000Z", "RRULE:FREQ=SOMETIMES")),
            "the feed's events cannot be read",
        ),
        (
            ics("BEGIN:VEVENT\nUID:x\nSUMMARY:no start\nEND:VEVENT\n"),
            "the feed's events cannot be read: KeyError",
        ),
    ],
)
def test_malformed_feeds_are_errors(body, why):
    with pytest.raises(ParseError, match=why):
        expand(body, START, END)


def test_the_child_gives_the_same_events():
    body = ics(
        event(
            "w",
            "DTSTART;TZID=Europe/Berlin:20260302T090000",
            "DTEND;TZID=Europe/Berlin:20260302T100000",
            "RRULE:FREQ=WEEKLY;COUNT=6",
        )
    )
    assert parse_in_child(body, START, END).events == expand(body, START, END).events
    with pytest.raises(ParseError, match="not an iCalendar feed"):
        parse_in_child(b"garbage", START, END)


def test_an_endless_expansion_is_stopped_by_the_childs_cpu_limit():
    # Expanded from its start a year before the range: about 31 million occurrences to walk.
    body = ics(
        event(
            "s", "DTSTART:20250301T000000Z", "DTEND:20250301T000001Z", "RRULE:FREQ=SECONDLY;COUNT=1000000000"
        )
    )
    with pytest.raises(ParseError, match=r"could not be parsed within the parser's limits \(1s of CPU"):
        parse_in_child(body, START, END, cpu_seconds=1, wall_seconds=60)


def test_a_secondly_rule_from_the_start_of_the_range_is_cut_at_the_event_bound_in_the_child():
    body = ics(
        event(
            "s", "DTSTART:20260301T000000Z", "DTEND:20260301T000001Z", "RRULE:FREQ=SECONDLY;COUNT=1000000000"
        )
    )
    found = parse_in_child(body, START, END)
    assert len(found.events) == 500 and found.complete_until == START + timedelta(seconds=500)


def test_a_feed_that_needs_too_much_memory_is_stopped_by_the_childs_memory_limit():
    body = ics("".join(event(f"e{i}", "DTSTART:20260302T000000Z", "DURATION:PT1H") for i in range(6000)))
    with pytest.raises(ParseError, match="needs more memory than the parser may use"):
        parse_in_child(body, START, END, memory_bytes=64 << 20, wall_seconds=120)
    assert len(parse_in_child(body, START, END, wall_seconds=120).events) == 500  # within the default limits
