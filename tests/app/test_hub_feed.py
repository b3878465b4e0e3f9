"""GET /calendar.ics as a hub's feed for spoke clusters: a token (bearer or basic, constant
time), one gate's events (?gate=), what a follower needs in each event (the gate, the reason,
a UID that stays), how far the feed is complete, 304s, and a toggle served at the next request."""

from __future__ import annotations

import base64
from datetime import timedelta

import pytest
from icalendar import Calendar

from admission.core.admission.decision import Settings
from admission.core.base import names
from admission.store.files import FileStore
from admission.webhook import feeds
from admission.webhook.app import create_app
from admission.webhook.receiver import TokenFile
from tests.builders import at, gate, keeper
from tests.conftest import write_gates
from tests.polling import until

NOW = at("2026-12-20T10:00")
GATES = [
    gate(
        "freeze",
        default="opened",
        annotations={
            names.CLOSE_ANNOTATION: "2026-12-18T08:00:00Z",
            names.REQUESTED_BY_ANNOTATION: "carol",
            names.MESSAGE_ANNOTATION: "incident 42",
        },
    ),
    gate("approval", default="closed"),
    gate("nightly", default="opened"),
    keeper("n", "nightly", closed=[{"cron": "0 1 * * *", "duration": "2h"}], timeZone="Europe/Berlin"),
    gate("flappy", "apps", default="opened"),
    keeper("f", "flappy", closed=["*/2 * * * *"], namespace="apps"),
]


@pytest.fixture
def hub(gates_dir, tmp_path):
    """A hub's app over GATES with a calendar token; its clock can be moved."""
    write_gates(gates_dir, GATES)
    (tmp_path / "token").write_text("hub-s3cret\n")
    store, clock = FileStore(gates_dir), {"now": NOW}
    calendar_feeds = feeds.CalendarFeeds(lambda: store.index, lambda: clock["now"], first_wait=60)
    app = create_app(
        store,
        Settings(),
        clock=lambda: clock["now"],
        calendar_feeds=calendar_feeds,
        calendar_token=TokenFile(str(tmp_path / "token")),
    )
    app.testing = True
    yield app.test_client(), store, clock, gates_dir
    calendar_feeds.close()


BEARER = {"Authorization": "Bearer hub-s3cret"}


def get(client, url: str, headers=BEARER):
    """GET a feed, waiting out the 503s of its first build (it runs in a child process)."""
    response = until(lambda: client.get(url, headers=headers), lambda r: r.status_code != 503, timeout=60)
    return response


def vevents(response) -> list:
    assert response.status_code == 200, response.data
    return Calendar.from_ical(response.data).walk("VEVENT")


def test_the_feed_needs_the_token_as_bearer_or_basic_password(hub):
    client = hub[0]
    for headers in (
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": "hub-s3cret"},
        {"Authorization": "Basic " + base64.b64encode(b"spoke:wrong").decode()},
        {"Authorization": "Basic !!!"},
    ):
        response = client.get("/calendar.ics", headers=headers)
        assert response.status_code == 401 and "Bearer" in response.headers["WWW-Authenticate"], headers
    assert get(client, "/calendar.ics").status_code == 200
    basic = {"Authorization": "Basic " + base64.b64encode(b"any-user:hub-s3cret").decode()}
    assert get(client, "/calendar.ics", basic).status_code == 200


def test_one_gates_events_carry_the_gate_the_reason_and_where_the_feed_ends(hub):
    client = hub[0]
    events = vevents(get(client, "/calendar.ics?namespace=flux-system&gate=freeze&days=40"))
    assert len(events) == 1
    event = events[0]
    assert str(event["SUMMARY"]) == "Gate flux-system/freeze closed"
    assert str(event[names.FEED_GATE_PROPERTY]) == "flux-system/freeze"
    assert str(event[names.FEED_REASON_PROPERTY]) == names.REASON_CLOSE_REQUESTED
    assert "Gate close requested by carol: incident 42" in str(event["DESCRIPTION"])
    assert "flux-system/freeze" in event["CATEGORIES"].cats
    feed = Calendar.from_ical(get(client, "/calendar.ics?namespace=flux-system&gate=freeze&days=40").data)
    assert str(feed[names.FEED_COMPLETE_UNTIL_PROPERTY]) == "2027-01-29T00:00:00Z"  # 40 days from today (UTC)
    nightly = vevents(get(client, "/calendar.ics?gate=nightly&days=3"))
    assert [str(e[names.FEED_REASON_PROPERTY]) for e in nightly] == [names.REASON_SCHEDULED] * 3


def test_a_feed_that_lists_only_some_closures_says_so(hub):
    feed = Calendar.from_ical(get(hub[0], "/calendar.ics?namespace=apps&gate=flappy&days=14").data)
    events = feed.walk("VEVENT")
    assert len(events) == 500
    # The 501st closed interval (2 minutes after the 500th's start; here also where the calendar
    # stops computing a gate that flips every minute) is where a follower stops knowing.
    assert events[-1].decoded("DTSTART").astimezone(NOW.tzinfo) == at("2026-12-20T16:38")
    assert str(feed[names.FEED_COMPLETE_UNTIL_PROPERTY]) == "2026-12-20T16:40:00Z"


def test_an_unknown_gate_is_404_never_an_empty_calendar(hub):
    client = hub[0]
    assert client.get("/calendar.ics?gate=nope", headers=BEARER).status_code == 404
    assert client.get("/calendar.ics?namespace=apps&gate=freeze", headers=BEARER).status_code == 404
    response = client.get("/calendar.ics?gate=Bad_Name", headers=BEARER)
    assert response.status_code == 400 and "gate must be" in response.json["error"]


def test_a_closure_that_began_before_today_keeps_its_uid_from_day_to_day(hub):
    client, _, clock, _ = hub
    url = "/calendar.ics?namespace=flux-system&days=3"
    today = {str(e[names.FEED_GATE_PROPERTY]): str(e["UID"]) for e in vevents(get(client, url))}
    clock["now"] = NOW + timedelta(days=1)
    client.application.extensions["calendar_feeds"]._ttl = 0.0  # rebuild for the new day
    tomorrow = until(
        lambda: get(client, url), lambda r: vevents(r)[0].decoded("DTSTART").day == 21, timeout=60
    )
    assert {
        str(e[names.FEED_GATE_PROPERTY]): str(e["UID"])
        for e in vevents(tomorrow)
        if str(e[names.FEED_GATE_PROPERTY]) in ("flux-system/freeze", "flux-system/approval")
    } == {key: today[key] for key in ("flux-system/freeze", "flux-system/approval")}


def test_an_unchanged_feed_is_304(hub):
    client = hub[0]
    first = get(client, "/calendar.ics?gate=approval")
    assert first.headers["Cache-Control"] == "no-cache"
    again = client.get(
        "/calendar.ics?gate=approval", headers={**BEARER, "If-None-Match": first.headers["ETag"]}
    )
    assert again.status_code == 304 and again.data == b""


def test_a_toggle_is_in_the_next_answer(hub):
    client, store, _, gates_dir = hub
    url = "/calendar.ics?namespace=flux-system&gate=approval&days=3"
    assert len(vevents(get(client, url))) == 1  # closed by default: one event for the three days
    opened = [g for g in GATES if g["metadata"]["name"] != "approval"] + [
        gate("approval", default="closed", annotations={names.OPEN_ANNOTATION: "2026-12-20T09:00:00Z"})
    ]
    write_gates(gates_dir, opened)
    store.reload()
    # The feed was built before the toggle: this request waits for the rebuild (not the 60 s TTL).
    events = vevents(client.get(url, headers=BEARER))
    assert [
        (e.decoded("DTSTART").astimezone(NOW.tzinfo), e.decoded("DTEND").astimezone(NOW.tzinfo))
        for e in events
    ] == [(at("2026-12-20T00:00"), at("2026-12-20T09:00"))]
