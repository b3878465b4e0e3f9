"""Gates from the cluster: list+watch into memory, so reviews never call the API server."""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, cast

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ProtocolError

from admission.core.base import names
from admission.core.base.objects import Object, metadata, object_key
from admission.core.base.objects import annotations as annotations_of
from admission.core.gates.gates import GateState, unknown
from admission.store.index import GateIndex

log = logging.getLogger(__name__)

WATCH_SECONDS = 30  # each watch call ends after this at most; an idle connection that died is noticed
STALE_AFTER = 10.0  # seconds without a working watch before decisions stop trusting the cache


class Backoff:
    """Exponential backoff with jitter (half to all of the step), reset after a success.

    The cap is short: while the watch is down referenced gates count as closed, so each second
    between the API server's return and our next try holds writes for nothing (a real cluster's
    API server restart measured up to 30 s of that with a 30 s cap; docs/operations.md). A list
    of Gates every 5 s per worker costs the API server little."""

    def __init__(self, first: float = 0.2, cap: float = 5.0):
        self.first, self.cap, self.attempt = first, cap, 0

    def next(self) -> float:
        delay = min(self.cap, self.first * 2**self.attempt)
        self.attempt = min(self.attempt + 1, 30)  # hours of outage must not overflow the float
        return random.uniform(delay / 2, delay)

    def reset(self) -> None:
        self.attempt = 0


_UNUSED_ANNOTATIONS = (names.LAST_APPLIED_ANNOTATION,)


def trim_object(obj: Object) -> Object:
    """Drop what gate evaluation never reads and what costs memory: managedFields and the
    last-applied copy of the object (most of a small object's size)."""
    metadata(obj).pop("managedFields", None)
    for key in _UNUSED_ANNOTATIONS:
        annotations_of(obj).pop(key, None)
    return obj


class Reflector:
    """Keeps one kind current in its store: list, then watch from the list's resourceVersion;
    resume after each watch; relist on 410 Gone; back off on errors. A subclass says where the
    objects go (``_apply``, ``_replace``): the gate index here, Flux objects in kube/fluxcache.py."""

    group: str = names.GATING_GROUP
    version: str | None = names.GATING_VERSION

    def __init__(self, store: Reflecting, plural: str):
        self.store, self.plural = store, plural
        self.synced = False
        self.connected_since: float | None = None
        self.disconnected_since: float | None = time.monotonic()
        self.resource_version: str | None = None
        self.last_error: str | None = None
        # The last moment the API server was known to answer us: a list, a watch's response,
        # an event or bookmark, a watch the server ended cleanly. Staleness counts from here;
        # attempts to reconnect never move it.
        self.last_contact = time.monotonic()
        self.relists = 0

    def _apply(self, kind: str, obj: Object) -> None:
        raise NotImplementedError

    def _replace(self, items: list[Object]) -> None:
        raise NotImplementedError

    def _served_version(self) -> str:
        # None only on a Flux kind no version of which is served, which never lists or watches.
        assert self.version is not None, self.plural
        return self.version

    def _list(self) -> None:
        listed = cast(
            dict[str, Any],  # a custom resource's list, decoded from JSON
            self.store.api.list_cluster_custom_object(
                self.group, self._served_version(), self.plural, _request_timeout=(5, 30)
            ),
        )
        items = [trim_object(item) for item in listed.get("items") or []]
        self._replace(items)
        self.resource_version = listed["metadata"]["resourceVersion"]
        self.relists += 1
        self.synced = True
        self._connected()
        log.info(
            "listed",
            extra={"resource": self.plural, "count": len(items), "resourceVersion": self.resource_version},
        )

    def _watch(self) -> None:
        stream = watch.Watch()
        self.store._streams.add(stream)
        list_call = self.store.api.list_cluster_custom_object

        @functools.wraps(list_call)
        def started(*args: Any, **kwargs: Any) -> Any:  # the watch's response arrived: the API server answers
            response = list_call(*args, **kwargs)
            if 200 <= (getattr(response, "status", 200) or 200) < 300:
                self._connected()
            return response

        # An idle watch proves nothing until it ends: end each one well within --stale-after,
        # so a healthy idle cluster renews last_contact in time and a dead one cannot hide.
        seconds = max(1, min(WATCH_SECONDS, int(self.store.stale_after / 2)))
        try:
            for event in stream.stream(
                started,
                self.group,
                self._served_version(),
                self.plural,
                resource_version=self.resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=seconds,
                _request_timeout=(5, seconds + 5),
            ):
                self._connected()
                obj = event["object"]
                if event["type"] != "BOOKMARK":
                    self._apply(event["type"], trim_object(obj))
                self.resource_version = metadata(obj).get("resourceVersion", self.resource_version)
                if self.store._stopped.is_set():
                    return
            self._connected()  # the API server ended the watch cleanly: it was working until now
        finally:
            self.store._streams.discard(stream)

    def _connected(self) -> None:
        self.last_contact = time.monotonic()
        if self.disconnected_since is not None:
            self.disconnected_since, self.connected_since = None, time.monotonic()
            self.last_error = None

    def run(self) -> None:
        backoff = Backoff()
        while not self.store._stopped.is_set():
            try:
                if self.resource_version is None:
                    self._list()
                self._watch()
                backoff.reset()
            except ApiException as err:
                if err.status == 410:  # our resourceVersion is too old: start again from a list
                    log.info("watch expired, relisting", extra={"resource": self.plural})
                    self.resource_version = None
                    continue
                self._failed(f"API error {err.status}: {err.reason}", backoff)
            except ProtocolError:
                # The API server ends each watch after timeoutSeconds, not always cleanly. Resume
                # from where we were; if it is really gone, the next call says so.
                self.store._stopped.wait(0.05)
            except Exception as err:  # noqa: BLE001 (refused, reset, timeouts, and what the client may raise: the watch goes on)
                self._failed(f"{type(err).__name__}: {err}", backoff)

    def _failed(self, why: str, backoff: Backoff) -> None:
        if self.disconnected_since is None:
            self.disconnected_since = time.monotonic()
            log.warning("watch lost", extra={"resource": self.plural, "error": why})
        self.last_error = why
        self.store._stopped.wait(backoff.next())


def untrusted_reason(what: str, reflectors: Sequence[Reflector], stale_after: float) -> str | None:
    """Why a cache kept by ``reflectors`` cannot be trusted now (not listed yet, or no proof
    for ``stale_after`` seconds that its watch works), or None. One rule for every cache."""
    now = time.monotonic()
    for reflector in reflectors:
        if not reflector.synced:
            return f"{what} not synced yet ({reflector.plural}: {reflector.last_error or 'listing'})"
        if getattr(reflector, "absent", False):
            continue  # a kind the cluster does not serve: nothing exists of it, a known answer
        quiet = now - reflector.last_contact
        if quiet > stale_after:
            return (
                f"{what} stale: no working watch on {reflector.plural} for {quiet:.0f}s "
                f"({reflector.last_error or 'no answer from the API server'})"
            )
    return None


class _GateReflector(Reflector):
    """Gates or GateKeepers, into the cluster store's index."""

    store: ClusterStore

    def _apply(self, kind: str, obj: Object) -> None:
        index = self.store.index
        namespace, name = object_key(obj)
        if self.plural == names.GATE_PLURAL:
            index.delete_gate(namespace, name) if kind == "DELETED" else index.put_gate(obj)
        else:
            index.delete_keeper(namespace, name) if kind == "DELETED" else index.put_keeper(obj)
        self.store.on_change()

    def _replace(self, items: list[Object]) -> None:
        if self.plural == names.GATE_PLURAL:
            self.store.index.replace_all(items, None)
        else:
            self.store.index.replace_all(None, items)
        self.store.on_change()


class Reflecting:
    """A cache kept by ``self.reflectors``: runs each in a daemon thread and stops their watches."""

    reflectors: Sequence[Reflector]
    api: client.CustomObjectsApi
    stale_after: float
    _threads: list[threading.Thread]
    _stopped: threading.Event
    _streams: set[watch.Watch]

    def start(self) -> None:
        for reflector in self.reflectors:
            thread = threading.Thread(target=reflector.run, name=f"watch-{reflector.plural}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stopped.set()
        for stream in list(self._streams):
            stream.stop()


class ClusterStore(Reflecting):
    """Gates and GateKeepers of the whole cluster, kept by list+watch in background threads."""

    def __init__(
        self,
        api_client: client.ApiClient | None,
        stale_after: float = STALE_AFTER,
        approval_key: bytes | None = None,
    ):
        self.api = client.CustomObjectsApi(api_client)
        self.index = GateIndex(approval_key)  # the key verifies approvals: without it none counts
        self.stale_after = stale_after
        self._stopped = threading.Event()
        self._streams: set[watch.Watch] = set()
        self.reflectors: list[Reflector] = [
            _GateReflector(self, names.GATE_PLURAL),
            _GateReflector(self, names.GATEKEEPER_PLURAL),
        ]
        self._threads: list[threading.Thread] = []
        self.on_change: Callable[[], None] = lambda: None  # called after every change to the index

    def untrusted(self) -> str | None:
        """Why the cache cannot be trusted right now, or None."""
        return untrusted_reason("gate cache", self.reflectors, self.stale_after)

    def lookup(self, namespace: str, name: str, now: datetime) -> GateState:
        why = self.untrusted()
        if why is not None:
            return unknown(namespace, name, why)
        return self.index.lookup(namespace, name, now)

    def readiness(self) -> tuple[bool, Object]:
        why = self.untrusted()
        detail = {
            "store": "cluster",
            "gates": len(self.index),
            "watches": {
                r.plural: {
                    "synced": r.synced,
                    "connected": r.disconnected_since is None,
                    "resourceVersion": r.resource_version,
                    "lists": r.relists,
                    **({"error": r.last_error} if r.last_error else {}),
                }
                for r in self.reflectors
            },
        }
        if why:
            detail["reason"] = why
        return why is None, detail

    def cache_age(self, now_monotonic: float) -> float:
        return max(0.0, max(now_monotonic - r.last_contact for r in self.reflectors))

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(r.synced for r in self.reflectors):
                return True
            time.sleep(0.05)
        return False
