"""Which calendar is due and which due fetches start first, at an explicit ``now``."""

from __future__ import annotations

from datetime import timedelta

from admission.core.time.feedschedule import (
    EPOCH,
    Feed,
    due_from_status,
    namespace_cap,
    next_due,
    next_wake,
    start_order,
)
from tests.builders import at

NOW = at("2026-12-20T10:00")
MINUTE = timedelta(minutes=1)


def feed(namespace: str, keeper: str, digest: str, due=NOW) -> Feed:
    return Feed(namespace, keeper, digest, due)


def test_a_calendar_is_due_an_interval_after_its_fetch_and_failures_back_off_up_to_the_interval():
    interval = timedelta(minutes=15)
    assert next_due(NOW, interval, 0) == NOW + interval
    assert [next_due(NOW, interval, n) - NOW for n in range(1, 7)] == [
        MINUTE,
        2 * MINUTE,
        4 * MINUTE,
        8 * MINUTE,
        interval,
        interval,
    ]
    assert next_due(NOW, interval, 10**6) == NOW + interval  # no overflow however long it fails
    assert next_due(NOW, timedelta(seconds=30), 1) == NOW + timedelta(
        seconds=30
    )  # never later than the interval
    assert next_due(NOW, interval, 1, least=2 * MINUTE) == NOW + 2 * MINUTE  # --calendar-min-interval


def test_the_next_wake_is_the_earliest_due_time_still_to_come():
    feeds = [
        feed("a", "k", "1", NOW),
        feed("a", "k", "2", NOW + 5 * MINUTE),
        feed("b", "k", "3", NOW + 2 * MINUTE),
    ]
    assert next_wake(feeds, NOW) == NOW + 2 * MINUTE
    assert next_wake(feeds[:1], NOW) is None and next_wake([], NOW) is None


def test_only_due_calendars_start_and_no_more_than_the_free_slots():
    feeds = [feed("a", "k", str(i), NOW + i * MINUTE - 2 * MINUTE) for i in range(5)]  # due at -2..+2 min
    assert [f.digest for f in start_order(feeds, NOW, {}, 8, 8, {})] == ["0", "1", "2"]
    assert [f.digest for f in start_order(feeds, NOW, {}, 2, 8, {})] == ["0", "1"]
    assert start_order(feeds, NOW, {}, 0, 8, {}) == []


def test_one_namespace_never_holds_more_than_its_cap_and_others_get_the_rest():
    slow = [feed("tenant-a", "trickling", str(i), EPOCH) for i in range(12)]  # due long ago
    fast = feed("tenant-b", "fast", "x", NOW)  # due just now
    order = start_order([*slow, fast], NOW, {}, 4, namespace_cap(4), {})
    assert [f.namespace for f in order] == ["tenant-a", "tenant-b", "tenant-a"]  # 2 of 4 slots: its cap
    # With both of its slots taken by slow fetches, tenant-a waits; a free slot goes elsewhere.
    assert start_order([*slow, fast], NOW, {"tenant-a": 2}, 2, 2, {}) == [fast]
    assert start_order(slow, NOW, {"tenant-a": 2}, 2, 2, {}) == []


def test_free_slots_go_to_the_namespace_with_fewest_running_then_the_least_recently_served():
    feeds = [feed(ns, "k", f"{ns}{i}", NOW - i * MINUTE) for ns in ("a", "b", "c") for i in range(3)]
    # b started most recently and c never: c, a, then b; then round and round.
    order = start_order(feeds, NOW, {}, 6, 3, {"a": 1, "b": 2})
    assert [f.namespace for f in order] == ["c", "a", "b", "c", "a", "b"]
    # Within a namespace, the earliest due first.
    assert [f.digest for f in order if f.namespace == "a"] == ["a2", "a1"]
    # a has a fetch running: the others go first although a was served longest ago.
    assert [f.namespace for f in start_order(feeds, NOW, {"a": 1}, 2, 3, {"a": 1, "b": 2, "c": 3})] == [
        "b",
        "c",
    ]


def test_a_new_or_fast_calendar_never_waits_behind_slow_fetches_of_its_own_namespace():
    known_slow = [feed("tenant-a", "trickling", str(i), NOW - MINUTE) for i in range(6)]
    slow = {f.key for f in known_slow}
    new = feed("tenant-a", "new", "n", EPOCH)  # never fetched
    fast = feed("tenant-a", "quick", "q", NOW)  # its last fetch was fast (not in ``slow``)
    # tenant-a's two slow fetches fill its slow lane: its new and fast calendars start anyway.
    lanes = dict(slow=slow, running_slow={"tenant-a": 2}, limit=3)
    order = start_order([*known_slow, new, fast], NOW, {"tenant-a": 2}, 2, 2, {}, **lanes)
    assert order == [new]  # and no more: 3 of 4 slots is all one namespace gets
    assert start_order([*known_slow, fast], NOW, {"tenant-a": 2}, 2, 2, {}, **lanes) == [fast]
    # Its slow calendars alone do not start: their lane is full.
    assert start_order(known_slow, NOW, {"tenant-a": 2}, 2, 2, {}, **lanes) == []
    # With no slow fetch running, slow calendars take at most the cap, then the fast lane fills.
    order = start_order([*known_slow, new, fast], NOW, {}, 4, 2, {}, slow=slow, running_slow={}, limit=3)
    assert sorted(f.keeper for f in order) == ["new", "trickling", "trickling"]


def test_a_new_gatekeepers_calendars_come_first_in_their_namespace():
    retried = [feed("flux-system", "old", str(i), NOW - timedelta(hours=1)) for i in range(3)]
    new = feed("flux-system", "new", "n", EPOCH)  # never fetched: due at once
    assert start_order([*retried, new], NOW, {}, 1, 2, {})[0] == new


def test_after_a_restart_a_calendar_is_due_an_interval_after_the_fetch_its_status_records():
    interval = timedelta(minutes=15)
    assert due_from_status({"lastFetchTime": "2026-12-20T10:00:00Z"}, interval) == NOW + interval
    assert due_from_status(None, interval) == EPOCH  # never fetched: at once
    assert due_from_status({"lastFetchTime": "yesterday"}, interval) == EPOCH
    assert due_from_status({}, interval) == EPOCH
