"""Show a denied attempt on its object (Approved=False, Ready=False), off the admission path.

helm-controller records a HelmRelease's new values digest only in the status write that the
validating webhook denies, and emits no Event for that failure (FLUX-WRITES.md): its
conditions-only writes cannot tell the mutating webhook that new values wait, so nothing
stored would show the hold. After such a denial the review queues the object here; a
background thread reads it, judges it again now (the gate may have opened meanwhile) and
patches the conditions ``core.holdpoints.show_denied_attempt`` returns into its status, with
the read resourceVersion as a precondition and a fresh read on Conflict (a few times), so a
controller's own condition writes are never overwritten. From then on the mutating webhook
keeps them on every status write while the object is held (``core.holdpoints``).

Denials of one object queued meanwhile coalesce, and a status that already says it is not
written again: one denied reconcile (which sends the denied field more than once) makes one
write, whichever worker or replica gets there first.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime
from typing import Callable

from kubernetes import client
from kubernetes.client.rest import ApiException

from admission.clock import utcnow
from admission.core import content
from admission.core import holdpoints
from admission.core import kinds
from admission.core.decision import Lookup, Settings, holds_of
from admission.core.objects import metadata
from admission.observability.metrics import ATTEMPTS_SHOWN
from admission.store import Sources

log = logging.getLogger("admission.attempts")
MERGE = "application/merge-patch+json"
CONFLICT_STEPS = 5  # as Flux's own patch helper: only Conflict is retried
MAX_PENDING = 256  # objects waiting to be written; more are dropped (counted), never blocking a review

Key = tuple[str, str, str]  # kind, namespace, name


class DeniedAttempts:
    """Queues denied attempts from request threads; a background thread shows them."""

    def __init__(self, api_client: client.ApiClient | None, lookup: Lookup, settings: Settings, sources: Sources, *,
                 clock: Callable[[], datetime] = utcnow, custom: client.CustomObjectsApi | None = None,
                 max_pending: int = MAX_PENDING):
        # ``custom`` replaces the API group built from ``api_client`` (tests' fakes).
        self.custom = custom or client.CustomObjectsApi(api_client)
        self.lookup, self.settings, self.sources, self.clock = lookup, settings, sources, clock
        self.max_pending = max_pending
        self.pending: dict[Key, dict] = {}  # the latest denied attempt of each object, oldest object first
        self.versions: dict[str, str] = {}  # kind -> the API version that answered last
        self._cond = threading.Condition()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def record(self, request: dict) -> None:
        """Note a denied status write that recorded new content; never blocks, never raises."""
        kind = request.get("kind") or {}
        row = kinds.lookup(kind.get("group", ""), kind.get("kind", ""))
        obj = request.get("object")
        if request.get("dryRun") or row is None or not row.shows_denied_attempts or not isinstance(obj, dict):
            return
        meta = metadata(obj)
        key = (row.kind, str(request.get("namespace") or meta.get("namespace") or ""),
               str(request.get("name") or meta.get("name") or ""))
        attempt = content.attempt_of(row.kind, obj)  # only what is compared: a review can be megabytes
        with self._cond:
            if key not in self.pending and len(self.pending) >= self.max_pending:
                ATTEMPTS_SHOWN.labels("dropped").inc()
                return
            self.pending[key] = attempt
            self._cond.notify()

    def _next(self) -> tuple[Key, dict] | None:
        with self._cond:
            while not self.pending and not self._stopped.is_set():
                self._cond.wait(1.0)
            if self._stopped.is_set():
                return None
            key = next(iter(self.pending))
            return key, self.pending.pop(key)

    def _read(self, row: kinds.FluxKind, namespace: str, name: str) -> dict | None:
        """The object as stored (through ``<plural>/status``), at the first version served."""
        known = self.versions.get(row.kind)
        for version in ([known] if known else []) + [v for v in row.versions if v != known]:
            try:
                obj = self.custom.get_namespaced_custom_object_status(row.group, version, namespace, row.plural, name)
            except ApiException as err:
                if err.status == 404:
                    continue
                raise
            self.versions[row.kind] = version
            return obj
        return None

    def _held(self, kind: str, stored: dict, now: datetime) -> holdpoints.Held | None:
        """The hold now, as the mutating webhook will judge our write on its way in."""
        meta = metadata(stored)
        return holdpoints.enforced(kind, meta.get("namespace") or "", meta.get("name") or "",
                                   holds_of(stored, self.lookup, now), self.settings)

    def show(self, key: Key, attempt: dict) -> str:
        """Write the conditions that show ``attempt`` as held on the stored object; the outcome."""
        kind, namespace, name = key
        row = kinds.BY_KIND[kind]
        for _ in range(CONFLICT_STEPS):
            stored = self._read(row, namespace, name)
            if stored is None:
                return "gone"
            now = self.clock()
            upstream = content.upstream_of(kind, stored, self.sources.get)
            changes = holdpoints.show_denied_attempt(kind, stored, attempt, self._held(kind, stored, now), now, upstream)
            if not changes:
                return "current"  # shown already, released, or nothing waits any more
            body = {"metadata": {"resourceVersion": metadata(stored).get("resourceVersion")},
                    "status": {"conditions": changes["conditions"]}}
            try:
                self.custom.patch_namespaced_custom_object_status(row.group, self.versions[kind], namespace,
                                                                  row.plural, name, body, _content_type=MERGE)
                return "written"
            except ApiException as err:
                if err.status != 409:  # another writer in between: read again and judge again
                    raise
        return "conflict"

    def run(self) -> None:
        while True:
            item = self._next()
            if item is None:
                return
            key, attempt = item
            try:
                result = self.show(key, attempt)
            except ApiException as err:
                result = "failed"
                log.warning("denied attempt not shown", extra={"object": "/".join(key),
                                                               "error": f"{err.status} {err.reason}"})
            except Exception:  # a condition is never worth a dead thread
                result = "failed"
                log.exception("denied attempt not shown", extra={"object": "/".join(key)})
            ATTEMPTS_SHOWN.labels(result).inc()

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="denied-attempts", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        with self._cond:
            self._cond.notify_all()
