"""Kubernetes Events for denials, off the admission path and aggregated.

A Flux controller retries a held change at every interval, and kubectl users retry by hand:
one Event per object and message per aggregation period (default 5 minutes), its ``count``
raised for the repeats. The Event name is derived from the object, message and period, so
workers and replicas that deny the same change share one Event instead of racing to add more.
"""

from __future__ import annotations

import hashlib
import logging
import queue
import threading
import time
from datetime import datetime

from kubernetes import client
from kubernetes.client.rest import ApiException

from admission.clock import utcnow
from admission.core import names
from admission.core.objects import metadata
from admission.core.timefmt import format_time
from admission.observability.metrics import EVENTS

log = logging.getLogger("admission.events")
FLUSH_EVERY = 10.0  # seconds between count updates of aggregated Events


def event_name(obj_name: str, identity: str, message: str, bucket: int) -> str:
    """Same object (kind/namespace/name, not uid: a denied CREATE gets a new uid at every
    attempt), same message, same period: same Event."""
    digest = hashlib.sha256(f"{identity}\n{message}\n{bucket}".encode()).hexdigest()[:16]
    return f"{obj_name[:200]}.gateclosed.{digest}"


class DenialEvents:
    """Queues denials from request threads; a background thread writes the Events."""

    def __init__(self, api_client: client.ApiClient | None, period: float = 300.0, max_queue: int = 1000, *,
                 clock=utcnow, flush_every: float = FLUSH_EVERY, core: client.CoreV1Api | None = None):
        # ``core`` replaces the API group built from ``api_client`` (tests' fakes).
        self.core = core or client.CoreV1Api(api_client)
        self.clock, self.flush_every = clock, flush_every
        self.period = period
        self.queue: queue.Queue = queue.Queue(max_queue)
        self.pending: dict[tuple[str, str], int] = {}  # (namespace, name) -> repeats not yet counted
        self.known: dict[tuple[str, str], int] = {}  # Events we know exist -> their period
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def record(self, request: dict, message: str, now: datetime) -> None:
        """Note a denial; never blocks, never raises (a full queue drops the Event)."""
        if request.get("dryRun"):
            return
        try:
            self.queue.put_nowait((request, message, now))
        except queue.Full:
            EVENTS.labels("dropped").inc()

    def _body(self, name: str, request: dict, message: str, now: datetime) -> dict:
        obj = request.get("object") or request.get("oldObject") or {}
        meta = metadata(obj)
        kind = request["kind"]
        return {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": request.get("namespace") or meta.get("namespace")},
            "involvedObject": {"apiVersion": obj.get("apiVersion") or f"{kind['group']}/{kind['version']}",
                               "kind": kind["kind"], "namespace": request.get("namespace") or meta.get("namespace"),
                               "name": request.get("name") or meta.get("name"),
                               # A denied CREATE's uid names an object that never existed.
                               **({"uid": meta.get("uid")} if request.get("operation") != "CREATE" else {})},
            "reason": names.GATE_CLOSED_EVENT, "type": "Warning", "message": message[:1024],
            "source": {"component": "gate-admission"}, "reportingComponent": "gate-admission",
            "firstTimestamp": format_time(now), "lastTimestamp": format_time(now), "count": 1,
        }

    def _write(self, request: dict, message: str, now: datetime) -> None:
        bucket = int(now.timestamp() // self.period)
        meta = metadata(request.get("object") or request.get("oldObject"))
        obj_name = request.get("name") or meta.get("name") or "object"
        identity = f"{request['kind']['kind']}/{request.get('namespace') or meta.get('namespace')}/{obj_name}"
        name = event_name(obj_name, identity, message, bucket)
        key = (request.get("namespace") or meta.get("namespace") or "default", name)
        if key in self.known:
            self.pending[key] = self.pending.get(key, 0) + 1
            EVENTS.labels("aggregated").inc()
            return
        try:
            self.core.create_namespaced_event(key[0], self._body(name, request, message, now))
            EVENTS.labels("created").inc()
        except ApiException as err:
            if err.status != 409:
                EVENTS.labels("failed").inc()
                log.warning("denial event not recorded", extra={"error": f"{err.status} {err.reason}"})
                return
            self.pending[key] = self.pending.get(key, 0) + 1  # another worker made it first
            EVENTS.labels("aggregated").inc()
        self.known[key] = bucket

    def _flush(self, now: datetime) -> None:
        for key, repeats in list(self.pending.items()):
            self.pending.pop(key, None)
            try:
                event = self.core.read_namespaced_event(key[1], key[0])
                event.count = (event.count or 1) + repeats
                event.last_timestamp = now
                self.core.replace_namespaced_event(key[1], key[0], event)
            except ApiException as err:
                if err.status == 409:  # someone counted at the same time: count ours next flush
                    self.pending[key] = self.pending.get(key, 0) + repeats
                else:
                    EVENTS.labels("failed").inc()
                    log.warning("denial event count not updated", extra={"error": f"{err.status} {err.reason}"})
        current = int(now.timestamp() // self.period)
        self.known = {k: b for k, b in self.known.items() if b >= current - 1}

    def run(self) -> None:
        last_flush = time.monotonic()
        while not self._stopped.is_set():
            try:
                request, message, now = self.queue.get(timeout=1.0)
                self._write(request, message, now)
            except queue.Empty:
                pass
            except Exception:  # an Event is never worth a dead thread
                log.exception("denial event failed")
            if time.monotonic() - last_flush >= self.flush_every:
                last_flush = time.monotonic()
                try:
                    self._flush(self.clock())
                except Exception:
                    log.exception("updating denial event counts failed")

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="denial-events", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
