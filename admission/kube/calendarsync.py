"""The controller's calendar loop: fetch every GateKeeper's ``spec.calendars`` on their
intervals and write the coming intervals into its ``status.calendars``.

Fetching is the controller's job and never a review's: every webhook replica and worker
evaluates the intervals from the GateKeeper it caches (admission.core.time.subscriptions), with no
network call. A fetch that fails keeps the last good intervals in status with the error; the
evaluation makes the gate Unknown (closed) once they are older than the entry's ``staleAfter``.
Failures set ``CalendarsReady=False`` on the GateKeeper and record a Warning Event (once per
distinct error); a calendar that is fetched again after failing records a Normal Event.

Only the leader fetches. Each calendar has its own due time (admission.core.time.feedschedule: its
interval after its last fetch; after failures a minute, doubling, up to the interval; at once
when never fetched). A few fetch threads (each fetch bounded by admission.ical.fetch's
deadline), off the loop that keeps Gate status, take due calendars as they free up: one
namespace's slow fetches hold at most half of them, a new or fast calendar never waits behind
slow ones (its own namespace's included), no namespace holds them all, and a free one goes to
the namespace with the fewest running, then the least recently served. A GateKeeper's status is written as soon as one of its
calendars is fetched, never held for the others. Feeds that changed are parsed one at a time,
each in a child process with its own CPU and memory limits (admission.ical.parse).
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

from kubernetes import client

from admission.clock import utcnow
from admission.core.base import names
from admission.core.base.objects import Object, metadata, object_key
from admission.core.base.timefmt import parse_time
from admission.core.flux.conditions import find, transition_time
from admission.core.time.cron import ScheduleError
from admission.core.time.feedschedule import (
    SLOW_FETCH,
    Feed,
    due_from_status,
    is_slow,
    namespace_cap,
    next_due,
    next_wake,
    start_order,
)
from admission.core.time.subscriptions import (
    HORIZON,
    CalendarSpec,
    clean,
    find_status,
    parse_calendars,
    status_entry,
)
from admission.ical.fetch import DEFAULT_POLICY, Auth, Fetched, FetchError, Policy, fetch
from admission.ical.parse import Expanded, ParseError, parse_in_child
from admission.kube.client import CALL_ERRORS, describe_error
from admission.observability.controllermetrics import API_ERRORS, count_fetch

log = logging.getLogger("admission.calendars")
# The shortest interval the controller fetches a feed at (--calendar-min-interval).
MIN_INTERVAL = timedelta(seconds=30)
REPARSE_AFTER = timedelta(hours=12)  # a feed is fetched without validators (and parsed again) this often,
# so its intervals keep reaching HORIZON ahead although it has not changed
WORKERS = 4  # fetches at once; one namespace's slow ones hold at most namespace_cap(WORKERS) of them
Key = tuple[str, str, str]  # GateKeeper namespace, name, calendar digest
Job = tuple[Object, CalendarSpec]  # a GateKeeper, one of its calendars


class SecretError(Exception):
    """A referenced Secret cannot be used; ``str()`` says why."""


class CalendarSync:
    """Keeps the ``status.calendars`` of every GateKeeper that has calendars."""

    def __init__(
        self,
        custom: client.CustomObjectsApi,
        core: client.CoreV1Api,
        keepers: Callable[[], list[Object]],
        *,
        clock: Callable[[], datetime] = utcnow,
        policy: Policy = DEFAULT_POLICY,
        min_interval: timedelta = MIN_INTERVAL,
        horizon: timedelta = HORIZON,
        event: Callable[[Object, str, str, datetime, str], None] | None = None,
        fetcher: Callable[..., Fetched] = fetch,
        parser: Callable[..., Expanded] = parse_in_child,
        workers: int = WORKERS,
        per_namespace: int | None = None,
    ):
        self.custom, self.core, self.keepers, self.clock = custom, core, keepers, clock
        self.policy, self.min_interval, self.horizon = policy, min_interval, horizon
        self.event = event or (lambda *_: None)
        self.fetcher, self.parser, self.workers = fetcher, parser, max(1, workers)
        self.per_namespace = per_namespace or namespace_cap(self.workers)
        # Under _lock: what the fetch threads and the loop share.
        self.due: dict[Key, datetime] = {}  # when each calendar is next fetched
        self.failures: dict[Key, int] = {}  # failed fetches in a row per calendar
        self.fetched: dict[Key, Object] = {}  # each calendar's entry from its last fetch (this leader's)
        self.running: dict[Key, str] = {}  # fetches in flight: their namespace
        self.started: dict[Key, float] = {}  # fetches in flight: when each started (monotonic)
        self.took: dict[Key, timedelta] = {}  # how long each calendar's last fetch took
        self.turns: dict[str, int] = {}  # per namespace, the number of its last start (fairness)
        self.turn = 0
        self.epoch = 0  # forget() starts a new one: fetches of an older one write nothing
        self._lock = threading.Lock()
        self._finished = threading.Condition(self._lock)  # a fetch ended
        self._wake: Callable[[], None] = lambda: None  # wakes run()'s loop
        # Under _writing: one status write at a time (a GateKeeper's calendars end on different threads).
        self.written: dict[tuple[str, str], Object] = {}  # the status last written per GateKeeper
        self.reported: dict[Key, str] = {}  # the error last recorded as an Event per calendar
        self._writing = threading.Lock()
        self._parsing = threading.Lock()  # one parser child at a time: their memory limits add up

    def forget(self) -> None:
        """Lost the lead: the next leader (maybe this one again) reads what status says. Fetches
        still in flight end without writing."""
        with self._lock:
            self.epoch += 1
            for state in (self.due, self.failures, self.fetched, self.turns, self.took):
                state.clear()
        with self._writing:
            self.written.clear()
            self.reported.clear()

    # -- scheduling -----------------------------------------------------------------------
    def _plan(self) -> tuple[list[Feed], dict[Key, Job]]:
        """Every calendar of every GateKeeper and when it is due; clears the status of
        GateKeepers whose calendars were removed, and forgets calendars that are gone."""
        found: list[tuple[Key, Job, dict[str, Any] | None]] = []
        for keeper in self.keepers():
            namespace, name = object_key(keeper)
            try:
                cals = parse_calendars(keeper.get("spec") or {})
            except (ScheduleError, AttributeError):
                continue  # the gate is Invalid and says why; nothing to fetch
            status = self.written.get((namespace, name)) or keeper.get("status")
            if not cals:
                if isinstance(status, dict) and status.get("calendars") is not None:
                    self._clear(namespace, name)  # its calendars were removed: so is what status said of them
                continue
            found.extend(
                ((namespace, name, cal.digest), (keeper, cal), find_status(status, cal)) for cal in cals
            )
        jobs = {key: job for key, job, _ in found}
        feeds = []
        with self._lock:
            for key, (_, cal), previous in found:
                due = self.due.get(key) or due_from_status(previous, self._interval(cal))
                feeds.append(Feed(key[0], key[1], key[2], due))
            for state in (self.due, self.failures, self.fetched, self.took):
                for key in set(state) - set(jobs):
                    state.pop(key, None)
            for namespace in set(self.turns) - {key[0] for key in jobs}:
                self.turns.pop(namespace)
        with self._writing:
            for key in set(self.reported) - set(jobs):
                self.reported.pop(key, None)
        return feeds, jobs

    def _start(self, now: datetime, pool: Executor, skip: set[Key] | None = None) -> list[Feed]:
        """Start the calendars due at ``now`` that the free slots and the namespace caps allow
        (none of ``skip``, which gets those started); return the calendars not in flight."""
        feeds, jobs = self._plan()
        with self._lock:
            waiting = [feed for feed in feeds if feed.key not in self.running]
            candidates = [feed for feed in waiting if skip is None or feed.key not in skip]
            clock = time.monotonic()
            slow = {key for key, took in self.took.items() if is_slow(took)}
            chosen = start_order(
                candidates,
                now,
                Counter(self.running.values()),
                self.workers - len(self.running),
                self.per_namespace,
                self.turns,
                slow=slow,
                running_slow=Counter(
                    namespace
                    for key, namespace in self.running.items()
                    if key in slow or is_slow(timedelta(seconds=clock - self.started.get(key, clock)))
                ),
                limit=max(self.per_namespace, self.workers - 1),
            )
            for feed in chosen:
                keeper, cal = jobs[feed.key]
                self.turn += 1
                self.turns[feed.namespace] = self.turn
                self.running[feed.key] = feed.namespace
                self.started[feed.key] = clock
                status = self.written.get(feed.key[:2]) or keeper.get("status")
                previous = self.fetched.get(feed.key) or find_status(status, cal)
                pool.submit(self._job, keeper, cal, previous, self.epoch)
                if skip is not None:
                    skip.add(feed.key)
        return [feed for feed in waiting if feed not in chosen]

    def _job(
        self, keeper: dict[str, Any], cal: CalendarSpec, previous: dict[str, Any] | None, epoch: int
    ) -> None:
        """On a fetch thread: fetch one calendar, schedule its next fetch, write its GateKeeper's status."""
        namespace, name = object_key(keeper)
        key = (namespace, name, cal.digest)
        try:
            began = time.monotonic()
            entry = self._fetch(keeper, cal, previous)
            count_fetch(entry)
            with self._lock:
                self.took[key] = timedelta(seconds=time.monotonic() - began)
                if epoch != self.epoch:
                    return
                failures = self.failures.get(key, 0) + 1 if "error" in entry else 0
                self.failures[key] = failures
                self.fetched[key] = entry
                self.due[key] = next_due(
                    parse_time(entry["lastFetchTime"]), self._interval(cal), failures, self.min_interval
                )
            self._write(keeper, self.clock(), epoch)
        except Exception:  # a bug must not take the slot with it
            log.exception("calendar fetch failed", extra={"calendar": cal.name})
        finally:
            with self._lock:
                self.running.pop(key, None)
                self.started.pop(key, None)
                self._finished.notify_all()
            self._wake()

    def sync(self, now: datetime) -> datetime | None:
        """Fetch every calendar due at ``now`` (each at most once), writing each GateKeeper's
        status as each of its calendars is fetched; return when the next calendar is due (None:
        no calendars). Waits for its fetches; run() never does."""
        started: set[Key] = set()
        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="calendar-fetch") as pool:
            while True:
                with self._lock:
                    idle = not started & self.running.keys()  # before the look: its answer then has them all
                count = len(started)
                waiting = self._start(now, pool, started)
                if idle and len(started) == count:
                    return min((feed.due for feed in waiting), default=None)
                with self._lock:
                    if started & self.running.keys():  # one ended, or turned slow: a slot may start another
                        self._finished.wait(SLOW_FETCH.total_seconds())

    def _until_slow(self) -> float:
        """Seconds until a fetch in flight turns slow (and leaves its lane's slot to a fast one)."""
        with self._lock:
            slow = {key for key, took in self.took.items() if is_slow(took)}
            ends = [at for key, at in self.started.items() if key not in slow]
        now, after = time.monotonic(), SLOW_FETCH.total_seconds()
        return min((max(0.0, at + after - now) for at in ends if at + after > now), default=60.0)

    def _interval(self, cal: CalendarSpec) -> timedelta:
        return max(cal.interval, self.min_interval)

    # -- one calendar ---------------------------------------------------------------------
    def _fetch(
        self, keeper: dict[str, Any], cal: CalendarSpec, previous: dict[str, Any] | None
    ) -> dict[str, Any]:
        """The calendar's status entry after fetching (and, when it changed, parsing) it now."""
        namespace = object_key(keeper)[0]
        try:
            auth = self._auth(namespace, cal)
            etag = last_modified = None
            if (
                previous is not None
                and previous.get("lastParseTime")
                and self.clock() - parse_time(previous["lastParseTime"]) < REPARSE_AFTER
            ):  # fresh
                etag, last_modified = previous.get("etag"), previous.get("lastModified")
            fetched = self.fetcher(
                cal.url,
                auth=auth,
                allow_http=cal.allow_http,
                policy=self.policy,
                etag=etag,
                last_modified=last_modified,
            )
            if fetched.body is None:  # not modified: the intervals in status stay, and are fresh
                return status_entry(
                    cal, previous, self.clock(), etag=fetched.etag, last_modified=fetched.last_modified
                )
            with self._parsing:
                start = self.clock()
                parsed = self.parser(
                    fetched.body,
                    start,
                    start + self.horizon,
                    time_zone=cal.time_zone,
                    summary=cal.summary,
                    categories=cal.categories,
                )
            return status_entry(
                cal,
                previous,
                self.clock(),
                events=parsed.events,
                complete_until=parsed.complete_until,
                etag=fetched.etag,
                last_modified=fetched.last_modified,
            )
        except (FetchError, ParseError, SecretError) as err:
            log.warning(
                "calendar not fetched",
                extra={
                    "GateKeeper": {"namespace": namespace, "name": object_key(keeper)[1]},
                    "calendar": cal.name,
                    "error": clean(err, 512),
                },
            )
            return status_entry(cal, previous, self.clock(), error=str(err))
        except Exception as err:  # a bug must not stop the other calendars; it is reported like a failure
            log.exception("calendar fetch failed", extra={"calendar": cal.name})
            return status_entry(
                cal, previous, self.clock(), error=f"internal error: {type(err).__name__}: {err}"
            )

    def _secret(self, namespace: str, name: str) -> dict[str, bytes]:
        try:
            secret = self.core.read_namespaced_secret(name, namespace)
        except CALL_ERRORS as err:
            API_ERRORS.labels("secret").inc()
            raise SecretError(f"Secret {namespace}/{name}: {describe_error(err)}") from None
        data = getattr(secret, "data", None) or {}
        try:
            return {key: base64.b64decode(value) for key, value in data.items()}
        except (ValueError, TypeError):
            raise SecretError(f"Secret {namespace}/{name} holds data that is not base64") from None

    def _auth(self, namespace: str, cal: CalendarSpec) -> Auth:
        token = username = password = None
        ca = cal.ca_bundle
        try:
            if cal.secret:
                data = self._secret(namespace, cal.secret)
                token = data["token"].decode().strip() if "token" in data else None
                if "username" in data or "password" in data:
                    username, password = (
                        data.get("username", b"").decode(),
                        data.get("password", b"").decode(),
                    )
                if token and username is not None:
                    raise SecretError(
                        f"Secret {namespace}/{cal.secret} has both a token and a username/password"
                    )
                if token is None and username is None:
                    raise SecretError(
                        f"Secret {namespace}/{cal.secret} has neither 'token' nor 'username'/'password'"
                    )
                ca = data.get("ca.crt", ca)
            if cal.ca_secret:
                name, key = cal.ca_secret
                data = self._secret(namespace, name)
                if key not in data:
                    raise SecretError(f"Secret {namespace}/{name} has no key {key!r}")
                ca = data[key]
        except UnicodeDecodeError:
            raise SecretError("the credentials are not UTF-8 text") from None
        return Auth(token, username, password, ca)

    # -- status, condition, Events ------------------------------------------------------------
    def _write(self, keeper: dict[str, Any], now: datetime, epoch: int | None = None) -> None:
        """Write the GateKeeper's status from the last fetch of each of its calendars (what status
        says, for those not fetched since); nothing when ``epoch`` is over."""
        namespace, name = object_key(keeper)
        try:
            cals = parse_calendars(keeper.get("spec") or {})
        except ScheduleError:
            return
        with self._writing:
            with self._lock:
                if epoch is not None and epoch != self.epoch:
                    return
                latest = {cal.digest: self.fetched.get((namespace, name, cal.digest)) for cal in cals}
            base = self.written.get((namespace, name)) or keeper.get("status") or {}
            entries = [(cal, latest[cal.digest] or find_status(base, cal)) for cal in cals]
            known = [(cal, entry) for cal, entry in entries if entry is not None]
            status = self._status(keeper, base, known, [cal for cal, entry in entries if entry is None], now)
            try:
                self.custom.patch_namespaced_custom_object_status(
                    names.GATING_GROUP,
                    names.GATING_VERSION,
                    namespace,
                    names.GATEKEEPER_PLURAL,
                    name,
                    {"status": status},
                )
            except CALL_ERRORS as err:
                self._not_written("written", namespace, name, err)
                return
            self.written[(namespace, name)] = status
            for cal, entry in known:
                key = (namespace, name, cal.digest)
                error = entry.get("error")
                if error and self.reported.get(key) != error:
                    self.event(keeper, names.CALENDAR_FAILED_EVENT, f"{cal}: {error}", now, "Warning")
                    self.reported[key] = error
                elif not error and key in self.reported:
                    self.event(keeper, names.CALENDAR_RECOVERED_EVENT, f"{cal} fetched again", now, "Normal")
                    self.reported.pop(key)

    @staticmethod
    def _status(
        keeper: dict[str, Any],
        base: dict[str, Any],
        known: list[tuple[CalendarSpec, dict[str, Any]]],
        pending: list[CalendarSpec],
        now: datetime,
    ) -> dict[str, Any]:
        """The status: each calendar's entry, and CalendarsReady: False when one failed, Unknown
        while one was never fetched, else True."""
        failed = [(cal, entry) for cal, entry in known if entry.get("error")]
        count = sum(len(entry.get("intervals") or []) for _, entry in known)
        condition = {"type": names.CALENDARS_READY_CONDITION}
        if failed:
            condition.update(
                status="False",
                reason=names.REASON_FETCH_FAILED,
                message=clean("; ".join(f"{cal}: {entry['error']}" for cal, entry in failed), 1024),
            )
        elif pending:
            condition.update(
                status=names.CONDITION_UNKNOWN,
                reason=names.REASON_FETCHING,
                message=clean(
                    f"{len(known)} of {len(known) + len(pending)} calendar(s) fetched, {count} "
                    "coming event(s) listed; not fetched yet: " + ", ".join(str(cal) for cal in pending),
                    1024,
                ),
            )
        else:
            condition.update(
                status="True",
                reason=names.REASON_FETCHED,
                message=f"{len(known)} calendar(s) fetched, {count} coming event(s) listed",
            )
        before = find({"status": base}, names.CALENDARS_READY_CONDITION)
        condition["lastTransitionTime"] = transition_time(before, condition["status"], now)
        generation = metadata(keeper).get("generation")
        return {
            "calendars": [entry for _, entry in known],
            "conditions": [condition],
            **({"observedGeneration": generation} if generation is not None else {}),
        }

    def _clear(self, namespace: str, name: str) -> None:
        body = {"status": {"calendars": None, "conditions": None}}  # a merge patch: removes both
        with self._writing:
            try:
                self.custom.patch_namespaced_custom_object_status(
                    names.GATING_GROUP, names.GATING_VERSION, namespace, names.GATEKEEPER_PLURAL, name, body
                )
                self.written[(namespace, name)] = {"calendars": None}
            except CALL_ERRORS as err:
                self._not_written("cleared", namespace, name, err)

    @staticmethod
    def _not_written(what: str, namespace: str, name: str, err: BaseException) -> None:
        API_ERRORS.labels("gatekeeper_status").inc()
        where = {"namespace": namespace, "name": name}
        log.warning(f"calendar status not {what}", extra={"GateKeeper": where, "error": describe_error(err)})

    # -- loop -------------------------------------------------------------------------------
    def run(self, stopped: threading.Event, wake: threading.Event, active: Callable[[], bool]) -> None:
        """Start due fetches while ``active()`` (the leader, with a trusted cache), until
        ``stopped``; ``wake`` is set when a GateKeeper changes, and by each fetch that ends."""
        was_active = False
        pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="calendar-fetch")
        self._wake = wake.set
        try:
            while not stopped.is_set():
                wake.clear()
                now = self.clock()
                nxt = None
                if active():
                    was_active = True
                    try:
                        nxt = next_wake(
                            self._start(now, pool), now
                        )  # due but waiting for a slot: a fetch's end wakes
                    except Exception:  # never stop the loop: the next pass tries again
                        log.exception("calendar pass failed")
                elif was_active:
                    was_active = False
                    self.forget()
                delay = 60.0 if nxt is None else (nxt - self.clock()).total_seconds()
                delay = min(delay, self._until_slow())  # a fetch turning slow frees a fast slot
                wake.wait(max(0.05, min(delay, 60.0 if was_active else 1.0)))
        finally:
            self._wake = lambda: None
            self.forget()  # fetches still in flight end within their deadline, and write nothing
            pool.shutdown(wait=False, cancel_futures=True)
