"""The controller's calendar loop: fetch every GateKeeper's ``spec.calendars`` on their
intervals and write the coming intervals into its ``status.calendars``.

Fetching is the controller's job and never a review's: every webhook replica and worker
evaluates the intervals from the GateKeeper it caches (admission.core.subscriptions), with no
network call. A fetch that fails keeps the last good intervals in status with the error; the
evaluation makes the gate Unknown (closed) once they are older than the entry's ``staleAfter``.
Failures set ``CalendarsReady=False`` on the GateKeeper and record a Warning Event (once per
distinct error); a calendar that is fetched again after failing records a Normal Event.

Only the leader fetches. Fetches run on a few threads (each bounded by admission.ical.fetch's
deadline), off the loop that keeps Gate status; feeds that changed are parsed one at a time,
each in a child process with its own CPU and memory limits (admission.ical.parse).
"""

from __future__ import annotations

import base64
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from typing import Any, Callable


from admission.clock import utcnow
from admission.core import names
from admission.core.conditions import find, transition_time
from admission.core.cron import ScheduleError
from admission.core.objects import metadata, object_key
from admission.core.subscriptions import HORIZON, CalendarSpec, clean, find_status, parse_calendars, status_entry
from admission.core.timefmt import parse_time
from admission.kube.client import CALL_ERRORS, describe_error
from admission.ical.fetch import Auth, FetchError, Policy, fetch
from admission.ical.parse import ParseError, parse_in_child

log = logging.getLogger("admission.calendars")
MIN_INTERVAL = timedelta(seconds=30)  # the shortest interval the controller fetches a feed at (--calendar-min-interval)
RETRY_AFTER = timedelta(minutes=1)  # after a failure, the next attempt comes this soon, or at the interval if sooner
REPARSE_AFTER = timedelta(hours=12)  # a feed is fetched without validators (and parsed again) this often,
# so its intervals keep reaching HORIZON ahead although it has not changed
WORKERS = 4
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
Key = tuple[str, str, str]  # GateKeeper namespace, name, calendar digest


class SecretError(Exception):
    """A referenced Secret cannot be used; ``str()`` says why."""


class CalendarSync:
    """Keeps the ``status.calendars`` of every GateKeeper that has calendars."""

    def __init__(self, custom, core, keepers: Callable[[], list[dict]], *, clock: Callable[[], datetime] = utcnow,
                 policy: Policy = Policy(), min_interval: timedelta = MIN_INTERVAL, horizon: timedelta = HORIZON,
                 event: Callable[[dict, str, str, datetime, str], None] | None = None,
                 fetcher: Callable = fetch, parser: Callable = parse_in_child, workers: int = WORKERS):
        self.custom, self.core, self.keepers, self.clock = custom, core, keepers, clock
        self.policy, self.min_interval, self.horizon = policy, min_interval, horizon
        self.event = event or (lambda *_: None)
        self.fetcher, self.parser, self.workers = fetcher, parser, workers
        self.due: dict[Key, datetime] = {}  # when each calendar is next fetched
        self.written: dict[tuple[str, str], dict] = {}  # the status last written per GateKeeper
        self.reported: dict[Key, str] = {}  # the error last recorded as an Event per calendar
        self._parsing = threading.Lock()  # one parser child at a time: their memory limits add up

    def forget(self) -> None:
        """Lost the lead: the next leader (maybe this one again) reads what status says."""
        self.due.clear()
        self.written.clear()
        self.reported.clear()

    # -- one pass -------------------------------------------------------------------------
    def sync(self, now: datetime) -> datetime | None:
        """Fetch every calendar that is due, write the GateKeepers' statuses, and return when
        the next calendar is due (None: no calendars)."""
        jobs: list[tuple[dict, CalendarSpec, dict | None]] = []
        wake: datetime | None = None
        seen: set[Key] = set()
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
            for cal in cals:
                key = (namespace, name, cal.digest)
                seen.add(key)
                previous = find_status(status, cal)
                due = self.due.get(key) or self._due_from_status(cal, previous)
                if due <= now:
                    jobs.append((keeper, cal, previous))
                elif wake is None or due < wake:
                    wake = due
        for key in set(self.due) - seen:
            self.due.pop(key, None)
            self.reported.pop(key, None)
        if not jobs:
            return wake
        with ThreadPoolExecutor(max_workers=min(self.workers, len(jobs)), thread_name_prefix="calendar-fetch") as pool:
            results = list(pool.map(lambda job: self._fetch(*job), jobs))
        by_keeper: dict[tuple[str, str], tuple[dict, dict[str, dict]]] = {}
        for (keeper, cal, _), entry in zip(jobs, results):
            namespace, name = object_key(keeper)
            by_keeper.setdefault((namespace, name), (keeper, {}))[1][cal.digest] = entry
            retry = self._interval(cal) if "error" not in entry else min(self._interval(cal), max(RETRY_AFTER, self.min_interval))
            due = parse_time(entry["lastFetchTime"]) + retry
            self.due[(namespace, name, cal.digest)] = due
            wake = due if wake is None or due < wake else wake
        for keeper, entries in by_keeper.values():
            self._write(keeper, entries, self.clock())
        return wake

    def _interval(self, cal: CalendarSpec) -> timedelta:
        return max(cal.interval, self.min_interval)

    def _due_from_status(self, cal: CalendarSpec, previous: dict[str, Any] | None) -> datetime:
        """After a restart or a change of leader: the interval after the last fetch status
        records (now, when it records none)."""
        if previous is None:
            return EPOCH
        try:
            return parse_time(previous["lastFetchTime"]) + self._interval(cal)
        except (KeyError, TypeError, ValueError):
            return EPOCH

    # -- one calendar ---------------------------------------------------------------------
    def _fetch(self, keeper: dict[str, Any], cal: CalendarSpec, previous: dict[str, Any] | None) -> dict[str, Any]:
        """The calendar's status entry after fetching (and, when it changed, parsing) it now."""
        namespace = object_key(keeper)[0]
        try:
            auth = self._auth(namespace, cal)
            etag = last_modified = None
            if previous is not None and previous.get("lastParseTime") and \
                    self.clock() - parse_time(previous["lastParseTime"]) < REPARSE_AFTER:  # fresh
                etag, last_modified = previous.get("etag"), previous.get("lastModified")
            fetched = self.fetcher(cal.url, auth=auth, allow_http=cal.allow_http, policy=self.policy,
                                   etag=etag, last_modified=last_modified)
            if fetched.body is None:  # not modified: the intervals in status stay, and are fresh
                return status_entry(cal, previous, self.clock(), etag=fetched.etag, last_modified=fetched.last_modified)
            with self._parsing:
                start = self.clock()
                parsed = self.parser(fetched.body, start, start + self.horizon, time_zone=cal.time_zone,
                                     summary=cal.summary, categories=cal.categories)
            return status_entry(cal, previous, self.clock(), events=parsed.events, complete_until=parsed.complete_until,
                                etag=fetched.etag, last_modified=fetched.last_modified)
        except (FetchError, ParseError, SecretError) as err:
            log.warning("calendar not fetched", extra={"GateKeeper": {"namespace": namespace,
                                                                      "name": object_key(keeper)[1]},
                                                       "calendar": cal.name, "error": clean(err, 512)})
            return status_entry(cal, previous, self.clock(), error=str(err))
        except Exception as err:  # a bug must not stop the other calendars; it is reported like a failure
            log.exception("calendar fetch failed", extra={"calendar": cal.name})
            return status_entry(cal, previous, self.clock(), error=f"internal error: {type(err).__name__}: {err}")

    def _secret(self, namespace: str, name: str) -> dict[str, bytes]:
        try:
            secret = self.core.read_namespaced_secret(name, namespace)
        except CALL_ERRORS as err:
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
                    username, password = data.get("username", b"").decode(), data.get("password", b"").decode()
                if token and username is not None:
                    raise SecretError(f"Secret {namespace}/{cal.secret} has both a token and a username/password")
                if token is None and username is None:
                    raise SecretError(f"Secret {namespace}/{cal.secret} has neither 'token' nor 'username'/'password'")
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
    def _write(self, keeper: dict[str, Any], entries: dict[str, dict[str, Any]], now: datetime) -> None:
        namespace, name = object_key(keeper)
        try:
            cals = parse_calendars(keeper.get("spec") or {})
        except ScheduleError:
            return
        base = self.written.get((namespace, name)) or keeper.get("status") or {}
        calendars = [entry for entry in (entries.get(cal.digest) or find_status(base, cal) for cal in cals)
                     if entry is not None]
        failed = [(cal, entry) for cal, entry in zip(cals, calendars) if entry.get("error")]
        if failed:
            condition = {"type": names.CALENDARS_READY_CONDITION, "status": "False", "reason": names.REASON_FETCH_FAILED,
                         "message": clean("; ".join(f"{cal}: {entry['error']}" for cal, entry in failed), 1024)}
        else:
            count = sum(len(entry.get("intervals") or []) for entry in calendars)
            condition = {"type": names.CALENDARS_READY_CONDITION, "status": "True", "reason": names.REASON_FETCHED,
                         "message": f"{len(calendars)} calendar(s) fetched, {count} coming event(s) listed"}
        before = find({"status": base}, names.CALENDARS_READY_CONDITION)
        condition["lastTransitionTime"] = transition_time(before, condition["status"], now)
        generation = metadata(keeper).get("generation")
        status = {"calendars": calendars, "conditions": [condition],
                  **({"observedGeneration": generation} if generation is not None else {})}
        try:
            self.custom.patch_namespaced_custom_object_status(names.GATING_GROUP, names.GATING_VERSION, namespace,
                                                              names.GATEKEEPER_PLURAL, name, {"status": status})
        except CALL_ERRORS as err:
            log.warning("calendar status not written", extra={"GateKeeper": {"namespace": namespace, "name": name},
                                                              "error": describe_error(err)})
            return
        self.written[(namespace, name)] = status
        for cal, entry in zip(cals, calendars):
            key = (namespace, name, cal.digest)
            error = entry.get("error")
            if error and self.reported.get(key) != error:
                self.event(keeper, names.CALENDAR_FAILED_EVENT, f"{cal}: {error}", now, "Warning")
                self.reported[key] = error
            elif not error and key in self.reported:
                self.event(keeper, names.CALENDAR_RECOVERED_EVENT, f"{cal} fetched again", now, "Normal")
                self.reported.pop(key)

    def _clear(self, namespace: str, name: str) -> None:
        body = {"status": {"calendars": None, "conditions": None}}  # a merge patch: removes both
        try:
            self.custom.patch_namespaced_custom_object_status(names.GATING_GROUP, names.GATING_VERSION, namespace,
                                                              names.GATEKEEPER_PLURAL, name, body)
            self.written[(namespace, name)] = {"calendars": None}
        except CALL_ERRORS as err:
            log.warning("calendar status not cleared", extra={"GateKeeper": {"namespace": namespace, "name": name},
                                                              "error": describe_error(err)})

    # -- loop -------------------------------------------------------------------------------
    def run(self, stopped: threading.Event, wake: threading.Event, active: Callable[[], bool]) -> None:
        """Sync while ``active()`` (the leader, with a trusted cache), until ``stopped``."""
        was_active = False
        while not stopped.is_set():
            wake.clear()
            now = self.clock()
            nxt = None
            if active():
                was_active = True
                try:
                    nxt = self.sync(now)
                except Exception:  # never stop the loop: the next pass tries again
                    log.exception("calendar pass failed")
            elif was_active:
                was_active = False
                self.forget()
            delay = 60.0 if nxt is None else (nxt - self.clock()).total_seconds()
            wake.wait(max(0.05, min(delay, 60.0 if was_active else 1.0)))
