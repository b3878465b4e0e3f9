"""Kubernetes Events for denials, off the admission path, aggregated and bounded.

A review is unauthenticated input: anyone who reaches the port can post one, naming any
object and carrying any text. So a denial only says *which object to look at*: a background
thread reads that object from the API server (GET), and writes an Event only when an object
of that kind, namespace and name exists **with the review's uid**, and only about the hold
that object shows now (recomputed from it and this server's gate state, never a message or
name taken from the review). Reads are limited per namespace, new Events per object and per
namespace, so a flood of reviews costs the API server a bounded number of calls.

A Flux controller retries a held change at every interval, and kubectl users retry by hand:
one Event per object and message per aggregation period (default 5 minutes), its ``count``
raised for the repeats. The Event name is derived from the object, message and period, so
workers and replicas that deny the same change share one Event instead of racing to add more.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from admission.clock import utcnow
from admission.core.admission import holdpoints
from admission.core.admission.decision import Context, Lookup, Settings, standing
from admission.core.admission.review import AdmissionRequest, subject
from admission.core.base import names
from admission.core.base.objects import Object, label, metadata
from admission.core.base.objects import annotations as annotations_of
from admission.core.base.timefmt import format_time
from admission.core.flux import kinds
from admission.core.gates.references import is_namespace, is_object_name
from admission.kube.client import CALL_ERRORS, describe_error
from admission.kube.denials import DenialQueue
from admission.kube.fluxobjects import read_stored
from admission.kube.limits import MAX_KEYS, READS_PER_NAMESPACE, WindowCounts
from admission.observability.metrics import EVENTS
from admission.store import Sources, StaticSources

log = logging.getLogger("admission.events")
FLUSH_EVERY = 10.0  # seconds between count updates of aggregated Events
REREAD_AFTER = 10.0  # seconds a read of an object stands for it (repeats within it cost no GET)
EVENTS_PER_OBJECT = 3  # new Events per object per period (its hold's message may change)
EVENTS_PER_NAMESPACE = 50  # new Events per namespace per period
MAX_PENDING = 1000  # objects waiting to be read; more are dropped (counted), never blocking a review
MAX_REMEMBERED = MAX_KEYS  # reads kept
COMPONENT = "gate-admission"  # the source of denial Events: the webhook server
MAX_EVENT_MESSAGE = 1024  # an Event is a note: the whole text is in the denial, or the Gate's status

Key = tuple[str, str, str, str]  # kind, namespace, name, uid


class _ReadsSpent(Exception):
    """The namespace's reads for this window are used up."""


def event_name(obj_name: str, identity: str, message: str, bucket: int) -> str:
    """Same object (kind/namespace/name), same message, same period: same Event."""
    digest = hashlib.sha256(f"{identity}\n{message}\n{bucket}".encode()).hexdigest()[:16]
    return f"{obj_name[:200]}.gateclosed.{digest}"


def core_event(
    involved: dict[str, Any],
    reason: str,
    message: str,
    now: datetime,
    *,
    component: str,
    event_type: str,
    name: str | None = None,
    reporting_component: str | None = None,
) -> dict[str, Any]:
    """A core/v1 Event about the object ``involved`` refers to (in its namespace), seen once at
    ``now``, from ``component``: named ``name``, else a name the API server makes from the object's."""
    namespace = involved.get("namespace")
    stamp = format_time(now)
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace}
        if name
        else {"generateName": f"{involved.get('name')}.", "namespace": namespace},
        "involvedObject": involved,
        "reason": reason,
        "type": event_type,
        "message": message[:MAX_EVENT_MESSAGE],
        "source": {"component": component},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
    if reporting_component:
        body["reportingComponent"] = reporting_component
    return body


def post_event(core: client.CoreV1Api, body: dict[str, Any]) -> None:
    """Create ``body`` (made by ``core_event``) in its namespace."""
    # The client's signature names its model; a dict is serialised the same way.
    core.create_namespaced_event(body["metadata"]["namespace"], cast(Any, body))


def _judged_part(stored: Object | None) -> Object | None:
    """What a hold is judged on (names, uid, annotations, spec.gates and spec.suspend): a
    remembered read is a few hundred bytes, whatever the object's values."""
    if not isinstance(stored, dict):
        return None
    meta = metadata(stored)
    annotations = annotations_of(stored)
    spec = stored["spec"] if isinstance(stored.get("spec"), dict) else {}
    return {
        "apiVersion": stored.get("apiVersion"),
        "kind": stored.get("kind"),
        "metadata": {key: meta.get(key) for key in ("name", "namespace", "uid")}
        | {"annotations": {k: v for k, v in annotations.items() if k != names.LAST_APPLIED_ANNOTATION}},
        "spec": {key: spec[key] for key in ("gates", "suspend") if key in spec},
    }


class DenialEvents(DenialQueue[Key, int]):
    """Queues denials from request threads (each object with the denials seen); a background
    thread verifies them and writes Events."""

    def __init__(
        self,
        api_client: client.ApiClient | None,
        lookup: Lookup,
        settings: Settings,
        sources: Sources | None = None,
        period: float = 300.0,
        max_pending: int = MAX_PENDING,
        *,
        clock: Callable[[], datetime] = utcnow,
        flush_every: float = FLUSH_EVERY,
        reread_after: float = REREAD_AFTER,
        reads_per_namespace: int = READS_PER_NAMESPACE,
        events_per_object: int = EVENTS_PER_OBJECT,
        events_per_namespace: int = EVENTS_PER_NAMESPACE,
        core: client.CoreV1Api | None = None,
        custom: client.CustomObjectsApi | None = None,
        limits_dir: str | os.PathLike[str] | None = None,
    ):
        super().__init__("denial-events", max_pending, reads_per_namespace, limits_dir)
        # ``core`` and ``custom`` replace the API groups built from ``api_client`` (tests' fakes).
        self.core = core or client.CoreV1Api(api_client)
        self.custom = custom or client.CustomObjectsApi(api_client)
        self.lookup, self.settings = lookup, settings
        self.sources = sources if sources is not None else StaticSources()
        self.clock, self.flush_every, self.reread_after = clock, flush_every, reread_after
        self.period = period
        self.per_object, self.per_namespace = (
            WindowCounts(events_per_object),
            WindowCounts(events_per_namespace),
        )
        self.read: OrderedDict[Key, tuple[float, Object | None]] = OrderedDict()  # -> (read at, stored)
        self.counts: dict[tuple[str, str], int] = {}  # (namespace, Event name) -> repeats not yet counted
        self.known: dict[tuple[str, str], int] = {}  # Events we know exist -> their period

    def record(self, request: AdmissionRequest) -> None:
        """Note a denial: only which object it names (kind, namespace, name, uid), never its text.
        Never blocks, never raises (a full queue drops it, counted)."""
        try:
            key = self._key(request)
        except (AttributeError, TypeError):
            key = None
        if key is None:
            if not request.get("dryRun"):
                EVENTS.labels("unverified").inc()
            return
        if not self.put(key, lambda seen: (seen or 0) + 1):
            EVENTS.labels("dropped").inc()

    @staticmethod
    def _key(request: AdmissionRequest) -> Key | None:
        """The object a denial names, if it could name one; None for dry runs and shapes no
        API server sends (a kind we do not gate, a name that is not an object's)."""
        if request.get("dryRun"):
            return None
        kind = request.get("kind")
        row = kinds.lookup(kind.get("group", ""), kind.get("kind", "")) if kind else None
        # A CREATE's uid is a new one that no stored object has, so a denied CREATE makes no Event.
        about = subject(request)
        if row is None or not is_namespace(about.namespace) or not is_object_name(about.name):
            return None
        if not 0 < len(about.uid) <= 128:
            return None
        return row.kind, about.namespace, about.name, about.uid

    # -- the background thread ------------------------------------------------------------
    def _next(self, timeout: float) -> tuple[Key, int] | None:
        return self.take(timeout)

    def _stored(self, key: Key) -> tuple[bool, Object | None]:
        """``(read, object)``: the object as stored (None: no such object), from a read at most
        ``reread_after`` old, else a GET; ``read`` is False when the namespace's reads are spent."""
        kind, namespace, name, _ = key
        remembered = self.read.get(key)
        if remembered is not None and time.monotonic() - remembered[0] < self.reread_after:
            return True, remembered[1]

        def get(*args: Any) -> object:  # every call counts: a missing object is asked at each version known
            if not self.may_read(namespace):
                raise _ReadsSpent
            return self.custom.get_namespaced_custom_object(*args)

        try:
            stored = read_stored(get, kinds.BY_KIND[kind], namespace, name, self.versions)
        except _ReadsSpent:
            return False, None
        stored = _judged_part(stored)
        now = time.monotonic()
        self.read.pop(key, None)
        self.read[key] = (now, stored)
        while self.read and (
            len(self.read) > MAX_REMEMBERED or now - next(iter(self.read.values()))[0] >= self.reread_after
        ):
            self.read.popitem(last=False)  # the oldest read first: it stands for nothing any more
        return True, stored

    def _message(self, kind: str, stored: Object, now: datetime) -> str | None:
        """The hold the stored object shows now, in the words a denial uses; None when it is
        not held (or only in audit mode, which denies nothing)."""
        context = Context(self.lookup, now, self.settings, self.sources.get)
        held = holdpoints.enforced(standing({**stored, "kind": kind}, context))
        return held.message if held is not None else None

    def _body(self, name: str, kind: str, stored: Object, message: str, now: datetime) -> Object:
        meta = metadata(stored)
        row = kinds.BY_KIND[kind]
        involved = {
            "apiVersion": stored.get("apiVersion") or f"{row.group}/{self.versions[kind]}",
            "kind": kind,
            "namespace": meta.get("namespace"),
            "name": meta.get("name"),
            "uid": meta.get("uid"),
        }
        return core_event(
            involved,
            names.GATE_CLOSED_EVENT,
            message,
            now,
            name=name,
            event_type="Warning",
            component=COMPONENT,
            reporting_component=COMPONENT,
        )

    def show(self, key: Key, repeats: int = 1) -> str:
        """Look at the object a denial named and write (or count) its Event; the outcome."""
        kind, namespace, name, uid = key
        read, stored = self._stored(key)
        if not read:
            return "limited"
        if stored is None or metadata(stored).get("uid") != uid:
            return "unverified"  # no such object: the review was not about a stored object
        now = self.clock()
        message = self._message(kind, stored, now)
        if message is None:
            return "unheld"
        bucket = int(now.timestamp() // self.period)
        event = (namespace, event_name(name, label(kind, namespace, name), message, bucket))
        if event in self.known:
            self.counts[event] = self.counts.get(event, 0) + repeats
            return "aggregated"
        if not self.per_object.charge(key[:3], bucket) or not self.per_namespace.charge(namespace, bucket):
            return "limited"
        try:
            post_event(self.core, self._body(event[1], kind, stored, message, now))
            result = "created"
            repeats -= 1
        except ApiException as err:
            if err.status != 409:
                raise
            result = "aggregated"  # another worker made it first
        if repeats:
            self.counts[event] = self.counts.get(event, 0) + repeats
        self.known[event] = bucket
        return result

    def _flush(self, now: datetime) -> None:
        for key, repeats in list(self.counts.items()):
            self.counts.pop(key, None)
            try:
                event = self.core.read_namespaced_event(key[1], key[0])
                event.count = (event.count or 1) + repeats
                event.last_timestamp = now
                self.core.replace_namespaced_event(key[1], key[0], event)
            except CALL_ERRORS as err:
                if (
                    isinstance(err, ApiException) and err.status == 409
                ):  # counted at the same time: ours next flush
                    self.counts[key] = self.counts.get(key, 0) + repeats
                else:
                    EVENTS.labels("failed").inc()
                    log.warning("denial event count not updated", extra={"error": describe_error(err)})
        current = int(now.timestamp() // self.period)
        self.known = {k: b for k, b in self.known.items() if b >= current - 1}

    def run(self) -> None:
        last_flush = time.monotonic()
        while not self.stopped:
            item = self._next(timeout=min(1.0, self.flush_every))
            if item is not None:
                key, repeats = item
                named = label(*key[:3])
                EVENTS.labels(
                    self.shown(
                        functools.partial(self.show, key, repeats), log, "denial event not recorded", named
                    )
                ).inc()
            if time.monotonic() - last_flush >= self.flush_every:
                last_flush = time.monotonic()
                try:
                    self._flush(self.clock())
                except Exception:
                    log.exception("updating denial event counts failed")
