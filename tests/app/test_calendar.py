"""The freeze calendar: `kubectl gate calendar` (text, json, ics) and GET /calendar.ics."""

from __future__ import annotations

import functools
import subprocess
import sys
import threading
from datetime import UTC, datetime

import pytest
from icalendar import Calendar

from admission.core.admission.decision import Settings
from admission.core.base import names
from admission.store.files import FileStore
from admission.store.index import GateIndex
from admission.webhook import feeds
from admission.webhook.app import create_app
from tests.builders import at, gate, keeper
from tests.conftest import write_gates
from tests.polling import until, wait_for
from tests.processes import BIN

NOW = at("2026-12-20T10:00")
GATES = [
    gate("change-freeze", default="opened"),
    keeper(
        "freeze",
        "change-freeze",
        closed=["* * 24-26 12 *", {"cron": "0 18 * * 5", "duration": "62h"}],
        timeZone="Europe/Berlin",
    ),
    gate(
        "sre-approval",
        default="closed",
        annotations={
            names.OPEN_ANNOTATION: "2026-12-22T09:00:00Z",
            names.CLOSE_ANNOTATION: "2026-12-22T11:00:00Z",
            names.REQUESTED_BY_ANNOTATION: "bob",
        },
    ),
    gate("nightly", "apps"),
    keeper(
        "n",
        "nightly",
        closed=[{"cron": "0 1 * * *", "duration": "2h"}],
        namespace="apps",
        timeZone="America/New_York",
    ),
]


def events(ics: bytes) -> list[tuple[str, datetime, datetime]]:
    """The events a calendar client reads: summary, start and end (aware datetimes)."""
    return [
        (str(e["SUMMARY"]), e.decoded("DTSTART"), e.decoded("DTEND"))
        for e in Calendar.from_ical(ics).walk("VEVENT")
    ]


@pytest.fixture
def make_app():
    """create_app, closing each app's calendar builder (a child process) after the test."""
    apps = []

    def make(store, **options):
        app = create_app(store, Settings(), clock=lambda: NOW, **options)
        app.testing = True
        apps.append(app)
        return app

    yield make
    for app in apps:
        if "calendar_feeds" in app.extensions:
            app.extensions["calendar_feeds"].close()


def fetch(client, url: str):
    """GET a feed, waiting out the 503s of its first build (it runs in a child process)."""
    response = until(lambda: client.get(url), lambda r: r.status_code != 503, timeout=60)
    assert response.status_code == 200, response.data
    return response


@pytest.fixture
def client(gates_dir, make_app):
    write_gates(gates_dir, GATES)
    return make_app(FileStore(gates_dir)).test_client()


def test_the_feed_has_one_event_per_closed_interval_in_the_gates_time_zone(client):
    response = fetch(client, "/calendar.ics?namespace=flux-system")
    assert response.content_type == "text/calendar; charset=utf-8"
    got = events(response.data)
    assert [(s, a.astimezone(UTC), b.astimezone(UTC)) for s, a, b in got] == [
        (
            "Gate flux-system/change-freeze closed",
            at("2026-12-19T23:00"),
            at("2026-12-21T07:00"),
        ),  # clipped at today
        (
            "Gate flux-system/change-freeze closed",
            at("2026-12-23T23:00"),
            at("2026-12-28T07:00"),
        ),  # Christmas + weekend
        (
            "Gate flux-system/change-freeze closed",
            at("2027-01-01T17:00"),
            at("2027-01-02T23:00"),
        ),  # New Year's Friday
        ("Gate flux-system/sre-approval closed", at("2026-12-20T00:00"), at("2026-12-22T09:00")),
        ("Gate flux-system/sre-approval closed", at("2026-12-22T11:00"), at("2027-01-03T00:00")),
    ]
    assert str(got[0][1].tzinfo) == "Europe/Berlin"  # DTSTART;TZID=Europe/Berlin, with its VTIMEZONE
    assert b"BEGIN:VTIMEZONE\r\nTZID:Europe/Berlin" in response.data
    again = fetch(client, "/calendar.ics?namespace=flux-system").data
    uids = [str(e["UID"]) for e in Calendar.from_ical(again).walk("VEVENT")]
    assert uids == [
        str(e["UID"]) for e in Calendar.from_ical(response.data).walk("VEVENT")
    ]  # stable for subscribers


def test_the_feed_covers_every_namespace_unless_asked_and_checks_days(client):
    summaries = {s for s, _, _ in events(fetch(client, "/calendar.ics").data)}
    assert summaries == {
        "Gate flux-system/change-freeze closed",
        "Gate flux-system/sre-approval closed",
        "Gate apps/nightly closed",
    }
    assert len(events(fetch(client, "/calendar.ics?namespace=apps&days=3").data)) == 3
    for bad in ("0", "367", "soon"):
        response = client.get(f"/calendar.ics?days={bad}")
        assert response.status_code == 400 and "days must be" in response.json["error"]
    for bad in ("Apps", "a" * 64, "../apps", "apps%00"):  # never a feed of its own, kept per worker
        response = client.get(f"/calendar.ics?namespace={bad}")
        assert response.status_code == 400 and "namespace must be" in response.json["error"]
    assert client.post("/calendar.ics").status_code == 405  # read-only


def test_no_feed_when_the_server_is_told_not_to(gates_dir, make_app):
    write_gates(gates_dir, GATES)
    assert (
        make_app(FileStore(gates_dir), calendar=False).test_client().get("/calendar.ics").status_code == 404
    )


def test_the_default_feed_is_built_as_soon_as_the_store_is_ready_before_anyone_asks(gates_dir, make_app):
    write_gates(gates_dir, GATES)
    store, built = FileStore(gates_dir), []
    never_waits = feeds.CalendarFeeds(lambda: store.index, lambda: NOW, first_wait=0, record=built.append)
    client = make_app(store, calendar_feeds=never_waits).test_client()  # create_app asks for the prebuild
    assert until(lambda: list(built), bool, timeout=60) == ["built"]
    first = client.get("/calendar.ics")  # the first request, which does not wait: served from memory
    assert first.status_code == 200 and len(events(first.data)) == 19  # 5 in flux-system, 14 nights in apps


def test_the_prebuild_waits_for_the_gate_cache():
    index, ready, built = GateIndex(), threading.Event(), []
    index.replace_all([gate("nightly", "apps", default="closed")], [])
    calendar_feeds = feeds.CalendarFeeds(lambda: index, lambda: NOW, first_wait=0, record=built.append)
    try:
        calendar_feeds.prebuild(feeds.DEFAULT_QUERY, ready.is_set)
        ready.set()  # the store has listed its gates
        assert until(lambda: list(built), bool, timeout=60) == ["built"]
        assert [s for s, _, _ in events(calendar_feeds.feed(*feeds.DEFAULT_QUERY))] == [
            "Gate apps/nightly closed"
        ]
    finally:
        calendar_feeds.close()


def test_a_first_query_for_another_feed_waits_for_its_build(gates_dir, make_app):
    write_gates(gates_dir, GATES)
    store = FileStore(gates_dir)
    patient = feeds.CalendarFeeds(
        lambda: store.index, lambda: NOW, first_wait=120
    )  # ample: no 503 on a slow machine
    first = make_app(store, calendar_feeds=patient).test_client().get("/calendar.ics?namespace=apps&days=3")
    assert first.status_code == 200 and len(events(first.data)) == 3


def test_a_first_build_still_running_after_the_wait_answers_503_with_retry_after(gates_dir, make_app):
    write_gates(gates_dir, GATES)
    store = FileStore(gates_dir)
    client = make_app(
        store, calendar_feeds=feeds.CalendarFeeds(lambda: store.index, lambda: NOW, first_wait=0)
    ).test_client()
    first = client.get("/calendar.ics?namespace=apps")
    assert first.status_code == 503 and first.headers["Retry-After"] == feeds.RETRY_AFTER
    assert first.json == {"error": "the calendar is being built; retry shortly"}
    assert len(events(fetch(client, "/calendar.ics?namespace=apps").data)) == 14


def test_the_wait_for_a_first_build_is_bounded_and_one_request_waits_at_a_time():
    stuck = feeds.CalendarFeeds(
        GateIndex,
        lambda: NOW,
        command=[sys.executable, "-c", "import signal; signal.pause()"],
        build_seconds=600,
        first_wait=0.2,
    )
    try:
        assert feed_or_why(stuck, "", 3) == "the calendar is being built; retry shortly"  # waited, in vain
    finally:
        stuck.close()
    stuck = feeds.CalendarFeeds(
        GateIndex,
        lambda: NOW,
        command=[sys.executable, "-c", "import signal; signal.pause()"],
        build_seconds=600,
        first_wait=600,
    )
    waited: list = []
    waiting = threading.Thread(target=lambda: waited.append(feed_or_why(stuck, "", 3)))
    try:
        waiting.start()
        until(lambda: stuck._waiters, bool, timeout=30)  # a review thread, held
        assert (
            feed_or_why(stuck, "", 4) == "the calendar is being built; retry shortly"
        )  # at once: not a second
        assert waiting.is_alive()
    finally:
        stuck.close()  # ends the wait too
        waiting.join(30)
    assert waited == ["the calendar is being built; retry shortly"]


# A builder child that starts building once the test writes to the FIFO it names.
HELD_BUILDER = (
    "import runpy, sys; open(sys.argv[1], 'rb').read(1); "
    "runpy.run_module('admission.webhook.feeds', run_name='__main__')"
)


def _open_for_writing(fifo) -> int:
    import os

    return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)


def test_every_request_for_the_default_feed_waits_for_its_first_build(tmp_path):
    import os

    os.mkfifo(go := tmp_path / "go")
    index = GateIndex()
    index.replace_all([gate("nightly", "apps", default="closed")], [])
    held = feeds.CalendarFeeds(
        lambda: index, lambda: NOW, command=[sys.executable, "-c", HELD_BUILDER, str(go)], first_wait=120
    )  # ample: the build is let go once all have arrived
    answers: list = []
    fetches = [
        threading.Thread(target=lambda: answers.append(feed_or_why(held, *feeds.DEFAULT_QUERY[:2])))
        for _ in range(3)
    ]
    try:
        for fetch_ in fetches:
            fetch_.start()
        until(lambda: held._waiters, lambda waiting: waiting == 3 or answers, timeout=30)
        # Opened without blocking: ENXIO (no builder has it open yet) is "not yet", never a hang.
        release = wait_for(lambda: _open_for_writing(go), 60, "the builder child to open its FIFO")
        os.write(release, b"!")
        os.close(release)
        for fetch_ in fetches:
            fetch_.join(60)
    finally:
        held.close()
    assert len(answers) == 3 and all(
        isinstance(a, bytes) and b"Gate apps/nightly closed" in a for a in answers
    ), [a if isinstance(a, str) else a[:40] for a in answers]


def test_once_built_a_feed_is_rebuilt_behind_the_scenes_and_never_503_again(gates_dir, make_app):
    write_gates(gates_dir, GATES)
    store = FileStore(gates_dir)
    every_request_rebuilds = feeds.CalendarFeeds(lambda: store.index, lambda: NOW, ttl=0.0)
    client = make_app(store, calendar_feeds=every_request_rebuilds).test_client()
    assert len(events(fetch(client, "/calendar.ics?namespace=apps").data)) == 14
    write_gates(gates_dir, [gate("nightly", "apps", default="closed")])
    store.reload()
    seen = until(
        lambda: client.get("/calendar.ics?namespace=apps"),
        lambda r: r.status_code != 200 or len(events(r.data)) == 1,
        timeout=60,
    )
    assert seen.status_code == 200 and len(events(seen.data)) == 1  # the old feed until the new one is built


def kubectl_gate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "kubectl-gate"), *args], capture_output=True, text=True, timeout=60)


def test_kubectl_gate_calendar_prints_a_timeline_that_fits_100_columns(gates_dir):
    write_gates(gates_dir, GATES)
    result = kubectl_gate("calendar", "-A", "--gates-dir", str(gates_dir))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100
    assert lines[0].startswith("14 days from today, in each gate's time zone. One character: 4h")
    assert any(line.startswith("flux-system/change-freeze  (Europe/Berlin;") for line in lines)
    assert "apps/nightly  (America/New_York;" in result.stdout


def test_kubectl_gate_calendar_writes_ics_and_json(gates_dir):
    write_gates(gates_dir, GATES)
    ics = subprocess.run(
        [
            str(BIN / "kubectl-gate"),
            "calendar",
            "-n",
            "apps",
            "--days",
            "2",
            "-o",
            "ics",
            "--gates-dir",
            str(gates_dir),
        ],
        capture_output=True,
        timeout=60,
    )
    assert ics.returncode == 0 and {s for s, _, _ in events(ics.stdout)} <= {"Gate apps/nightly closed"}
    as_json = kubectl_gate(
        "calendar", "-n", "apps", "--days", "2", "-o", "json", "--gates-dir", str(gates_dir)
    )
    assert '"timeZone": "America/New_York"' in as_json.stdout and '"state": "Closed"' in as_json.stdout
    bad = kubectl_gate("calendar", "--days", "0", "--gates-dir", str(gates_dir))
    assert bad.returncode == 2 and "--days must be between 1 and 366" in bad.stderr
    assert (
        kubectl_gate("list", "-o", "ics", "--gates-dir", str(gates_dir)).returncode == 2
    )  # ics is calendar's only


def test_a_gate_that_flips_every_two_minutes_keeps_the_feed_bounded(gates_dir, make_app):
    write_gates(gates_dir, [gate("flappy", default="opened"), keeper("k", "flappy", closed=["*/2 * * * *"])])
    response = fetch(make_app(FileStore(gates_dir)).test_client(), "/calendar.ics?days=14")
    vevents = Calendar.from_ical(response.data).walk("VEVENT")
    assert response.status_code == 200 and len(vevents) == 500
    assert "later closed intervals of this gate are not listed" in str(vevents[-1]["DESCRIPTION"])


def feed_or_why(calendar_feeds: feeds.CalendarFeeds, namespace: str, days: int) -> bytes | str:
    """The feed's body, or why there is none now."""
    try:
        return calendar_feeds.feed(namespace, days)
    except feeds.FeedUnavailable as unavailable:
        return str(unavailable)


def _builder_that_first(misbehaves: str, marker) -> list[str]:
    """A builder command whose first process ``misbehaves`` (Python code), later ones build."""
    return [
        sys.executable,
        "-c",
        f"import os, runpy, signal\nif os.path.exists({str(marker)!r}):\n"
        f"    runpy.run_module('admission.webhook.feeds', run_name='__main__')\n"
        f"else:\n    open({str(marker)!r}, 'w').close()\n    {misbehaves}",
    ]


@pytest.mark.parametrize(
    "misbehaves, why",
    [
        ("pass", "the calendar builder process exited"),
        ("signal.pause()", "no calendar from the builder process within 1s"),  # never answers
    ],
)
def test_a_builder_process_that_dies_or_hangs_is_reported_then_replaced(tmp_path, misbehaves, why):
    index = GateIndex()
    index.replace_all([gate("nightly", "apps", default="closed")], [])
    calendar_feeds = feeds.CalendarFeeds(
        lambda: index,
        lambda: NOW,
        build_seconds=1,
        ttl=0.0,  # retry at once
        command=_builder_that_first(misbehaves, tmp_path / "started-once"),
    )

    answer = functools.partial(feed_or_why, calendar_feeds, "", 14)
    try:
        assert (
            until(answer, lambda got: "could not be built" in got, timeout=30)
            == f"the calendar could not be built: {why}"
        )
        built = until(answer, lambda got: isinstance(got, bytes), timeout=60)
        assert [s for s, _, _ in events(built)] == ["Gate apps/nightly closed"]
    finally:
        calendar_feeds.close()


def test_queries_waiting_for_a_build_are_bounded(tmp_path):
    index = GateIndex()
    stuck = feeds.CalendarFeeds(
        lambda: index,
        lambda: NOW,
        command=[sys.executable, "-c", "import signal; signal.pause()"],
        build_seconds=600,
        first_wait=0,
    )
    try:
        for days in range(1, feeds.MAX_FEEDS + 1):  # the first is being built, the rest wait
            with pytest.raises(feeds.FeedUnavailable, match="being built"):
                stuck.feed("", days)
        with pytest.raises(feeds.FeedUnavailable, match="too many calendar queries are waiting"):
            stuck.feed("", feeds.MAX_FEEDS + 1)
        with pytest.raises(feeds.FeedUnavailable, match="being built"):
            stuck.feed("", 1)  # asked again: still waiting, not counted twice
    finally:
        stuck.close()


def test_a_builder_that_stops_reading_costs_the_build_deadline_not_the_builder(tmp_path):
    # A snapshot larger than a pipe's buffer: a write without a deadline would block for good.
    index = GateIndex()
    index.replace_all([gate(f"g{i:04}", "apps", default="closed") for i in range(2000)], [])
    calendar_feeds = feeds.CalendarFeeds(
        lambda: index,
        lambda: NOW,
        build_seconds=1,
        command=[sys.executable, "-c", "import signal; signal.pause()"],
    )

    answer = functools.partial(feed_or_why, calendar_feeds, "", 14)
    try:
        assert (
            until(answer, lambda got: "could not be built" in got, timeout=30)
            == "the calendar could not be built: no calendar from the builder process within 1s"
        )
    finally:
        calendar_feeds.close()


def test_failed_queries_are_remembered_in_bounded_memory():
    calendar_feeds = feeds.CalendarFeeds(
        GateIndex, lambda: NOW, command=["true"], max_feeds=4
    )  # exits at once
    try:
        for n in range(12):  # each namespace fails in turn, as a client cycling through names would make them
            answer = functools.partial(feed_or_why, calendar_feeds, f"ns-{n}", 14)
            assert "process exited" in until(answer, lambda got: "could not be built" in got, timeout=30)
        remembered = calendar_feeds._failures  # what a worker keeps; no endpoint shows it
        assert len(remembered) == 4 and ("ns-11", 14, "") in remembered
    finally:
        calendar_feeds.close()


@pytest.mark.timeout(120)  # a close() that misses the child waits out the build: 600 s, failed here
def test_close_stops_a_builder_whose_child_is_still_starting():
    # close() right after the first request races the builder thread's spawn of the child.
    index = GateIndex()
    for _ in range(40):
        calendar_feeds = feeds.CalendarFeeds(
            lambda: index,
            lambda: NOW,
            build_seconds=600,
            first_wait=0,
            command=[sys.executable, "-c", "import signal; signal.pause()"],
        )
        with pytest.raises(feeds.FeedUnavailable, match="being built"):
            calendar_feeds.feed("", 14)
        calendar_feeds.close()
        assert not calendar_feeds._builder.is_alive()


def test_other_queries_never_evict_the_default_feed():
    """140 distinct queries (more than the feeds kept) leave the feed subscribers use in place."""
    index = GateIndex()
    index.replace_all([gate("nightly", "apps", default="closed")], [])
    calendar_feeds = feeds.CalendarFeeds(lambda: index, lambda: NOW, ttl=3600)
    try:
        default = functools.partial(feed_or_why, calendar_feeds, "", 14)
        assert isinstance(until(default, lambda got: isinstance(got, bytes), timeout=60), bytes)
        for days in [d for d in range(1, 142) if d != 14]:
            other = functools.partial(feed_or_why, calendar_feeds, "", days)
            assert isinstance(until(other, lambda got: isinstance(got, bytes), timeout=60), bytes), days
        assert len(calendar_feeds._feeds) <= feeds.MAX_FEEDS
        assert isinstance(default(), bytes), "the default feed was evicted"
    finally:
        calendar_feeds.close()


def test_a_namespace_without_gates_gets_an_empty_calendar_at_once_and_no_cache_entry(client):
    for n in range(5):
        response = client.get(f"/calendar.ics?namespace=nobody-{n}&days=3")
        assert response.status_code == 200 and events(response.data) == []
    assert client.application.extensions["calendar_feeds"]._feeds == {}
