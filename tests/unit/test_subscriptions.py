"""GateKeeper calendars in the pure core: intervals from status decide at ``now``; a calendar
that cannot be read (never fetched, stale, listed only up to now, malformed) closes its gate."""

from __future__ import annotations

from datetime import timedelta

import pytest

from admission.core.base import names
from admission.core.gates.gates import evaluate
from admission.core.gates.gatespec import compile_gate
from admission.core.gates.timeline import intervals
from admission.core.time.subscriptions import (
    MAX_INTERVALS,
    FeedEvent,
    parse_calendar,
    parse_calendars,
    status_entry,
)
from tests.builders import at, calendar_keeper, calendar_status, gate

FEED = {"url": "https://calendar.example.com/freeze.ics", "name": "freeze"}
LONG = {**FEED, "staleAfter": "800h"}  # intervals fetched on 1 December still count at New Year
FETCHED = at("2026-12-01T00:00")
CHRISTMAS = [
    ("2026-12-24T00:00", "2026-12-27T00:00"),
    ("2026-12-26T12:00", "2026-12-28T00:00"),
    ("2026-12-31T12:00", "2027-01-01T12:00"),
]


def state(keepers, now, gate_obj=None):
    return evaluate(compile_gate(gate_obj or gate("g", default="opened"), keepers), now)


def following(events=CHRISTMAS, calendar=LONG, fetched=FETCHED, **kw):
    return calendar_keeper("k", "g", [calendar], [calendar_status(calendar, fetched, events, **kw)])


def test_the_gate_is_closed_during_the_feeds_events_and_says_which():
    k = following()
    before, during, after = (
        state([k], at(t)) for t in ("2026-12-23T23:59", "2026-12-25T10:00", "2026-12-28T00:00")
    )
    assert before.open and after.open
    assert (during.open, during.reason) == (False, names.REASON_SCHEDULED)
    assert during.message == "Gate closed by GateKeeper 'k' calendar 'freeze' event 'event 0'"
    # Overlapping events are one closure: it opens when the last of them ends.
    assert during.next_transition == at("2026-12-28T00:00") == during.valid_until
    assert before.next_transition == at("2026-12-24T00:00")


def test_an_opened_calendar_opens_a_gate_closed_by_default_and_closed_entries_still_win():
    cal = {**LONG, "action": "opened"}
    k = following(calendar=cal, events=[("2026-12-02T09:00", "2026-12-02T17:00")])
    k["spec"]["cronjob"] = {"closed": ["* 12 * * *"]}  # lunch: closed, even in a release window
    closed = gate("g", default="closed")
    assert not state([k], at("2026-12-02T08:59"), closed).open
    assert state([k], at("2026-12-02T09:00"), closed).open
    assert not state([k], at("2026-12-02T12:30"), closed).open
    assert not state([k], at("2026-12-02T17:00"), closed).open


@pytest.mark.parametrize(
    "status, now, why",
    [
        (None, FETCHED, "calendar 'freeze' has not been fetched yet"),
        (
            "failed first",
            FETCHED,
            "calendar 'freeze' has not been fetched yet: HTTP 500 Internal Server Error",
        ),
        (
            "ok",
            FETCHED + timedelta(hours=24),
            "calendar 'freeze' is stale: last fetched successfully at "
            "2026-12-01T00:00:00Z, more than 24h0m0s ago",
        ),
        ("short", at("2026-12-01T12:00"), "calendar 'freeze' lists events only until 2026-12-01T12:00:00Z"),
    ],
)
def test_a_calendar_that_cannot_be_read_closes_the_gate_whatever_its_action(status, now, why):
    for action in ("closed", "opened"):
        cal = {**FEED, "action": action}
        if status is None:
            statuses = []
        elif status == "failed first":
            statuses = [calendar_status(cal, FETCHED, error="HTTP 500 Internal Server Error")]
        else:
            statuses = [
                calendar_status(
                    cal, FETCHED, [], complete_until=at("2026-12-01T12:00") if status == "short" else None
                )
            ]
        s = state([calendar_keeper("k", "g", [cal], statuses)], now)
        assert (s.open, s.reason) == (False, names.REASON_UNKNOWN), action
        assert s.message == f"gate state unknown: GateKeeper 'k' {why}"


def test_a_failed_fetch_keeps_the_last_good_intervals_until_they_are_stale():
    good = calendar_status(FEED, FETCHED, CHRISTMAS)
    failed = calendar_status(FEED, FETCHED + timedelta(hours=2), error="timed out", previous=good)
    k = calendar_keeper("k", "g", [FEED], [failed])
    assert [i["start"] for i in failed["intervals"]] == [i["start"] for i in good["intervals"]]
    assert state([k], FETCHED + timedelta(hours=3)).open
    stale = state([k], FETCHED + timedelta(hours=24))
    assert stale.reason == names.REASON_UNKNOWN and stale.message.endswith(
        "more than 24h0m0s ago (timed out)"
    )
    # The gate's memoised state must end when the calendar goes stale.
    assert state([k], FETCHED + timedelta(hours=3)).valid_until == FETCHED + timedelta(hours=24)


def test_a_manual_open_beats_a_calendar_that_cannot_be_read():
    opened = gate("g", default="opened", annotations={names.OPEN_ANNOTATION: "2026-12-01T00:00:00Z"})
    s = state([calendar_keeper("k", "g", [FEED], [])], at("2026-12-02T00:00"), opened)
    assert (s.open, s.reason) == (True, names.REASON_OPEN_REQUESTED)


def test_intervals_fetched_for_another_filter_or_zone_are_not_used():
    status = calendar_status(FEED, FETCHED, CHRISTMAS)
    for edited in ({**FEED, "filter": {"summary": "(?i)freeze"}}, {**FEED, "url": FEED["url"] + "?v=2"}):
        s = state([calendar_keeper("k", "g", [edited], [status])], at("2026-12-02T00:00"))
        assert s.reason == names.REASON_UNKNOWN and "has not been fetched yet" in s.message
    in_berlin = calendar_keeper("k", "g", [FEED], [status], timeZone="Europe/Berlin")
    assert state([in_berlin], at("2026-12-02T00:00")).reason == names.REASON_UNKNOWN  # all-day events move


def test_a_malformed_status_closes_the_gate():
    status = calendar_status(FEED, FETCHED, CHRISTMAS)
    status["intervals"][0]["end"] = "yesterday"
    s = state([calendar_keeper("k", "g", [FEED], [status])], at("2026-12-02T00:00"))
    assert (
        s.reason == names.REASON_UNKNOWN
        and "calendar 'freeze' has a malformed status: invalid timestamp" in s.message
    )


@pytest.mark.parametrize(
    "entry, why",
    [
        ({"url": "http://calendar.example.com/a.ics"}, "is plain http: use https, or set allowHTTP: true"),
        ({"url": "ftp://calendar.example.com/a.ics"}, "must be an https:// URL"),
        (
            {"url": "https://bob:secret@calendar.example.com/a.ics"},
            "must not hold credentials: use secretRef",
        ),
        ({"url": "https://x/a.ics", "action": "open"}, "action 'open' must be 'closed' or 'opened'"),
        (
            {"url": "https://x/a.ics", "filter": {"summary": "(unclosed"}},
            "filter.summary is not a regular expression",
        ),
        ({"url": "https://x/a.ics", "filter": {"categories": "freeze"}}, "filter.categories must be a list"),
        ({"url": "https://x/a.ics", "interval": "1d"}, "interval: invalid duration '1d'"),
        (
            {"url": "https://x/a.ics", "interval": "1h", "staleAfter": "30m"},
            "staleAfter '30m' must be from 1h0m0s",
        ),
        ({"url": "https://x/a.ics", "caBundle": "not base64!"}, "caBundle must be base64"),
        ({"url": "https://x/a.ics", "secretRef": "token"}, "secretRef must be {name: "),
        ({"url": "https://x/a.ics", "token": "abc"}, "has unknown fields ['token']"),
    ],
)
def test_a_calendar_entry_that_cannot_be_used_makes_the_gate_invalid(entry, why):
    s = state([calendar_keeper("k", "g", [entry])], FETCHED)
    assert (s.open, s.reason) == (False, names.REASON_INVALID)
    assert "GateKeeper 'k' cannot be evaluated: calendars[0]" in s.message and why in s.message


def test_calendars_are_bounded_per_keeper_and_count_as_entries_of_the_gate():
    too_many = calendar_keeper("k", "g", [{"url": f"https://x/{i}.ics"} for i in range(5)])
    assert "calendars has 5 entries, more than 4" in state([too_many], FETCHED).message
    crons = calendar_keeper(
        "k", "g", [{"url": "https://x/a.ics"}], closed=["0 1 * * *"] * 16, opened=["0 2 * * *"] * 16
    )
    assert "33 schedule entries and calendars, more than 32" in state([crons], FETCHED).message


def test_defaults_and_names():
    cal = parse_calendar({"url": "https://calendar.example.com:8443/a.ics?token=secret"})
    assert (cal.action, cal.interval, cal.stale_after, str(cal)) == (
        "closed",
        timedelta(minutes=15),
        timedelta(hours=24),
        "calendar 'calendar.example.com:8443'",
    )
    assert parse_calendars({"calendars": None}) == []
    assert parse_calendar({"url": "https://x/a.ics", "interval": "24h"}).stale_after == timedelta(hours=24)


def test_status_entries_are_bounded_and_say_how_far_they_are_complete():
    cal = parse_calendar(LONG)
    events = [
        FeedEvent(
            FETCHED + timedelta(hours=i), FETCHED + timedelta(hours=i, minutes=30), "u" * 500, "s\n" * 200
        )
        for i in range(MAX_INTERVALS + 10)
    ]
    entry = status_entry(cal, None, FETCHED, events=events, complete_until=FETCHED + timedelta(days=35))
    assert len(entry["intervals"]) == MAX_INTERVALS
    assert entry["completeUntil"] == "2026-12-21T20:00:00Z"  # the start of the first event not kept
    assert len(entry["intervals"][0]["uid"]) <= 120 and "\n" not in entry["intervals"][0]["summary"]
    not_modified = status_entry(cal, entry, FETCHED + timedelta(hours=1), etag='"v2"')
    assert not_modified["intervals"] == entry["intervals"] and not_modified["etag"] == '"v2"'
    assert not_modified["lastSuccessTime"] == "2026-12-01T01:00:00Z"
    k = calendar_keeper("k", "g", [LONG], [entry])
    assert state([k], at("2026-12-21T19:15")).reason == names.REASON_SCHEDULED
    assert state([k], at("2026-12-21T20:00")).reason == names.REASON_UNKNOWN


def test_the_calendar_view_shows_the_feeds_closures():
    compiled = compile_gate(gate("g", default="opened"), [following()])
    spans = [
        (i.start, i.end, i.open) for i in intervals(compiled, at("2026-12-20T00:00"), at("2027-01-03T00:00"))
    ]
    assert spans == [
        (at("2026-12-20T00:00"), at("2026-12-24T00:00"), True),
        (at("2026-12-24T00:00"), at("2026-12-28T00:00"), False),
        (at("2026-12-28T00:00"), at("2026-12-31T12:00"), True),
        (at("2026-12-31T12:00"), at("2027-01-01T12:00"), False),
        (at("2027-01-01T12:00"), at("2027-01-03T00:00"), True),
    ]
