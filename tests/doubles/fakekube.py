"""FakeKube: a tiny in-memory fake of the Kubernetes API methods admission.kube calls.

It stands in for CustomObjectsApi, CoreV1Api and CoordinationV1Api at the boundary, for
in-process tests of the controller (and its calendar loop), leader election and Event aggregation
(tests/kube, tests/app/test_holdpoints.py). Like the real client, it answers typed
reads (Events, Leases) with the client's own models, raises ApiException with the API
server's status codes (404 missing, 409 exists or stale resourceVersion), applies patches
as JSON merge patches (tests/doubles/mergepatch.py), and keeps a resourceVersion per object.
``FakeFluxCache`` stands in for admission.kube.fluxcache.FluxCache, read straight from a
FakeKube; ``QuietStore`` for a store's lifecycle.

Proven against the real one: no test runs FakeKube and the real API server side by side; the
e2e tier runs the same code against a real kube-apiserver: the controller, its leader election
and transition Events in tests/e2e/test_cluster_gates.py, denial Events and a Lease that cannot
be held in tests/e2e/test_operators.py, reconcile requests in tests/e2e/test_release.py, denied
attempts in tests/e2e/test_content_holds.py, the calendar loop in tests/e2e/test_fleet.py, and
the real FluxCache in tests/e2e/test_fluxcache.py.
"""

from __future__ import annotations

import copy
import itertools
import json
import threading

from kubernetes import client
from kubernetes.client.rest import ApiException

from admission.core.base import names
from tests.doubles.mergepatch import merged

_SERDE = client.ApiClient()


def _error(status: int, reason: str) -> ApiException:
    return ApiException(status=status, reason=reason)


class QuietStore:
    """A stand-in store's lifecycle: always trusted and synced, nothing to start or stop."""

    def untrusted(self) -> str | None:
        return None

    def wait_synced(self, timeout: float) -> bool:
        return True

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


class FakeKube:
    """Objects by (resource, namespace, name) as the API server would store them (plain dicts)."""

    def __init__(self):
        self.store: dict[tuple[str, str, str], dict] = {}
        self.calls: list[tuple[str, tuple]] = []  # every write, in order: (method, key)
        self.reads: list[tuple[str, str, str]] = []  # every custom object read: (plural, namespace, name)
        self.fail: dict[str, ApiException] = {}  # method name -> the error its next calls raise
        self._versions = itertools.count(1)
        self._generated = itertools.count(1)
        self._lock = threading.Lock()

    # -- plumbing -------------------------------------------------------------------------
    def _put(self, resource: str, namespace: str, name: str, obj: dict) -> dict:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta.update(name=name, namespace=namespace, resourceVersion=str(next(self._versions)))
        self.store[(resource, namespace, name)] = obj
        return copy.deepcopy(obj)

    def _get(self, resource: str, namespace: str, name: str) -> dict:
        try:
            return self.store[(resource, namespace, name)]
        except KeyError:
            raise _error(404, "Not Found") from None

    def _write(self, method: str, key: tuple) -> None:
        if method in self.fail:
            raise self.fail[method]
        self.calls.append((method, key))

    def add(self, resource: str, obj: dict) -> dict:
        """Seed an object (a test's setup), e.g. add("kustomizations", flux(...))."""
        meta = obj["metadata"]
        if "uid" not in meta:  # as the API server does on create
            obj = {**obj, "metadata": {**meta, "uid": f"uid-{next(self._generated):05d}"}}
        return self._put(resource, meta.get("namespace", ""), meta["name"], obj)

    def get(self, resource: str, namespace: str, name: str) -> dict | None:
        obj = self.store.get((resource, namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    def of(self, resource: str) -> list[dict]:
        return [copy.deepcopy(o) for (r, _, _), o in sorted(self.store.items()) if r == resource]

    # -- CustomObjectsApi -----------------------------------------------------------------
    def list_cluster_custom_object(self, group: str, version: str, plural: str, **_) -> dict:
        with self._lock:
            return {"items": self.of(plural), "metadata": {"resourceVersion": str(next(self._versions))}}

    def get_namespaced_custom_object(self, group, version, namespace, plural, name) -> dict:
        with self._lock:
            self.reads.append((plural, namespace, name))
            return copy.deepcopy(self._get(plural, namespace, name))

    def patch_namespaced_custom_object(self, group, version, namespace, plural, name, body) -> dict:
        with self._lock:
            self._write("patch_namespaced_custom_object", (plural, namespace, name))
            current = self._get(plural, namespace, name)
            patch = {k: v for k, v in body.items() if k != "status"}  # the main resource leaves status alone
            return self._put(plural, namespace, name, merged(current, patch))

    def get_namespaced_custom_object_status(self, group, version, namespace, plural, name) -> dict:
        return self.get_namespaced_custom_object(group, version, namespace, plural, name)

    def patch_namespaced_custom_object_status(
        self, group, version, namespace, plural, name, body, **_
    ) -> dict:
        with self._lock:
            self._write("patch_namespaced_custom_object_status", (plural, namespace, name))
            current = self._get(plural, namespace, name)
            precondition = (body.get("metadata") or {}).get("resourceVersion")
            if precondition is not None and precondition != current["metadata"]["resourceVersion"]:
                raise _error(409, "Conflict")
            status = merged(current.get("status"), body.get("status"))
            ended = (status or {}).get(names.ENDED_APPROVALS_FIELD) or []
            if plural == names.GATE_PLURAL and len(ended) > names.ENDED_APPROVALS_MAX_ITEMS:
                raise _error(422, "Unprocessable Entity")  # the Gate CRD's maxItems
            return self._put(plural, namespace, name, {**current, "status": status})

    # -- CoreV1Api: Events ----------------------------------------------------------------
    def create_namespaced_event(self, namespace: str, body: dict):
        with self._lock:
            body = _SERDE.sanitize_for_serialization(body)
            meta = body.setdefault("metadata", {})
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = f"{meta['generateName']}{next(self._generated):05d}"
            self._write("create_namespaced_event", ("events", namespace, meta["name"]))
            if ("events", namespace, meta["name"]) in self.store:
                raise _error(409, "AlreadyExists")
            return self._model(self._put("events", namespace, meta["name"], body), "CoreV1Event")

    def read_namespaced_event(self, name: str, namespace: str):
        with self._lock:
            return self._model(self._get("events", namespace, name), "CoreV1Event")

    def replace_namespaced_event(self, name: str, namespace: str, body):
        with self._lock:
            self._write("replace_namespaced_event", ("events", namespace, name))
            return self._model(self._replace("events", namespace, name, body), "CoreV1Event")

    # -- CoreV1Api: Secrets (read only: calendar credentials) --------------------------------
    def read_namespaced_secret(self, name: str, namespace: str):
        with self._lock:
            return self._model(self._get("secrets", namespace, name), "V1Secret")

    # -- CoordinationV1Api: Leases --------------------------------------------------------
    def read_namespaced_lease(self, name: str, namespace: str):
        with self._lock:
            return self._model(self._get("leases", namespace, name), "V1Lease")

    def create_namespaced_lease(self, namespace: str, body):
        with self._lock:
            body = _SERDE.sanitize_for_serialization(body)
            name = body["metadata"]["name"]
            self._write("create_namespaced_lease", ("leases", namespace, name))
            if ("leases", namespace, name) in self.store:
                raise _error(409, "AlreadyExists")
            return self._model(self._put("leases", namespace, name, body), "V1Lease")

    def replace_namespaced_lease(self, name: str, namespace: str, body):
        with self._lock:
            self._write("replace_namespaced_lease", ("leases", namespace, name))
            return self._model(self._replace("leases", namespace, name, body), "V1Lease")

    def patch_namespaced_lease(self, name: str, namespace: str, body):
        with self._lock:
            self._write("patch_namespaced_lease", ("leases", namespace, name))
            current = self._get("leases", namespace, name)
            return self._model(self._put("leases", namespace, name, merged(current, body)), "V1Lease")

    # -- typed answers and optimistic concurrency --------------------------------------------
    def _replace(self, resource: str, namespace: str, name: str, body) -> dict:
        body = _SERDE.sanitize_for_serialization(body)
        current = self._get(resource, namespace, name)
        sent = (body.get("metadata") or {}).get("resourceVersion")
        if sent is not None and sent != current["metadata"]["resourceVersion"]:
            raise _error(409, "Conflict")
        return self._put(resource, namespace, name, body)

    @staticmethod
    def _model(obj: dict, type_name: str):
        return _SERDE.deserialize(json.dumps(obj), type_name, "application/json")


class FakeFluxCache:
    """The controller's view of FluxCache, read straight from a FakeKube (always synced)."""

    def __init__(self, kube: FakeKube):
        from admission.core.flux.kinds import FLUX_KINDS

        self.kube, self.rows = kube, {row.kind: row for row in FLUX_KINDS}
        self.on_change = lambda kind, old, new: None

    def kinds(self) -> list[str]:
        return list(self.rows)

    def objects(self, kind: str) -> list[dict]:
        return [{**obj, "kind": kind} for obj in self.kube.of(self.rows[kind].plural)]

    def get(self, kind: str, namespace: str, name: str) -> dict | None:
        obj = self.kube.get(self.rows[kind].plural, namespace, name)
        return None if obj is None else {**obj, "kind": kind}

    def version(self, kind: str) -> str:
        return self.rows[kind].versions[0]

    def untrusted(self) -> None:
        return None

    def readiness(self) -> dict:
        return {}

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass
