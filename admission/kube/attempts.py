"""Show a denied attempt on its object (Approved=False, Ready=False), off the admission path.

helm-controller records a HelmRelease's new values digest only in the status write that the
validating webhook denies, and emits no Event for that failure (FLUX-WRITES.md): its
conditions-only writes cannot tell the mutating webhook that new values wait, so nothing
stored would show the hold. After such a denial the review queues the object here; a
background thread reads it (GET), and writes only when an object with the review's uid
exists, only while it is held now (judged again from the object as stored and this server's
gate state: the gate may have opened meanwhile), and only what it shows: the conditions
``core.admission.holdpoints.show_denied_attempt`` returns, patched into its status with the read
resourceVersion as a precondition and a fresh read on Conflict (a few times), so a
controller's own condition writes are never overwritten. From then on the mutating webhook
keeps them on every status write while the object is held (``core.admission.holdpoints``).

A review is unauthenticated input unless the API server authenticates to us with a client
certificate (``serve --client-ca-file``): without one, the attempt the review carries (its
values digest, its chart version) is never written, and what waits comes from the stored
object alone (an attempt its status records, what its source serves, a condition already
shown). With one (``trust_reviews``), the denied attempt's fields are shown too, when they
have the shape Flux writes (a version, ``algorithm:hex`` digests).

Denials of one object queued meanwhile coalesce, a status that already says it is not written
again, and reads are limited per namespace: one denied reconcile (which sends the denied field
more than once) makes one write, whichever worker or replica gets there first.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from collections.abc import Callable
from datetime import datetime

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from admission.clock import utcnow
from admission.core.admission import holdpoints
from admission.core.admission.decision import Context, Lookup, Settings, standing
from admission.core.admission.review import AdmissionRequest, subject
from admission.core.base import names
from admission.core.base.objects import Object, label, metadata
from admission.core.flux import kinds
from admission.core.gates.references import is_namespace, is_object_name
from admission.kube.denials import DenialQueue
from admission.kube.fluxobjects import read_stored
from admission.kube.limits import READS_PER_NAMESPACE
from admission.observability.metrics import ATTEMPTS_SHOWN
from admission.store import Sources

log = logging.getLogger("admission.attempts")
MERGE = "application/merge-patch+json"
CONFLICT_STEPS = 5  # as Flux's own patch helper: only Conflict is retried
MAX_PENDING = 256  # objects waiting to be written; more are dropped (counted), never blocking a review


Key = tuple[str, str, str]  # kind, namespace, name
Denied = tuple[str, "Object | None"]  # the stored object's uid, and the attempt when reviews are trusted

# The shapes helm-controller writes: a chart version (semver, "+<hex>" for OCI charts) and
# "algorithm:hex" digests. Anything else in a trusted review is not shown.
_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+_-]{0,127}")
_DIGEST = re.compile(r"[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[0-9a-f]{32,128}")


def _attempt_shape_ok(attempt: Object) -> bool:
    status = attempt.get("status") or {}
    for field, value in status.items():
        if value in (None, ""):
            continue
        pattern = _VERSION if field == names.LAST_ATTEMPTED_REVISION_FIELD else _DIGEST
        if not isinstance(value, str) or not pattern.fullmatch(value):
            return False
    return True


class DeniedAttempts(DenialQueue[Key, Denied]):
    """Queues denied attempts from request threads (the latest denial of each object); a
    background thread shows them."""

    def __init__(
        self,
        api_client: client.ApiClient | None,
        lookup: Lookup,
        settings: Settings,
        sources: Sources,
        *,
        clock: Callable[[], datetime] = utcnow,
        custom: client.CustomObjectsApi | None = None,
        max_pending: int = MAX_PENDING,
        trust_reviews: bool = False,
        reads_per_namespace: int = READS_PER_NAMESPACE,
        limits_dir: str | os.PathLike[str] | None = None,
    ):
        super().__init__("denied-attempts", max_pending, reads_per_namespace, limits_dir)
        # ``custom`` replaces the API group built from ``api_client`` (tests' fakes).
        self.custom = custom or client.CustomObjectsApi(api_client)
        self.lookup, self.settings, self.sources, self.clock = lookup, settings, sources, clock
        self.trust_reviews = trust_reviews

    def record(self, request: AdmissionRequest) -> None:
        """Note a denied status write that recorded new content; never blocks, never raises."""
        kind = request.get("kind")
        row = kinds.lookup(kind.get("group", ""), kind.get("kind", "")) if kind else None
        obj = request.get("object")
        if request.get("dryRun") or row is None or not row.shows_denied_attempts or not isinstance(obj, dict):
            return
        about = subject(request)
        if not (is_namespace(about.namespace) and is_object_name(about.name) and 0 < len(about.uid) <= 128):
            return  # no API server sends this: nothing to look up
        key = (row.kind, about.namespace, about.name)
        # Only what is compared (a review can be megabytes), and only when the review is trusted.
        attempt = row.content.attempt(obj) if self.trust_reviews else None
        if not self.put(key, lambda _: (about.uid, attempt)):
            ATTEMPTS_SHOWN.labels("dropped").inc()

    def _next(self) -> tuple[Key, Denied] | None:
        """The next denial to show, waiting for one; None once stopped."""
        while not self.stopped:
            item = self.take(1.0)
            if item is not None:
                return item
        return None

    def _read(self, row: kinds.FluxKind, namespace: str, name: str) -> Object | None:
        """The object as stored (through ``<plural>/status``), at the first version served."""
        return read_stored(
            self.custom.get_namespaced_custom_object_status, row, namespace, name, self.versions
        )

    def _held(self, stored: Object, now: datetime) -> holdpoints.Held | None:
        """The hold now, as the mutating webhook will judge our write on its way in."""
        return holdpoints.enforced(standing(stored, Context(self.lookup, now, self.settings)))

    def show(self, key: Key, denied: Denied) -> str:
        """Write the conditions that show what the stored object's hold keeps waiting; the outcome."""
        kind, namespace, name = key
        uid, attempt = denied
        if attempt is not None and not _attempt_shape_ok(attempt):
            attempt = None
        row = kinds.BY_KIND[kind]
        if not self.may_read(namespace):
            return "limited"
        for _ in range(CONFLICT_STEPS):
            stored = self._read(row, namespace, name)
            if stored is None:
                return "gone"
            if metadata(stored).get("uid") != uid:
                return "unverified"  # not the object the review named (or a forged review)
            now = self.clock()
            upstream = row.content.upstream_of(stored, self.sources.get)
            changes = holdpoints.show_denied_attempt(
                kind, stored, attempt, self._held(stored, now), now, upstream
            )
            if not changes:
                return "current"  # shown already, released, or nothing waits any more
            body = {
                "metadata": {"resourceVersion": metadata(stored).get("resourceVersion")},
                "status": {"conditions": changes["conditions"]},
            }
            try:
                self.custom.patch_namespaced_custom_object_status(
                    row.group, self.versions[kind], namespace, row.plural, name, body, _content_type=MERGE
                )
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
            shown = self.shown(
                functools.partial(self.show, key, attempt), log, "denied attempt not shown", label(*key)
            )
            ATTEMPTS_SHOWN.labels(shown).inc()
