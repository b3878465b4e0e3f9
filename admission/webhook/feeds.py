"""``GET /calendar.ics`` bodies: built by a niced child process, off the review path, and served
from memory.

A feed of 100 gates takes seconds of pure Python (bench/README.md, "Freeze calendar"). Built in
a worker, that time holds the GIL that the worker's event loop needs to answer the API server,
so calendar clients would slow admission down. Here each worker starts, on the first calendar
request, one child process (``python -m admission.webhook.feeds``, at a lower CPU priority) and
sends it a snapshot of the gates; the child answers with the iCalendar bytes. The worker only
copies bytes and waits on a pipe.

The default feed (``GET /calendar.ics`` without parameters, ``DEFAULT_QUERY``) is built as soon
as the worker's gate cache is ready (``prebuild``), and every request for a pinned query that
finds no feed yet waits for that build, so a fresh server answers the calendar to all its first
fetches, however many arrive together. Another query (namespace, days, gate) that has no feed
yet waits up to ``FIRST_WAIT`` seconds for its first build (one request per worker at a time: a
waiting request holds a thread the API server's reviews need), then gets ``503`` with ``Retry-After``; after
that its feed is served from memory and rebuilt in the background once it is ``FEED_TTL`` old,
and never served when older than ``STALE_LIMIT`` (a build that keeps failing must not publish an
old freeze as current). A feed built before the gates last changed (a toggle, a GateKeeper) is
rebuilt at the next request, which waits the same way for it: spoke clusters that follow the
feed see a toggle at their next fetch. One build runs at a time per worker; at most
``MAX_FEEDS`` queries wait, and at most ``MAX_FEEDS`` feeds and ``MAX_FEED_BYTES`` are kept; a
build that takes longer than ``BUILD_SECONDS`` costs its child process, which is replaced on the
next build. Feeds are evicted least recently served first; pinned queries (the default feed,
that subscribers use) are never evicted and never wait behind the bound: no number of other
queries can put the real feed back to 503.
"""

from __future__ import annotations

import hashlib
import logging
import os
import select
import struct
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime
from typing import IO, Any

import orjson

from admission.core.base.timefmt import format_distinct_time, parse_time
from admission.store.calendar import CalendarQuery
from admission.store.index import GateIndex, Unknowns

FEED_TTL = 60.0  # seconds a built feed is served before it is rebuilt in the background
STALE_LIMIT = 600.0  # seconds after which a feed that could not be rebuilt is no longer served
MAX_FEEDS = 64  # queries kept or waiting per worker: the namespace comes from the query string
MAX_FEED_BYTES = 64 << 20  # feeds kept per worker, in bytes (a year of a hundred busy gates is ~20 MiB)
BUILD_SECONDS = 120.0  # a build still running after this is abandoned with its child process
RETRY_AFTER = "10"  # seconds a calendar client is asked to wait for a first build
FIRST_WAIT = 5.0  # seconds a request waits for a feed it has not got yet, or for its rebuild after a change
MAX_WAITERS = 1  # requests per worker that wait so (the others get the 503, or the older feed, at once)
READY_POLL = 0.25  # seconds between looks at the gate cache until the default feed can be built
DEFAULT_QUERY = CalendarQuery()  # GET /calendar.ics: every namespace, two weeks, every gate
CHILD_NICENESS = 10  # the child yields the CPU to the workers that answer reviews

_LENGTH = struct.Struct(">I")
_BUILT, _FAILED = b"\x00", b"\x01"

log = logging.getLogger(__name__)

Query = CalendarQuery
Feed = tuple[bytes, str]  # an iCalendar body and its ETag, hashed once per build


def _pipes(child: subprocess.Popen[bytes]) -> tuple[IO[bytes], IO[bytes]]:
    """The builder child's stdin and stdout: it is always started with both piped."""
    stdin, stdout = child.stdin, child.stdout
    assert stdin is not None and stdout is not None
    return stdin, stdout


def default_query(query: Query) -> bool:
    """The feed without parameters (every namespace, the default days): pinned by default."""
    return query == DEFAULT_QUERY


class FeedUnavailable(Exception):
    """No feed can be served for this query now; ``str()`` says why, for the 503's body."""


class CalendarFeeds:
    """Feeds per query for one worker; ``feed()`` never builds on the caller's thread."""

    def __init__(
        self,
        index: Callable[[], GateIndex],
        clock: Callable[[], datetime],
        command: list[str] | None = None,
        build_seconds: float = BUILD_SECONDS,
        ttl: float = FEED_TTL,
        max_feeds: int = MAX_FEEDS,
        first_wait: float = FIRST_WAIT,
        record: Callable[[str], None] = lambda result: None,
        pinned: Callable[[Query], bool] = default_query,
    ):
        self._index, self._clock = index, clock
        self._ttl, self._max_feeds, self._first_wait, self._pinned = ttl, max_feeds, first_wait, pinned
        self._record = record  # called with "built" or "failed" after each build (a metric)
        self._command = command or [sys.executable, "-m", __name__]
        self._build_seconds = build_seconds
        self._lock = threading.Lock()
        self._wanted = threading.Condition(self._lock)
        self._built = threading.Condition(self._lock)  # notified when a build ends, either way
        self._waiters = 0  # requests waiting for a build
        self._prebuild: tuple[Query, Callable[[], bool]] | None = None
        # query -> (built at, (body, ETag), the index's version it was built from)
        self._feeds: OrderedDict[Query, tuple[float, Feed, int]] = OrderedDict()
        self._waiting: OrderedDict[Query, None] = OrderedDict()
        self._failures: dict[Query, tuple[float, str]] = {}  # query -> (failed at, why)
        self._builder: threading.Thread | None = None
        self._child: subprocess.Popen[bytes] | None = None
        self._closed = False

    def prebuild(self, query: Query, ready: Callable[[], bool]) -> None:
        """Build ``query`` as soon as ``ready()`` (the gate cache can be trusted), before anyone
        asks for it: the default feed, at worker start."""
        with self._lock:
            if self._closed:
                return
            self._prebuild = (query, ready)
            try:
                self._start_builder()
            except FeedUnavailable as why:  # the first request starts it, and the prebuild with it
                log.warning("calendar prebuild postponed", extra={"reason": str(why)})
                return
            self._wanted.notify()

    def feed(self, namespace: str, days: int, gate: str = "") -> bytes:
        """The iCalendar body for this query (``tagged``'s, without its ETag)."""
        return self.tagged(namespace, days, gate)[0]

    def tagged(self, namespace: str, days: int, gate: str = "") -> Feed:
        """The iCalendar body for this query and its ETag; raise FeedUnavailable while there is
        none to serve. A query with no feed to serve, or whose feed the gates changed under,
        waits up to ``first_wait`` seconds for the build it starts."""
        query = CalendarQuery(namespace, days, gate)
        version = self._index().version
        with self._lock:
            served, outdated = self._servable(query, version, want=True)
            # Every request for a pinned feed that has none to serve waits: those are the
            # subscribers, who arrive together after a rollout (a fleet of spokes, calendar apps
            # that ignore Retry-After), and the build they wait for is the one in progress.
            if (
                (served is None or outdated)
                and query in self._waiting
                and 0 < self._first_wait
                and (self._waiters < MAX_WAITERS or served is None and self._pinned(query))
            ):
                self._waiters += 1
                try:
                    deadline = time.monotonic() + self._first_wait
                    while (
                        query in self._waiting
                        and not self._closed
                        and (left := deadline - time.monotonic()) > 0
                    ):
                        self._built.wait(left)
                finally:
                    self._waiters -= 1
                served, _ = self._servable(query, version, want=False)
            if served is not None:
                self._feeds.move_to_end(query)  # the least recently served go first
                return served
            _, failure = self._failures.get(query, (None, ""))
        if failure:
            raise FeedUnavailable(f"the calendar could not be built: {failure}")
        raise FeedUnavailable("the calendar is being built; retry shortly")

    def _servable(self, query: Query, version: int, want: bool) -> tuple[Feed | None, bool]:
        """The feed to serve for ``query`` now (or None), and whether it was built before the
        gates' ``version``; with ``want``, ask for a (re)build when it is due (raises
        FeedUnavailable when that cannot be queued and there is nothing to serve)."""
        now = time.monotonic()
        built_at, served, built_from = self._feeds.get(query, (None, (b"", ""), None))
        servable = built_at is not None and now - built_at < STALE_LIMIT
        outdated = built_from != version
        failed_at, _ = self._failures.get(query, (None, ""))
        retry = (
            failed_at is None or now - failed_at >= self._ttl
        )  # a failing build is not retried per request
        if want and retry and (built_at is None or now - built_at >= self._ttl or outdated):
            try:
                self._want(query)
            except FeedUnavailable:
                if not servable:
                    raise
        return (served if servable else None), outdated

    def _want(self, query: Query) -> None:
        if query in self._waiting:
            return
        if len(self._waiting) >= self._max_feeds and not self._pinned(query):
            raise FeedUnavailable("too many calendar queries are waiting to be built; retry shortly")
        self._start_builder()
        self._waiting[query] = None
        self._wanted.notify()

    def _start_builder(self) -> None:
        if self._builder is None:
            builder = threading.Thread(target=self._build_forever, name="calendar-feeds", daemon=True)
            try:
                builder.start()
            except RuntimeError as err:  # "can't start new thread": tried again on the next request
                raise FeedUnavailable(f"the calendar builder could not start: {err}") from None
            self._builder = builder

    def _next_query(self) -> Query | None:
        """The next query to build, waiting for one (None: closed). A prebuild is queued once its
        store is ready; until then the builder looks again every READY_POLL seconds."""
        while not self._closed:
            if self._prebuild is not None:
                query, ready = self._prebuild
                try:
                    is_ready = ready()
                except Exception:  # a store that cannot say is not ready
                    log.exception("calendar prebuild: readiness check failed")
                    is_ready = False
                if is_ready:
                    self._prebuild = None
                    if query not in self._feeds:
                        self._waiting[query] = None
            if self._waiting:
                return next(iter(self._waiting))
            self._wanted.wait(READY_POLL if self._prebuild is not None else None)
        return None

    def _build_forever(self) -> None:
        while True:
            with self._lock:
                query = self._next_query()
                if query is None:
                    return
            built: tuple[Feed, int] | None
            try:
                built, failure = self._build(query), None
            except Exception as err:  # noqa: BLE001 (the child failed or timed out: say so, keep serving the rest)
                built, failure = None, str(err)
                if self._closed:
                    return  # close() ended this build
                log.warning(
                    "calendar feed not built",
                    extra={"namespace": query[0], "days": query[1], "reason": failure},
                )
            try:
                self._record("failed" if built is None else "built")
            except Exception:  # a metric must not stop the builder
                log.exception("calendar build not counted")
            with self._lock:
                self._waiting.pop(query, None)
                self._built.notify_all()
                if built is None:
                    self._failures.pop(query, None)
                    self._failures[query] = (time.monotonic(), failure or "unknown error")
                    while len(self._failures) > self._max_feeds:
                        self._failures.pop(next(iter(self._failures)))  # the oldest failure
                    continue
                self._failures.pop(query, None)
                self._feeds[query] = (time.monotonic(), *built)
                self._feeds.move_to_end(query)
                kept = sum(len(body) for _, (body, _), _ in self._feeds.values())
                while len(self._feeds) > self._max_feeds or (kept > MAX_FEED_BYTES and len(self._feeds) > 1):
                    victim = next(
                        (q for q in self._feeds if not self._pinned(q)), None
                    )  # least recently served
                    if victim is None:
                        break
                    kept -= len(self._feeds.pop(victim)[1][0])

    def _build(self, query: Query) -> tuple[Feed, int]:
        """The feed for ``query`` and the version of the index it was built from."""
        namespace, days, gate = query
        index = self._index()
        version = index.version  # read first: a change during the snapshot makes the feed look old, never new
        gates, keepers, broken, unknown = index.snapshot(namespace or None)
        # No datetime passes as a string: the child must read exactly what this worker's index
        # holds, or the calendar would show gates opening that admission keeps closed.
        request = orjson.dumps(
            {
                "gates": gates,
                "keepers": keepers,
                "broken": broken,
                "unknown": unknown,
                "now": format_distinct_time(self._clock()),
                "days": days,
                "namespace": namespace,
                "gate": gate,
            },
            option=orjson.OPT_PASSTHROUGH_DATETIME,
        )
        child = self._running_child()
        deadline = time.monotonic() + self._build_seconds
        try:
            stdin, stdout = _pipes(child)
            _write_message(stdin.fileno(), request, deadline)
            answer = _read_message(stdout.fileno(), deadline)
        except TimeoutError:
            self._stop_child()
            raise TimeoutError(
                f"no calendar from the builder process within {self._build_seconds:g}s"
            ) from None
        except (OSError, EOFError):
            self._stop_child()
            raise EOFError("the calendar builder process exited") from None
        except BaseException:
            self._stop_child()  # the framing is unknown after any other failure: never reuse the pipe
            raise
        if answer[:1] != _BUILT:
            raise RuntimeError(answer[1:].decode(errors="replace"))
        body = answer[1:]
        return (body, '"' + hashlib.sha256(body).hexdigest()[:32] + '"'), version

    def _running_child(self) -> subprocess.Popen[bytes]:
        if self._closed:
            raise EOFError("the calendar feeds are closed")
        if self._child is None or self._child.poll() is not None:
            # stderr is dropped: the server log stays JSON lines, and a child that fails says so
            # through the pipe (or by closing it). No metrics files: the child counts nothing.
            env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
            self._child = subprocess.Popen(
                self._command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                close_fds=True,
                env=env,
            )
            os.set_blocking(_pipes(self._child)[0].fileno(), False)  # writes wait on poll, with a deadline
            if self._closed:  # close() ran while this child was being spawned, and could not kill it
                self._stop_child()
                raise EOFError("the calendar feeds are closed")
        return self._child

    def _stop_child(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            child.kill()
            child.wait()
            for pipe in _pipes(child):
                pipe.close()

    def close(self) -> None:
        """Stop the builder thread and the child process."""
        with self._lock:
            self._closed = True
            self._wanted.notify_all()
            self._built.notify_all()
        child = self._child
        if child is not None:
            child.kill()  # ends a build in progress: the builder thread sees the pipe close
        if self._builder is not None:
            self._builder.join(self._build_seconds)
        self._stop_child()


# -- the wire between a worker and its child: a 4-byte length, then the bytes ---------------


def _wait_for(fd: int, event: int, deadline: float | None) -> None:
    """Return when ``fd`` is ready for ``event``; raise TimeoutError at ``deadline``.
    poll, not select: a worker with many connections has descriptors above select's 1024."""
    if deadline is None:
        return
    poller = select.poll()
    poller.register(fd, event)
    left = deadline - time.monotonic()
    if left <= 0 or not poller.poll(left * 1000):
        raise TimeoutError


def _write_message(fd: int, payload: bytes, deadline: float | None) -> None:
    view = memoryview(_LENGTH.pack(len(payload)) + payload)
    while view:
        _wait_for(fd, select.POLLOUT, deadline)
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            continue


def _read_exactly(fd: int, size: int, deadline: float | None) -> bytes:
    chunks, missing = [], size
    while missing:
        _wait_for(fd, select.POLLIN, deadline)
        chunk = os.read(fd, min(missing, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        missing -= len(chunk)
    return b"".join(chunks)


def _read_message(fd: int, deadline: float | None) -> bytes:
    (size,) = _LENGTH.unpack(_read_exactly(fd, _LENGTH.size, deadline))
    return _read_exactly(fd, size, deadline)


# -- the child ----------------------------------------------------------------------------


def build(request: dict[str, Any]) -> bytes:
    """The iCalendar body for one snapshot of gates: what the child computes."""
    from admission.store import calendar

    index = GateIndex()
    index.replace_all(
        request["gates"],
        request["keepers"],
        {(ns, name): reason for ns, name, reason in request["broken"]},
        Unknowns(gates={(ns, name): why for ns, name, why in request["unknown"]}),
    )
    now = parse_time(request["now"])
    return calendar.to_ics(
        calendar.calendars(
            index, now, request["days"], request["namespace"] or None, request.get("gate") or None
        ),
        now,
    )


def serve_builds(requests: int, answers: int) -> None:
    """Answer build requests until the worker closes the pipe (it exited, or was killed)."""
    os.nice(CHILD_NICENESS)
    while True:
        try:
            request = _read_message(requests, None)
        except EOFError:
            return
        try:
            answer = _BUILT + build(orjson.loads(request))
        except Exception as err:  # noqa: BLE001 (a gate the calendar cannot handle: the worker reports it)
            answer = _FAILED + f"{type(err).__name__}: {err}".encode()
        _write_message(answers, answer, None)


if __name__ == "__main__":
    # Answers go to the original stdout; anything else printed goes to stderr, not into them.
    answers = os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve_builds(sys.stdin.fileno(), answers)
