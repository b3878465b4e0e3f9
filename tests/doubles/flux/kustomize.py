"""Double of kustomize-controller: one reconcile of a Kustomization, as kustomize-controller
v1.9 writes (tests/realflux/test_doubles.py compares):

0. no source, or a source without an artifact: Ready=False "ArtifactFailed", written by the
   deferred patch (5.) and nothing else; the source's new artifact triggers the next reconcile;
1. conditions: Ready=Unknown "Reconciliation in progress", Reconciling "Fetching manifests for
   revision R ..."; then the artifact is downloaded from the source's *current* artifact;
2. ``status.lastAttemptedRevision = R`` with Reconciling "Building manifests ...": the first
   write carrying the new revision. If it fails, "failed to update status: <error>" is the
   reconcile's error, a Warning Event carries it, and nothing is applied;
3. conditions: Reconciling "Detecting drift ..."; then apply (here: a ConfigMap
   ``<name>-applied`` holding the revision and content, and ``Double.applied``);
4. only with ``spec.wait`` or ``spec.healthChecks``: Healthy Unknown, then True (in 5.);
5. the deferred end-of-reconcile patch, on every path (finalizeStatus): ``lastHandledReconcileAt``;
   when Ready=True, Reconciling removed and ``observedGeneration``; when Ready=False, Reconciling's
   reason ProgressingWithRetry; on success also ``lastAppliedRevision``, ``inventory``,
   ``history``, Ready=True "Applied revision: R". After a refused write (2.) it sends the refused
   ``lastAttemptedRevision`` again, and the reconcile fails with the first error.
The Event's reason ("ReconciliationFailed") is the double's choice.
"""

from __future__ import annotations

import time

from kubernetes.client.rest import ApiException

from tests.doubles.flux.patch import (
    PatchError,
    StatusPatcher,
    condition,
    deferred_patch,
    delete_condition,
    now_text,
    set_condition,
)
from tests.doubles.flux.runner import Applied, Double, ReconcileError, artifact_revision, requested_at
from tests.doubles.flux.source import SOURCE_KINDS, Storage

TIMEOUT = "5m0s"
DEPENDENCY_REQUEUE = "30s"  # --requeue-dependency's default


class KustomizeController(Double):
    kind = "Kustomization"
    watched = ("GitRepository", "OCIRepository", "Bucket")
    manager = "gotk-kustomize-controller"

    def __init__(self, api_client, storage: Storage, **kwargs):
        super().__init__(api_client, **kwargs)
        self.storage = storage

    def _source_key(self, obj: dict) -> tuple[str, str, str]:
        ref = (obj.get("spec") or {}).get("sourceRef") or {}
        return (
            ref.get("kind", "GitRepository"),
            ref.get("namespace") or obj["metadata"]["namespace"],
            ref.get("name"),
        )

    def related(self, kind, old, new):
        if artifact_revision(old) == artifact_revision(new) or new is None:
            return []
        meta = new["metadata"]
        return [
            key
            for key, ks in list(self.cache[self.kind].items())
            if self._source_key(ks) == (kind, meta["namespace"], meta["name"])
        ]

    def reconcile(self, obj: dict, trigger: str) -> None:
        if (obj.get("spec") or {}).get("suspend"):
            return
        patcher = StatusPatcher(self.api, self.kind, obj, self.manager)
        error: Exception | None = None
        try:
            self._reconcile(obj, trigger, patcher)
        except (PatchError, ReconcileError) as err:
            error = err
        # The deferred end-of-reconcile patch (finalizeStatus), on every path: after a refused
        # write it sends the refused fields again.
        meta, status = obj["metadata"], obj.setdefault("status", {})
        if requested_at(obj):
            status["lastHandledReconcileAt"] = requested_at(obj)
        ready = (condition(obj, "Ready") or {}).get("status")
        if ready == "True":
            delete_condition(obj, "Reconciling")
            status["observedGeneration"] = meta.get("generation")
        reconciling = condition(obj, "Reconciling")
        if ready == "False" and reconciling is not None:
            set_condition(obj, "Reconciling", "True", "ProgressingWithRetry", reconciling["message"])
        deferred_patch(patcher, obj, error)

    def _reconcile(self, obj: dict, trigger: str, patcher: StatusPatcher) -> None:
        meta = obj["metadata"]
        source_kind, source_ns, source_name = self._source_key(obj)
        assert source_kind in SOURCE_KINDS
        source = self.api.get(source_kind, source_ns, source_name)
        if source is None:
            set_condition(
                obj,
                "Ready",
                "False",
                "ArtifactFailed",
                f'{source_kind}.source.toolkit.fluxcd.io "{source_name}" not found',
            )
            return  # requeued at the retry interval; the source's artifact triggers it sooner
        artifact = (source.get("status") or {}).get("artifact")
        if not artifact:
            set_condition(
                obj,
                "Ready",
                "False",
                "ArtifactFailed",
                f"Source artifact not found, retrying in {DEPENDENCY_REQUEUE}",
            )
            return  # requeued; the source's artifact triggers it sooner
        revision = artifact["revision"]
        # 1.
        set_condition(obj, "Ready", "Unknown", "Progressing", "Reconciliation in progress")
        set_condition(
            obj,
            "Reconciling",
            "True",
            "Progressing",
            f"Fetching manifests for revision {revision} with a timeout of {TIMEOUT}",
        )
        patcher.patch(obj)
        content = self.storage.get(artifact["path"])
        # 2. The first write carrying the new revision.
        obj["status"]["lastAttemptedRevision"] = revision
        set_condition(
            obj,
            "Reconciling",
            "True",
            "Progressing",
            f"Building manifests for revision {revision} with a timeout of {TIMEOUT}",
        )
        try:
            patcher.patch(obj)
        except PatchError as err:
            message = f"failed to update status: {err}"
            self._warn(obj, message)
            raise ReconcileError(message) from None
        # 3.
        set_condition(
            obj,
            "Reconciling",
            "True",
            "Progressing",
            f"Detecting drift for revision {revision} with a timeout of {TIMEOUT}",
        )
        patcher.patch(obj)
        self._apply(obj, revision, content, trigger)
        # 4. Health checks only with spec.wait or spec.healthChecks.
        spec = obj.get("spec") or {}
        if spec.get("wait") or spec.get("healthChecks"):
            set_condition(
                obj, "Healthy", "Unknown", "Progressing", "Running health checks with a timeout of " + TIMEOUT
            )
            patcher.patch(obj)
            set_condition(obj, "Healthy", "True", "Succeeded", "Health check passed")
        else:
            delete_condition(obj, "Healthy")
        # 5. What the deferred end-of-reconcile patch (reconcile()) writes on success.
        status = obj["status"]
        status["lastAppliedRevision"] = revision
        status["inventory"] = {
            "entries": [{"id": f"{meta['namespace']}_{meta['name']}-applied__ConfigMap", "v": "v1"}]
        }
        status["history"] = [
            {
                "digest": artifact["digest"],
                "firstReconciled": now_text(),
                "lastReconciled": now_text(),
                "lastReconciledDuration": "1s",
                "lastReconciledStatus": "ReconciliationSucceeded",
                "totalReconciliations": 1,
                "metadata": {"revision": revision},
            }
        ]
        set_condition(obj, "Ready", "True", "ReconciliationSucceeded", f"Applied revision: {revision}")

    def _apply(self, obj: dict, revision: str, content: str, trigger: str) -> None:
        meta = obj["metadata"]
        self.api.put_config_map(
            meta["namespace"],
            f"{meta['name']}-applied",
            {"revision": revision, "content": content},
            self.manager,
        )
        self.applied.append(
            Applied((self.kind, meta["namespace"], meta["name"]), revision, time.monotonic(), trigger)
        )

    def _warn(self, obj: dict, message: str) -> None:
        """The Warning Event Flux records (a notification to notification-controller goes with it)."""
        meta = obj["metadata"]
        stamp = now_text()
        try:
            self.api.core.create_namespaced_event(
                meta["namespace"],
                {
                    "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
                    "involvedObject": {
                        "apiVersion": obj.get("apiVersion"),
                        "kind": self.kind,
                        "name": meta["name"],
                        "namespace": meta["namespace"],
                        "uid": meta.get("uid"),
                    },
                    "type": "Warning",
                    "reason": "ReconciliationFailed",
                    "message": message[:1024],
                    "source": {"component": "kustomize-controller"},
                    "firstTimestamp": stamp,
                    "lastTimestamp": stamp,
                    "count": 1,
                },
            )
        except ApiException:
            pass
