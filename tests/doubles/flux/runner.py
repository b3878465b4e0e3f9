"""Double of the controller-runtime loop around a Flux reconciler.

Watches (list, then watch) put objects in a local cache and enqueue reconciles the way Flux's
predicates do: a new object, a ``metadata.generation`` change, a new
``reconcile.fluxcd.io/requestedAt`` value, or (through ``related()``) a source's artifact
revision change. A failed reconcile is retried with exponential backoff (750 ms doubling to
15 min, the object's interval ignored meanwhile); a success waits for the interval. One worker
reconciles one object at a time.

Proven against the real one through the doubles built on it: tests/realflux/test_doubles.py
compares what they write with what the real controllers write (a run of retries counts once
there, so the backoff's timing is not compared).
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from dataclasses import dataclass, field

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from admission.core.base import names
from admission.core.base.timefmt import parse_duration
from tests.doubles.flux.patch import Api, PatchError, api_message

log = logging.getLogger("tests.doubles")
Key = tuple[str, str, str]  # kind, namespace, name


class ReconcileError(Exception):
    """A reconcile's failure, in the words the Flux controller reports it."""


@dataclass
class Reconcile:
    """One reconcile the double ran: what triggered it and how it ended."""

    key: Key
    trigger: str
    started: float
    error: str | None = None


@dataclass
class Applied:
    """Content the double deployed (a Kustomization's revision, a Helm release)."""

    key: Key
    revision: str
    at: float  # time.monotonic()
    trigger: str
    detail: dict = field(default_factory=dict)


def requested_at(obj: dict | None) -> str | None:
    return ((obj or {}).get("metadata", {}).get("annotations") or {}).get(names.RECONCILE_REQUEST_ANNOTATION)


def artifact_revision(obj: dict | None) -> str | None:
    artifact = ((obj or {}).get("status") or {}).get("artifact") or {}
    return artifact.get("revision")


class Double:
    """Base of the controller doubles: ``kind`` is reconciled, ``watched`` are watched."""

    kind: str = ""
    watched: tuple[str, ...] = ()
    manager: str = ""

    def __init__(
        self,
        api_client: client.ApiClient,
        versions: dict[str, str] | None = None,
        retry_first: float = 0.75,
        retry_cap: float = 900.0,
    ):
        self.api = Api(api_client, versions)
        self.retry_first, self.retry_cap = retry_first, retry_cap
        self.cache: dict[str, dict[tuple[str, str], dict]] = {k: {} for k in (self.kind, *self.watched)}
        self.reconciles: list[Reconcile] = []
        self.applied: list[Applied] = []
        self.written: dict[Key, dict] = {}  # the status each object's last successful reconcile left
        self._queue: dict[Key, tuple[float, str]] = {}
        self._failures: dict[Key, int] = {}
        self._cond = threading.Condition()
        self._stopped = threading.Event()
        self._synced: set[str] = set()
        self._threads: list[threading.Thread] = []
        self._streams: set[watch.Watch] = set()

    # -- what subclasses write ---------------------------------------------------------
    def reconcile(self, obj: dict, trigger: str) -> None:
        """One reconcile of ``obj``; raise to fail it (the message is what Flux reports)."""
        raise NotImplementedError

    def related(self, kind: str, old: dict | None, new: dict | None) -> list[tuple[str, str]]:
        """Own objects to reconcile because a watched object of ``kind`` changed."""
        return []

    # -- queue --------------------------------------------------------------------------
    def enqueue(self, namespace: str, name: str, trigger: str, delay: float = 0.0) -> None:
        key = (self.kind, namespace, name)
        due = time.monotonic() + delay
        with self._cond:
            current = self._queue.get(key)
            if current is None or due < current[0]:
                self._queue[key] = (due, trigger)
                self._cond.notify()

    def _next(self) -> tuple[Key, str] | None:
        with self._cond:
            while not self._stopped.is_set():
                now = time.monotonic()
                due = [(d, k) for k, (d, _) in self._queue.items()]
                if due:
                    first, key = min(due)
                    if first <= now:
                        return key, self._queue.pop(key)[1]
                    self._cond.wait(min(first - now, 1.0))
                else:
                    self._cond.wait(1.0)
        return None

    def _work(self) -> None:
        while True:
            item = self._next()
            if item is None:
                return
            key, trigger = item
            obj = self.api.get(*key)
            if obj is None:
                continue
            record = Reconcile(key, trigger, time.monotonic())
            self.reconciles.append(record)
            try:
                self.reconcile(obj, trigger)
            except (PatchError, ReconcileError) as err:
                record.error = str(err)
            except ApiException as err:
                record.error = api_message(err)
            except Exception as err:  # a double's failure is a failed reconcile, as in Flux
                log.exception("reconcile failed")
                record.error = f"{type(err).__name__}: {err}"
            if record.error is None:
                self.written[key] = copy.deepcopy(obj.get("status") or {})
                self._failures.pop(key, None)
                interval = parse_duration(
                    str((obj.get("spec") or {}).get("interval") or "10m")
                ).total_seconds()
                self.enqueue(key[1], key[2], "interval", delay=interval)
            else:
                failures = self._failures.get(key, 0)
                self._failures[key] = failures + 1
                self.enqueue(
                    key[1], key[2], "retry", delay=min(self.retry_cap, self.retry_first * 2**failures)
                )

    # -- watches ------------------------------------------------------------------------
    def _seen(self, kind: str, event: str, obj: dict) -> None:
        meta = obj.get("metadata") or {}
        key = (meta.get("namespace"), meta.get("name"))
        old = self.cache[kind].get(key)
        new = None if event == "DELETED" else obj
        if new is None:
            self.cache[kind].pop(key, None)
        else:
            self.cache[kind][key] = new
        if kind == self.kind and new is not None:
            if old is None:
                self.enqueue(*key, "created")
            elif requested_at(old) != requested_at(new):
                self.enqueue(*key, "requestedAt")
            elif meta.get("generation") != (old.get("metadata") or {}).get("generation"):
                self.enqueue(*key, "generation")
        if kind in self.watched:
            for namespace, name in self.related(kind, old, new):
                self.enqueue(namespace, name, f"{kind} changed")

    def _watch(self, kind: str) -> None:
        group, version, plural = self.api.coords(kind)
        custom = self.api.custom
        while not self._stopped.is_set():
            try:
                listed = custom.list_cluster_custom_object(group, version, plural)
                for item in listed.get("items") or []:
                    self._seen(kind, "ADDED", item)
                self._synced.add(kind)
                rv = listed["metadata"]["resourceVersion"]
                while not self._stopped.is_set():
                    stream = watch.Watch()
                    self._streams.add(stream)
                    for event in stream.stream(
                        custom.list_cluster_custom_object,
                        group,
                        version,
                        plural,
                        resource_version=rv,
                        timeout_seconds=30,
                    ):
                        obj = event["object"]
                        rv = obj.get("metadata", {}).get("resourceVersion", rv)
                        self._seen(kind, event["type"], obj)
                    self._streams.discard(stream)
            except Exception:  # noqa: BLE001 (relist, as an informer does)
                self._stopped.wait(0.5)

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> Double:
        for kind in dict.fromkeys((self.kind, *self.watched)):
            self._threads.append(
                threading.Thread(
                    target=self._watch, args=(kind,), daemon=True, name=f"{type(self).__name__}-{kind}"
                )
            )
        self._threads.append(threading.Thread(target=self._work, daemon=True, name=type(self).__name__))
        for thread in self._threads:
            thread.start()
        deadline = time.monotonic() + 30
        while len(self._synced) < len(self.cache) and time.monotonic() < deadline:
            self._stopped.wait(0.05)
        return self

    def stop(self) -> None:
        self._stopped.set()
        for stream in list(self._streams):
            stream.stop()
        with self._cond:
            self._cond.notify_all()

    # -- for tests ----------------------------------------------------------------------
    def errors(self, namespace: str, name: str) -> list[str]:
        return [r.error for r in self.reconciles if r.key == (self.kind, namespace, name) and r.error]

    def applied_to(self, namespace: str, name: str) -> list[Applied]:
        return [a for a in self.applied if a.key == (self.kind, namespace, name)]

    def snapshot(self, kind: str, namespace: str, name: str) -> dict | None:
        return copy.deepcopy(self.cache[kind].get((namespace, name)))
