"""Flux objects from the cluster: list+watch of the given kinds into memory, as for gates.

Every kind is read at the first of its known versions (admission.core.flux.kinds) that the API
server serves; a kind whose CRD is not installed is empty and looked for again now and then.
The server reads what each source serves from here, and the controller what it was holding.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from admission.core.base.objects import Object, metadata
from admission.core.flux.kinds import BY_KIND, FluxKind
from admission.kube.fluxobjects import first_served
from admission.kube.reflector import STALE_AFTER, Reflecting, Reflector, trim_object, untrusted_reason

log = logging.getLogger(__name__)

ABSENT_RECHECK = 30.0  # seconds between looks for a kind whose CRD is not installed

Key = tuple[str, str]
OnChange = Callable[[str, "Object | None", "Object | None"], None]


def _trim_flux(obj: Object) -> Object:
    """The gate reflector's trim, and the inventory: a Kustomization lists every object it
    applied there (thousands for a large one), and nothing here reads it."""
    trim_object(obj)
    status = obj.get("status")
    if isinstance(status, dict):
        status.pop("inventory", None)
    return obj


def _key(obj: Object) -> Key:
    meta = metadata(obj)
    return meta.get("namespace") or "", meta.get("name") or ""


class _KindReflector(Reflector):
    """One Flux kind: the gate reflector's loop, at the first version the API server serves."""

    store: FluxCache

    def __init__(self, cache: FluxCache, row: FluxKind):
        super().__init__(cache, row.plural)
        self.row = row
        self.group, self.version = row.group, None
        self.absent = False

    def _list(self) -> None:
        if first_served(self.row, self._list_at, self.version) is not None:
            self.absent = False
            return
        # No CRD (or none of the versions we know): nothing of this kind exists, and that is
        # a known answer, not an unknown one.
        if not self.absent:
            log.info("kind not served", extra={"resource": self.plural, "versions": list(self.row.versions)})
        self.version, self.absent, self.synced = None, True, True
        self._replace([])

    def _list_at(self, version: str) -> None:
        self.version = version  # what the gate reflector's list, and the watch after it, ask for
        super()._list()

    def _watch(self) -> None:
        if self.absent:
            self.store._stopped.wait(ABSENT_RECHECK)
            return  # resource_version is None: the loop lists again
        try:
            super()._watch()
        except ApiException as err:
            if err.status != 404:
                raise
            self.resource_version = None  # the version went away (CRD deleted or changed): relist

    def _stamp(self, obj: Object) -> Object:
        obj.setdefault("apiVersion", f"{self.group}/{self.version}")
        obj.setdefault("kind", self.row.kind)
        return _trim_flux(obj)

    def _apply(self, kind: str, obj: Object) -> None:
        self.store._put(self.row.kind, None if kind == "DELETED" else self._stamp(obj), _key(obj))

    def _replace(self, items: list[Object]) -> None:
        self.store._replace(self.row.kind, [self._stamp(item) for item in items])


class FluxCache(Reflecting):
    """The given Flux kinds of the whole cluster, kept by list+watch in background threads.

    Objects handed out are the cache's own: read them, never change them.
    """

    def __init__(
        self,
        api_client: client.ApiClient | None,
        kinds: Iterable[str | FluxKind],
        stale_after: float = STALE_AFTER,
    ):
        self.api = client.CustomObjectsApi(api_client)
        self.stale_after = stale_after
        rows = [BY_KIND[k] if isinstance(k, str) else k for k in kinds]
        self._objects: dict[str, dict[Key, Object]] = {row.kind: {} for row in rows}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._streams: set[watch.Watch] = set()
        self._threads: list[threading.Thread] = []
        self.reflectors: list[_KindReflector] = [_KindReflector(self, row) for row in rows]
        # Called after every change, outside the lock: (kind, old, new); new None = deleted.
        self.on_change: OnChange = lambda kind, old, new: None

    # -- reading ----------------------------------------------------------------------
    def get(self, kind: str, namespace: str, name: str) -> Object | None:
        objects = self._objects.get(kind)
        return objects.get((namespace, name)) if objects is not None else None

    def objects(self, kind: str) -> list[Object]:
        with self._lock:
            return list((self._objects.get(kind) or {}).values())

    def kinds(self) -> list[str]:
        return list(self._objects)

    def version(self, kind: str) -> str | None:
        """The API version this kind is read at, None when not served (or not listed yet)."""
        return next((r.version for r in self.reflectors if r.row.kind == kind), None)

    def __len__(self) -> int:
        return sum(len(objects) for objects in self._objects.values())

    # -- trust ------------------------------------------------------------------------
    def untrusted(self) -> str | None:
        """Why the cache cannot be trusted right now, or None."""
        return untrusted_reason("Flux object cache", self.reflectors, self.stale_after)

    def readiness(self) -> Object:
        """What /readyz shows about this cache."""
        return {
            "objects": len(self),
            "watches": {
                r.plural: {
                    "synced": r.synced,
                    "connected": r.disconnected_since is None,
                    "version": r.version,
                    "served": not r.absent,
                    "lists": r.relists,
                    **({"error": r.last_error} if r.last_error else {}),
                }
                for r in self.reflectors
            },
        }

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(r.synced for r in self.reflectors):
                return True
            self._stopped.wait(0.05)
        return False

    # -- writing (the reflectors) -----------------------------------------------------
    def _put(self, kind: str, obj: Object | None, key: Key) -> None:
        with self._lock:
            objects = self._objects[kind]
            old = objects.get(key)
            if obj is None:
                objects.pop(key, None)
            else:
                objects[key] = obj
        if old is not None or obj is not None:
            self._changed(kind, old, obj)

    def _replace(self, kind: str, items: list[Object]) -> None:
        fresh = {_key(item): item for item in items}
        with self._lock:
            old = self._objects[kind]
            self._objects[kind] = fresh
        for key in old.keys() | fresh.keys():
            before, after = old.get(key), fresh.get(key)
            if before is None or after is None or _version(before) != _version(after):
                self._changed(kind, before, after)

    def _changed(self, kind: str, old: Object | None, new: Object | None) -> None:
        try:
            self.on_change(kind, old, new)
        except Exception:  # a listener's bug must not stop the watch
            log.exception("on_change failed", extra={"kind": kind})


def _version(obj: Object) -> object:
    return metadata(obj).get("resourceVersion")
