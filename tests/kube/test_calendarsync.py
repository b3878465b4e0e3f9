"""The controller's calendar loop against FakeKube and a real HTTPS feed server on loopback: a
feed's events reach the GateKeeper's status (and so every webhook's decision), unchanged feeds
cost a 304, and a feed that turns hostile never opens a closed gate: the last good intervals
stay (with the error, a condition and an Event) until they are stale, then the gate is Unknown."""

from __future__ import annotations

import base64
import functools
import threading
import time
from datetime import timedelta

import pytest

from admission.core.base import names
from admission.ical.fetch import Policy, fetch, parse_networks
from admission.ical.parse import expand, parse_in_child
from admission.kube.calendarsync import CalendarSync
from admission.kube.controller import Controller
from admission.store.index import GateIndex
from tests.builders import at, gate
from tests.doubles.fakekube import FakeFluxCache, FakeKube, QuietStore
from tests.doubles.feedserver import FeedServer
from tests.polling import wait_for

NOW = at("2026-12-20T10:00")
POLICY = Policy(total_timeout=2.0, connect_timeout=1.0, allowed_networks=parse_networks("127.0.0.0/8"))
FEED = (
    b"BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//EN\r\nX-WR-TIMEZONE:Europe/Berlin\r\n"
    b"BEGIN:VEVENT\r\nUID:xmas@example\r\nSUMMARY:Christmas freeze\r\nDTSTART;VALUE=DATE:20261219\r\n"
    b"DTEND;VALUE=DATE:20261228\r\nEND:VEVENT\r\n"
    b"BEGIN:VEVENT\r\nUID:weekly@example\r\nSUMMARY:Release train\r\nDTSTART:20261201T090000Z\r\n"
    b"DTEND:20261201T100000Z\r\nRRULE:FREQ=WEEKLY\r\nCATEGORIES:release\r\nEND:VEVENT\r\n"
    b"END:VCALENDAR\r\n"
)


class Clock:
    def __init__(self, now=NOW):
        self.now = now

    def __call__(self):
        return self.now


def in_process(body, start, end, **kw):
    return expand(body, start, end, **kw)  # the function the child runs, without the child: quicker


@pytest.fixture
def server(tmp_path):
    srv = FeedServer(tmp_path)
    srv.routes["/freeze.ics"] = srv.etagged(FEED, '"v1"')
    yield srv
    srv.stop()


def setup(server: FeedServer, clock: Clock, **calendar) -> tuple[FakeKube, CalendarSync, list]:
    kube = FakeKube()
    kube.add(
        "secrets",
        {
            "metadata": {"name": "feed-token", "namespace": "flux-system"},
            "data": {"token": base64.b64encode(b"s3cret").decode()},
        },
    )
    kube.add(names.GATE_PLURAL, gate("freeze", default="opened"))
    entry = {
        "url": server.url("/freeze.ics"),
        "name": "holidays",
        "secretRef": {"name": "feed-token"},
        "caBundle": base64.b64encode(server.ca_pem).decode(),
        "interval": "15m",
        **calendar,
    }
    kube.add(
        names.GATEKEEPER_PLURAL,
        {
            "apiVersion": names.GATING_API_VERSION,
            "kind": names.GATEKEEPER_KIND,
            "metadata": {"name": "feeds", "namespace": "flux-system", "generation": 2},
            "spec": {"gate": "freeze", "calendars": [entry]},
        },
    )
    events: list = []
    sync = CalendarSync(
        kube,
        kube,
        lambda: kube.of(names.GATEKEEPER_PLURAL),
        clock=clock,
        policy=POLICY,
        parser=in_process,
        event=lambda obj, reason, message, now, kind: events.append((reason, kind, message)),
    )
    return kube, sync, events


def keeper_status(kube: FakeKube) -> dict:
    return kube.get(names.GATEKEEPER_PLURAL, "flux-system", "feeds")["status"]


def gate_at(kube: FakeKube, when):
    index = GateIndex()  # what every webhook worker evaluates: the API server's objects
    index.replace_all(kube.of(names.GATE_PLURAL), kube.of(names.GATEKEEPER_PLURAL))
    return index.lookup("flux-system", "freeze", when)


def test_a_feeds_coming_events_reach_the_gatekeepers_status_and_decide_the_gate(server):
    clock = Clock()
    kube, sync, events = setup(server, clock)
    assert gate_at(kube, NOW).reason == names.REASON_UNKNOWN  # not fetched yet: closed
    nxt = sync.sync(NOW)
    assert nxt == NOW + timedelta(minutes=15)
    assert server.requests[-1][1]["Authorization"] == "Bearer s3cret"
    status = keeper_status(kube)
    cal = status["calendars"][0]
    assert cal["url"] == server.url("/freeze.ics") and cal["etag"] == '"v1"' and "error" not in cal
    assert cal["lastSuccessTime"] == cal["lastFetchTime"] == "2026-12-20T10:00:00Z"
    assert cal["completeUntil"] == "2027-01-24T10:00:00Z"  # 35 days ahead
    assert cal["intervals"][:3] == [
        {
            "start": "2026-12-18T23:00:00Z",
            "end": "2026-12-27T23:00:00Z",
            "uid": "xmas@example",
            "summary": "Christmas freeze",
        },
        {
            "start": "2026-12-22T09:00:00Z",
            "end": "2026-12-22T10:00:00Z",
            "uid": "weekly@example",
            "summary": "Release train",
        },
        {
            "start": "2026-12-29T09:00:00Z",
            "end": "2026-12-29T10:00:00Z",
            "uid": "weekly@example",
            "summary": "Release train",
        },
    ]
    assert len(cal["intervals"]) == 6  # Christmas and five Tuesdays
    condition = status["conditions"][0]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        names.CALENDARS_READY_CONDITION,
        "True",
        names.REASON_FETCHED,
    )
    assert status["observedGeneration"] == 2 and events == []
    closed = gate_at(kube, NOW)
    assert (closed.open, closed.reason) == (False, names.REASON_SCHEDULED)
    assert closed.message == "Gate closed by GateKeeper 'feeds' calendar 'holidays' event 'Christmas freeze'"
    assert closed.next_transition == at("2026-12-27T23:00")  # midnight in Berlin
    assert (
        gate_at(kube, NOW + timedelta(hours=24)).reason == names.REASON_UNKNOWN
    )  # not fetched again for a day


def test_nothing_is_fetched_before_its_interval_and_an_unchanged_feed_costs_a_304(server):
    clock = Clock()
    kube, sync, _ = setup(server, clock, filter={"categories": ["release"]})
    sync.sync(NOW)
    fetched = len(server.requests)
    clock.now = NOW + timedelta(minutes=14)
    assert sync.sync(clock.now) == NOW + timedelta(minutes=15) and len(server.requests) == fetched
    clock.now = NOW + timedelta(minutes=15)
    sync.sync(clock.now)
    assert server.requests[-1][1]["If-None-Match"] == '"v1"'
    cal = keeper_status(kube)["calendars"][0]
    assert cal["lastSuccessTime"] == "2026-12-20T10:15:00Z" and cal["lastParseTime"] == "2026-12-20T10:00:00Z"
    assert [i["summary"] for i in cal["intervals"]] == ["Release train"] * 5  # the filter's events only
    assert gate_at(kube, clock.now).open  # Christmas is not a release


def test_a_new_controller_fetches_when_status_says_the_interval_is_over(server):
    clock = Clock()
    kube, sync, _ = setup(server, clock)
    sync.sync(NOW)
    fetched = len(server.requests)
    successor = CalendarSync(
        kube, kube, lambda: kube.of(names.GATEKEEPER_PLURAL), clock=clock, policy=POLICY, parser=in_process
    )
    assert successor.sync(NOW + timedelta(minutes=5)) == NOW + timedelta(minutes=15)
    assert len(server.requests) == fetched


def hostile(server: FeedServer) -> dict:
    return {
        "HTTP 500 Internal Server Error": server.body(b"down", status=500),
        "no complete answer within 2s": server.hang,
        "the feed is more than 4194304 bytes": server.flood(50 << 20, declare=False),
        "not an iCalendar feed": server.body(b"<html>Sign in to continue</html>"),
        "redirected to another host (localhost): not followed": server.body(
            b"", 302, {"Location": server.url("/freeze.ics", host="localhost")}
        ),
        "the feed's events cannot be read": server.body(
            b"BEGIN:VCALENDAR\r\nVERSION:2.0\r\nBEGIN:VEVENT\r\nUID:x\r\nDTSTART:20261220T000000Z\r\n"
            b"RRULE:FREQ=OFTEN\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
        ),
    }


def test_a_feed_that_turns_hostile_never_opens_a_closed_gate(server):
    clock = Clock()
    kube, sync, events = setup(server, clock, interval="1h", staleAfter="12h")
    sync.sync(NOW)
    good = keeper_status(kube)["calendars"][0]["intervals"]
    assert not gate_at(kube, NOW).open
    for hour, (why, answer) in enumerate(hostile(server).items(), 1):
        server.routes["/freeze.ics"] = answer
        clock.now = NOW + timedelta(hours=hour)
        sync.sync(clock.now)
        status = keeper_status(kube)
        cal = status["calendars"][0]
        assert why in cal["error"], (why, cal["error"])
        assert cal["intervals"] == good and cal["lastSuccessTime"] == "2026-12-20T10:00:00Z"
        assert (status["conditions"][0]["status"], status["conditions"][0]["reason"]) == (
            "False",
            names.REASON_FETCH_FAILED,
        )
        assert why in status["conditions"][0]["message"]
        state = gate_at(kube, clock.now)
        assert (state.open, state.reason) == (False, names.REASON_SCHEDULED), why  # Christmas: still closed
        assert events[-1][:2] == (names.CALENDAR_FAILED_EVENT, "Warning") and why in events[-1][2]
    assert len(events) == len(hostile(server))  # one Event per distinct error, not per attempt
    # Failures in a row back off: a minute after the first, doubling, never later than the interval
    # (1h): after the sixth, 32 minutes; the same error again records no new Event.
    last, fetched = clock.now, len(server.requests)
    assert sync.sync(last + timedelta(minutes=31)) == last + timedelta(minutes=32)
    assert len(server.requests) == fetched
    clock.now = last + timedelta(minutes=32)
    assert sync.sync(clock.now) == clock.now + timedelta(hours=1)  # the seventh: the interval
    assert len(server.requests) == fetched + 1 and len(events) == len(hostile(server))
    # Past staleAfter the last good intervals no longer count: the gate is Unknown, still closed.
    stale = gate_at(kube, NOW + timedelta(hours=12))
    assert (stale.open, stale.reason) == (False, names.REASON_UNKNOWN)
    assert (
        "calendar 'holidays' is stale: last fetched successfully at 2026-12-20T10:00:00Z, more than 12h0m0s ago"
        in stale.message
        and "(the feed's events cannot be read" in stale.message
    )
    # Fixed: fetched again, a Normal Event, the condition True again.
    server.routes["/freeze.ics"] = server.body(FEED)
    clock.now += timedelta(hours=1)
    sync.sync(clock.now)
    assert events[-1][:2] == (names.CALENDAR_RECOVERED_EVENT, "Normal")
    assert keeper_status(kube)["conditions"][0]["status"] == "True"
    assert "error" not in keeper_status(kube)["calendars"][0]


def test_an_endless_expansion_costs_the_parsers_limits_and_keeps_the_gate_closed(server):
    clock = Clock()
    kube, sync, events = setup(server, clock, interval="1h")
    sync.sync(NOW)
    server.routes["/freeze.ics"] = server.body(
        b"BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:t\r\nBEGIN:VEVENT\r\nUID:s\r\nDTSTART:20251201T000000Z\r\n"
        b"DTEND:20251201T000001Z\r\nRRULE:FREQ=SECONDLY;COUNT=1000000000\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
    )
    sync.parser = functools.partial(
        parse_in_child, cpu_seconds=1
    )  # as the controller parses, with a tight limit
    clock.now = NOW + timedelta(hours=1)
    sync.sync(clock.now)
    cal = keeper_status(kube)["calendars"][0]
    assert "could not be parsed within the parser's limits (1s of CPU" in cal["error"]
    assert len(cal["intervals"]) == 6 and not gate_at(kube, clock.now).open  # Christmas, as last fetched


def test_the_controllers_calendar_flags():
    from admission.cli.config import UsageError, controller_config
    from admission.cli.gate_admission import build_parser

    args = build_parser().parse_args(
        [
            "controller",
            "--calendar-allow-networks",
            "10.0.0.0/8, 127.0.0.1/32",
            "--calendar-min-interval",
            "10s",
            "--calendar-timeout",
            "12",
        ]
    )
    config = controller_config(args)
    assert config.calendar_min_interval == timedelta(seconds=10)
    assert [str(n) for n in config.calendar_policy.allowed_networks] == ["10.0.0.0/8", "127.0.0.1/32"]
    assert config.calendar_policy.total_timeout == 12 and config.calendar_policy.max_bytes == 4 << 20
    with pytest.raises(UsageError, match="does not appear to be an IPv4 or IPv6 network"):
        controller_config(build_parser().parse_args(["controller", "--calendar-allow-networks", "intranet"]))


def test_a_secret_that_cannot_be_used_is_the_calendars_error(server):
    clock = Clock()
    kube, sync, events = setup(server, clock, secretRef={"name": "missing"})
    sync.sync(NOW)
    cal = keeper_status(kube)["calendars"][0]
    assert cal["error"] == "Secret flux-system/missing: 404 Not Found" and "lastSuccessTime" not in cal
    state = gate_at(kube, NOW)
    assert state.reason == names.REASON_UNKNOWN
    assert state.message == (
        "gate state unknown: GateKeeper 'feeds' calendar 'holidays' has not been fetched yet: "
        "Secret flux-system/missing: 404 Not Found"
    )
    assert len(server.requests) == 0  # no credentials, no request


def test_an_edited_filter_is_fetched_at_once(server):
    clock = Clock()
    kube, sync, _ = setup(server, clock)
    sync.sync(NOW)
    keeper = kube.get(names.GATEKEEPER_PLURAL, "flux-system", "feeds")
    keeper["spec"]["calendars"][0]["filter"] = {"summary": "^Release"}
    kube.add(names.GATEKEEPER_PLURAL, keeper)
    assert gate_at(kube, NOW).reason == names.REASON_UNKNOWN  # the old filter's intervals do not count
    clock.now = NOW + timedelta(seconds=1)
    sync.sync(clock.now)
    assert gate_at(kube, clock.now).open  # no release train on Sunday morning
    assert len(keeper_status(kube)["calendars"]) == 1


def test_removing_a_keepers_calendars_removes_what_status_said_of_them(server):
    clock = Clock()
    kube, sync, _ = setup(server, clock)
    sync.sync(NOW)
    keeper = kube.get(names.GATEKEEPER_PLURAL, "flux-system", "feeds")
    keeper["spec"]["calendars"] = []
    kube.add(names.GATEKEEPER_PLURAL, keeper)
    assert sync.sync(NOW + timedelta(seconds=1)) is None
    assert "calendars" not in keeper_status(kube) and "conditions" not in keeper_status(kube)
    writes = len(kube.calls)
    sync.sync(NOW + timedelta(seconds=2))
    assert len(kube.calls) == writes and gate_at(kube, NOW).open


class LiveCache(QuietStore):
    """The controller's store over FakeKube, read afresh on each use (the list+watch is proven in e2e)."""

    def __init__(self, kube: FakeKube):
        self.kube, self.on_change = kube, None

    @property
    def index(self) -> GateIndex:
        index = GateIndex()
        index.replace_all(self.kube.of(names.GATE_PLURAL), self.kube.of(names.GATEKEEPER_PLURAL))
        return index


def test_the_controller_runs_the_loop_and_the_gate_status_follows_the_feed(server):
    clock = Clock()
    kube, _, _ = setup(server, clock)
    ctl = Controller(
        None,
        store=LiveCache(kube),
        custom=kube,
        core=kube,
        flux=FakeFluxCache(kube),
        clock=clock,
        calendars={"policy": POLICY},
    )
    worker = threading.Thread(target=ctl.run, daemon=True)
    worker.start()
    try:
        wait_for(
            lambda: (keeper_status(kube).get("calendars") or [{}])[0].get("intervals"),
            30,
            "the feed in status",
        )
        ctl.poke()  # as the GateKeeper's watch event would
        assert kube.get(names.GATE_PLURAL, "flux-system", "freeze")["status"]["state"] == names.STATE_CLOSED

        def reason():
            return kube.get(names.GATE_PLURAL, "flux-system", "freeze")["status"]["conditions"][0]["reason"]

        wait_for(lambda: reason() == names.REASON_SCHEDULED, 30, "the gate closed by the feed's event")
        status = kube.get(names.GATE_PLURAL, "flux-system", "freeze")["status"]
        assert (
            status["conditions"][0]["message"]
            == "Gate closed by GateKeeper 'feeds' calendar 'holidays' event 'Christmas freeze'"
        )
        assert status["nextTransitionAt"] == "2026-12-27T23:00:00Z"
    finally:
        ctl.stop()
        worker.join(10)
    assert not worker.is_alive()


class Fetching:
    """The real fetch, counting the calls in flight per path: what the loop is fetching at any moment."""

    def __init__(self):
        self.lock = threading.Lock()
        self.now: dict[str, int] = {}
        self.most: dict[str, int] = {}  # the most ever in flight at once

    def __call__(self, url, **kw):
        path = url.split("//", 1)[1].split("/", 1)[1].split("?", 1)[0]
        with self.lock:
            self.now[path] = self.now.get(path, 0) + 1
            self.most[path] = max(self.most.get(path, 0), self.now[path])
        try:
            return fetch(url, **kw)
        finally:
            with self.lock:
                self.now[path] -= 1

    def count(self, path: str) -> int:
        with self.lock:
            return self.now.get(path, 0)


def keeper_status_of(kube: FakeKube, namespace: str, name: str) -> dict:
    return kube.get(names.GATEKEEPER_PLURAL, namespace, name).get("status") or {}


def keeper(server: FeedServer, namespace: str, name: str, *paths: str) -> dict:
    cals = [
        {
            "url": server.url(f"{path}?n={i}"),
            "name": f"{name}-{i}",
            "interval": "15m",
            "caBundle": base64.b64encode(server.ca_pem).decode(),
        }
        for i, path in enumerate(paths)
    ]
    return {
        "apiVersion": names.GATING_API_VERSION,
        "kind": names.GATEKEEPER_KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"gate": "freeze", "calendars": cals},
    }


def test_a_fast_feed_is_written_while_another_namespaces_slow_feeds_are_still_being_fetched(server):
    """One tenant's trickling feeds (each holds its fetch to the deadline) take at most half the
    fetch slots, and a GateKeeper's status is written when its own feed is fetched: a new
    GateKeeper elsewhere is written while those fetches are still in flight, not after them."""
    server.routes["/slow.ics"] = server.trickle
    kube, fetching, present = FakeKube(), Fetching(), [("tenant-a", "trickling")]
    kube.add(names.GATEKEEPER_PLURAL, keeper(server, "tenant-a", "trickling", *["/slow.ics"] * 4))
    landed: list[int] = []  # slow fetches in flight each time the fast GateKeeper's status was written
    patch = kube.patch_namespaced_custom_object_status

    def recording(group, version, namespace, plural, name, body, **kw):
        if (namespace, name) == ("flux-system", "fast"):
            landed.append(fetching.count("slow.ics"))
        return patch(group, version, namespace, plural, name, body, **kw)

    kube.patch_namespaced_custom_object_status = recording
    slow = Policy(total_timeout=4.0, connect_timeout=1.0, allowed_networks=parse_networks("127.0.0.0/8"))
    sync = CalendarSync(
        kube,
        kube,
        lambda: [kube.get(names.GATEKEEPER_PLURAL, *key) for key in list(present)],
        clock=Clock(),
        policy=slow,
        parser=in_process,
        fetcher=fetching,
        workers=4,
    )
    stopped, wake = threading.Event(), threading.Event()
    loop = threading.Thread(target=sync.run, args=(stopped, wake, lambda: True), daemon=True)
    loop.start()
    try:
        wait_for(lambda: fetching.count("slow.ics") >= 2, 15, "the trickling feeds being fetched")
        kube.add(names.GATEKEEPER_PLURAL, keeper(server, "flux-system", "fast", "/freeze.ics"))
        present.append(("flux-system", "fast"))
        wake.set()  # as the controller's poke on the GateKeeper's watch event
        wait_for(lambda: landed, 30, "the fast GateKeeper's status")
        assert landed[0] > 0, "the fast feed's status waited for every slow fetch to end"
        status = kube.get(names.GATEKEEPER_PLURAL, "flux-system", "fast")["status"]
        assert status["conditions"][0]["reason"] == names.REASON_FETCHED
        assert status["calendars"][0]["intervals"]
        # The trickling GateKeeper's status shows each of its calendars as its fetch ends (the
        # deadline), while the others are still fetched: never more than 3 of the 4 slots at once
        # (2 new ones first; a third once those have run for SLOW_FETCH), one always left to others.
        wait_for(
            lambda: (keeper_status_of(kube, "tenant-a", "trickling").get("calendars") or [])[-1:],
            30,
            "the first trickling feeds' errors",
        )
        slow_status = keeper_status_of(kube, "tenant-a", "trickling")
        assert "no complete answer within 4s" in slow_status["calendars"][0]["error"]
        assert slow_status["conditions"][0]["reason"] == names.REASON_FETCH_FAILED
        assert len(slow_status["calendars"]) < 4 and fetching.most["slow.ics"] == 3
    finally:
        stopped.set()
        wake.set()
        loop.join(10)
    assert not loop.is_alive()


def test_a_new_gatekeeper_is_fetched_at_once_while_its_own_namespaces_feeds_trickle(server):
    """Two trickling feeds of one namespace fill its share of the slots for the whole fetch
    deadline; a GateKeeper created in that same namespace is fetched (and its status written)
    while they are still in flight, not after them."""
    server.routes["/slow.ics"] = server.trickle
    kube, fetching, present = FakeKube(), Fetching(), [("tenant-a", "trickling")]
    kube.add(names.GATEKEEPER_PLURAL, keeper(server, "tenant-a", "trickling", "/slow.ics", "/slow.ics"))
    kube.add(names.GATEKEEPER_PLURAL, keeper(server, "tenant-a", "new", "/freeze.ics"))
    landed: list[int] = []  # trickling fetches in flight when the new GateKeeper's status was written
    patch = kube.patch_namespaced_custom_object_status

    def recording(group, version, namespace, plural, name, body, **kw):
        if (namespace, name) == ("tenant-a", "new"):
            landed.append(fetching.count("slow.ics"))
        return patch(group, version, namespace, plural, name, body, **kw)

    kube.patch_namespaced_custom_object_status = recording
    deadline = 12.0
    trickle = Policy(
        total_timeout=deadline, connect_timeout=1.0, allowed_networks=parse_networks("127.0.0.0/8")
    )
    sync = CalendarSync(
        kube,
        kube,
        lambda: [kube.get(names.GATEKEEPER_PLURAL, *key) for key in list(present)],
        clock=Clock(),
        policy=trickle,
        parser=in_process,
        fetcher=fetching,
        workers=4,
    )
    stopped, wake = threading.Event(), threading.Event()
    loop = threading.Thread(target=sync.run, args=(stopped, wake, lambda: True), daemon=True)
    loop.start()
    try:
        wait_for(lambda: fetching.count("slow.ics") == 2, 15, "the trickling feeds being fetched")
        present.append(("tenant-a", "new"))
        wake.set()  # as the controller's poke on the GateKeeper's watch event
        created = time.monotonic()
        wait_for(lambda: landed, 30, "the new GateKeeper's status")
        assert landed[0] == 2, "the new GateKeeper waited for its namespace's trickling feeds"
        assert time.monotonic() - created < deadline / 2
        status = kube.get(names.GATEKEEPER_PLURAL, "tenant-a", "new")["status"]
        assert status["conditions"][0]["reason"] == names.REASON_FETCHED
    finally:
        stopped.set()
        wake.set()
        loop.join(deadline + 5)
    assert not loop.is_alive()


def test_a_gatekeepers_status_is_written_as_each_of_its_calendars_is_fetched(server):
    """Two calendars of one GateKeeper: the one fetched is in status at once, the other said to be
    pending (CalendarsReady=Unknown), and its gate closed as not fetched yet, until it is."""
    release, fetching = threading.Event(), Fetching()

    def held(url, **kw):  # the second calendar's server answers when the test says
        if "n=1" in url:
            release.wait(30)
        return fetching(url, **kw)

    kube, present = FakeKube(), [("flux-system", "feeds")]
    kube.add(names.GATE_PLURAL, gate("freeze", default="opened"))
    kube.add(names.GATEKEEPER_PLURAL, keeper(server, "flux-system", "feeds", "/freeze.ics", "/freeze.ics"))
    sync = CalendarSync(
        kube,
        kube,
        lambda: [kube.get(names.GATEKEEPER_PLURAL, *key) for key in present],
        clock=Clock(),
        policy=POLICY,
        parser=in_process,
        fetcher=held,
    )
    stopped, wake = threading.Event(), threading.Event()
    loop = threading.Thread(target=sync.run, args=(stopped, wake, lambda: True), daemon=True)
    loop.start()
    try:
        status = wait_for(
            lambda: keeper_status_of(kube, "flux-system", "feeds"), 15, "the first calendar's status"
        )
        condition = status["conditions"][0]
        assert (condition["status"], condition["reason"]) == ("Unknown", names.REASON_FETCHING)
        assert condition["message"] == (
            "1 of 2 calendar(s) fetched, 6 coming event(s) listed; not fetched yet: calendar 'feeds-1'"
        )
        assert [cal["url"] for cal in status["calendars"]] == [server.url("/freeze.ics?n=0")]
        state = gate_at(kube, NOW)
        assert (
            state.reason == names.REASON_UNKNOWN
            and "calendar 'feeds-1' has not been fetched yet" in state.message
        )
        release.set()
        wait_for(
            lambda: len(keeper_status_of(kube, "flux-system", "feeds")["calendars"]) == 2,
            15,
            "both calendars",
        )
        status = keeper_status_of(kube, "flux-system", "feeds")
        assert (status["conditions"][0]["status"], status["conditions"][0]["reason"]) == (
            "True",
            names.REASON_FETCHED,
        )
        assert gate_at(kube, NOW).reason == names.REASON_SCHEDULED  # Christmas, from both
    finally:
        release.set()
        stopped.set()
        wake.set()
        loop.join(10)
    assert not loop.is_alive()
