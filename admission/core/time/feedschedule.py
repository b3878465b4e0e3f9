"""When each GateKeeper calendar is next fetched, and which due fetches start first.

The controller's calendar loop (admission.kube.calendarsync) keeps the state and fetches; these
functions only decide, at an explicit ``now``:

- **When a calendar is due**: at its last fetch plus its interval. After a failure, a minute
  later, doubling with each further failure in a row, never later than the interval. A
  calendar never fetched (a new GateKeeper, an edited entry) is due at once.
- **Which due calendars start**: a few fetches run at once (the pool's slots). A namespace's
  fetches take two lanes of ``cap`` each: slow ones (a calendar whose last fetch took SLOW_FETCH
  or more, or a fetch running that long) and the others (never fetched, or fast). So one
  tenant's slow feeds (each may take the whole fetch deadline) never hold more than ``cap``
  slots, and a new or fast calendar never queues behind them, its own namespace's included. A
  namespace holds at most ``limit`` slots in all (the caller's: one less than the slots), so
  whatever its calendars do, every other namespace keeps a slot. A free slot goes to the
  namespace with the fewest fetches running, then to the one that least recently started one
  (never: first), then to the one whose earliest due calendar is earliest; within a namespace,
  the earliest due whose lane has room goes first.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from admission.core.base.timefmt import parse_time

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)  # when a calendar never fetched is due: at once, first
FIRST_BACKOFF = timedelta(minutes=1)  # the first retry after a failure; doubled per further failure
_MAX_DOUBLINGS = 16
SLOW_FETCH = timedelta(seconds=2)  # a fetch this long (or longer) is slow: it takes the slow lane


@dataclass(frozen=True)
class Feed:
    """One calendar of one GateKeeper, and when it is due."""

    namespace: str
    keeper: str
    digest: str  # the calendar's specDigest
    due: datetime

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.namespace, self.keeper, self.digest)


def namespace_cap(slots: int) -> int:
    """The default share of one namespace: half the slots, rounded up (one of one)."""
    return max(1, (slots + 1) // 2)


def next_due(
    fetched_at: datetime, interval: timedelta, failures: int, least: timedelta = timedelta(0)
) -> datetime:
    """When a calendar fetched at ``fetched_at`` is fetched again: after ``interval``, or after
    ``failures`` failures in a row FIRST_BACKOFF doubled ``failures - 1`` times (at least
    ``least``, at most ``interval``)."""
    if failures <= 0:
        return fetched_at + interval
    backoff = FIRST_BACKOFF * (1 << min(failures - 1, _MAX_DOUBLINGS))
    return fetched_at + min(interval, max(backoff, least))


def due_from_status(previous: Mapping[str, Any] | None, interval: timedelta) -> datetime:
    """After a restart or a change of leader: the interval after the last fetch the calendar's
    status entry records (EPOCH, when it records none)."""
    try:
        return parse_time(previous["lastFetchTime"]) + interval if previous is not None else EPOCH
    except (KeyError, TypeError, ValueError):
        return EPOCH


def next_wake(feeds: Iterable[Feed], now: datetime) -> datetime | None:
    """The earliest time after ``now`` a calendar falls due (None: none does)."""
    return min((feed.due for feed in feeds if feed.due > now), default=None)


def is_slow(took: timedelta | None) -> bool:
    """Whether a fetch that took (or has been running for) ``took`` belongs in the slow lane;
    None: never fetched."""
    return took is not None and took >= SLOW_FETCH


def start_order(
    feeds: Iterable[Feed],
    now: datetime,
    running: Mapping[str, int],
    slots: int,
    cap: int,
    last_started: Mapping[str, int],
    *,
    slow: Collection[tuple[str, str, str]] = (),
    running_slow: Mapping[str, int] | None = None,
    limit: int | None = None,
) -> list[Feed]:
    """The due calendars (``due <= now``) to start now, in the order they get the ``slots`` free
    slots. ``running``: fetches in flight per namespace (none of ``feeds`` is among them);
    ``last_started``: per namespace, a number that grows with each start (absent: never started);
    ``slow``: the keys of calendars whose last fetch was slow; ``running_slow``: how many of
    ``running`` are slow (absent: all of them, as when no fetch is known to be fast);
    ``limit``: a namespace's slots in all (absent: ``cap``)."""
    queues: dict[str, list[Feed]] = {}
    for feed in sorted((f for f in feeds if f.due <= now), key=lambda f: (f.due, f.keeper, f.digest)):
        queues.setdefault(feed.namespace, []).append(feed)
    busy, turns = dict(running), dict(last_started)
    busy_slow = dict(running if running_slow is None else running_slow)
    most = cap if limit is None else max(cap, limit)
    turn = max(turns.values(), default=0)

    def room(feed: Feed) -> bool:
        ns = feed.namespace
        if busy.get(ns, 0) >= most:
            return False
        if feed.key in slow:
            return busy_slow.get(ns, 0) < cap
        return busy.get(ns, 0) - busy_slow.get(ns, 0) < cap

    order: list[Feed] = []
    while len(order) < slots:
        ready = {ns: next((f for f in queue if room(f)), None) for ns, queue in queues.items()}
        open_ = {ns: feed for ns, feed in ready.items() if feed is not None}
        if not open_:
            break
        namespace = min(open_, key=lambda ns: (busy.get(ns, 0), turns.get(ns, -1), open_[ns].due, ns))
        feed = open_[namespace]
        queues[namespace].remove(feed)
        order.append(feed)
        busy[namespace] = busy.get(namespace, 0) + 1
        if feed.key in slow:
            busy_slow[namespace] = busy_slow.get(namespace, 0) + 1
        turn += 1
        turns[namespace] = turn
    return order
