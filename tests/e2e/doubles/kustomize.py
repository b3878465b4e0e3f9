"""Double of kustomize-controller: one reconcile of a Kustomization, in FLUX-WRITES.md's order.

1. conditions: Ready=Unknown "Reconciliation in progress", Reconciling "Fetching manifests for
   revision R ..."; then the artifact is downloaded from the source's *current* artifact;
2. ``status.lastAttemptedRevision = R`` with Reconciling "Building manifests ...": the first
   write carrying the new revision. If it fails, "failed to update status: <error>" is the
   reconcile's error, a Warning Event carries it, and nothing is applied;
3. conditions: Reconciling "Detecting drift ..."; then apply (here: a ConfigMap
   ``<name>-applied`` holding the revision and content, and ``Double.applied``);
4. conditions: Healthy Unknown, then True;
5. deferred end: ``lastAppliedRevision``, ``inventory``, ``history``, Ready=True "Applied
   revision: R", ``lastHandledReconcileAt``, ``observedGeneration``; Reconciling removed.
The Event's reason ("ReconciliationFailed") is the double's choice.
"""

from __future__ import annotations

import time

from kubernetes.client.rest import ApiException

from tests.e2e.doubles.patch import PatchError, StatusPatcher, delete_condition, now_text, set_condition
from tests.e2e.doubles.runner import Applied, Double, ReconcileError, artifact_revision, requested_at
from tests.e2e.doubles.source import SOURCE_KINDS, Storage

TIMEOUT = "5m0s"


class KustomizeController(Double):
    kind = "Kustomization"
    watched = ("GitRepository", "OCIRepository", "Bucket")
    manager = "gotk-kustomize-controller"

    def __init__(self, api_client, storage: Storage, **kwargs):
        super().__init__(api_client, **kwargs)
        self.storage = storage

    def _source_key(self, obj: dict) -> tuple[str, str, str]:
        ref = (obj.get("spec") or {}).get("sourceRef") or {}
        return ref.get("kind", "GitRepository"), ref.get("namespace") or obj["metadata"]["namespace"], ref.get("name")

    def related(self, kind, old, new):
        if artifact_revision(old) == artifact_revision(new) or new is None:
            return []
        meta = new["metadata"]
        return [key for key, ks in list(self.cache[self.kind].items())
                if self._source_key(ks) == (kind, meta["namespace"], meta["name"])]

    def reconcile(self, obj: dict, trigger: str) -> None:
        if (obj.get("spec") or {}).get("suspend"):
            return
        meta = obj["metadata"]
        source_kind, source_ns, source_name = self._source_key(obj)
        assert source_kind in SOURCE_KINDS
        source = self.api.get(source_kind, source_ns, source_name)
        artifact = ((source or {}).get("status") or {}).get("artifact")
        if not artifact:
            raise ReconcileError("Source artifact not found")
        revision = artifact["revision"]
        patcher = StatusPatcher(self.api, self.kind, obj, self.manager)
        # 1.
        set_condition(obj, "Ready", "Unknown", "Progressing", "Reconciliation in progress")
        set_condition(obj, "Reconciling", "True", "Progressing",
                      f"Fetching manifests for revision {revision} with a timeout of {TIMEOUT}")
        patcher.patch(obj)
        content = self.storage.get(artifact["path"])
        # 2. The first write carrying the new revision.
        obj["status"]["lastAttemptedRevision"] = revision
        set_condition(obj, "Reconciling", "True", "Progressing",
                      f"Building manifests for revision {revision} with a timeout of {TIMEOUT}")
        try:
            patcher.patch(obj)
        except PatchError as err:
            message = f"failed to update status: {err}"
            self._warn(obj, message)
            raise ReconcileError(message) from None
        # 3.
        set_condition(obj, "Reconciling", "True", "Progressing",
                      f"Detecting drift for revision {revision} with a timeout of {TIMEOUT}")
        patcher.patch(obj)
        self._apply(obj, revision, content, trigger)
        # 4.
        set_condition(obj, "Healthy", "Unknown", "Progressing", "Running health checks with a timeout of " + TIMEOUT)
        patcher.patch(obj)
        set_condition(obj, "Healthy", "True", "Succeeded", "Health check passed")
        patcher.patch(obj)
        # 5. The deferred end-of-reconcile patch.
        status = obj["status"]
        status["lastAppliedRevision"] = revision
        status["inventory"] = {"entries": [{"id": f"{meta['namespace']}_{meta['name']}-applied__ConfigMap", "v": "v1"}]}
        status["history"] = [{"digest": artifact["digest"], "firstReconciled": now_text(), "lastReconciled": now_text(),
                              "lastReconciledDuration": "1s", "lastReconciledStatus": "ReconciliationSucceeded",
                              "totalReconciliations": 1, "metadata": {"revision": revision}}]
        status["observedGeneration"] = meta.get("generation")
        if requested_at(obj):
            status["lastHandledReconcileAt"] = requested_at(obj)
        set_condition(obj, "Ready", "True", "ReconciliationSucceeded", f"Applied revision: {revision}")
        delete_condition(obj, "Reconciling")
        patcher.patch(obj)

    def _apply(self, obj: dict, revision: str, content: str, trigger: str) -> None:
        meta = obj["metadata"]
        self.api.put_config_map(meta["namespace"], f"{meta['name']}-applied", {"revision": revision, "content": content},
                                self.manager)
        self.applied.append(Applied((self.kind, meta["namespace"], meta["name"]), revision, time.monotonic(), trigger))

    def _warn(self, obj: dict, message: str) -> None:
        """The Warning Event Flux records (a notification to notification-controller goes with it)."""
        meta = obj["metadata"]
        stamp = now_text()
        try:
            self.api.core.create_namespaced_event(meta["namespace"], {
                "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
                "involvedObject": {"apiVersion": obj.get("apiVersion"), "kind": self.kind, "name": meta["name"],
                                   "namespace": meta["namespace"], "uid": meta.get("uid")},
                "type": "Warning", "reason": "ReconciliationFailed", "message": message[:1024],
                "source": {"component": "kustomize-controller"}, "firstTimestamp": stamp, "lastTimestamp": stamp,
                "count": 1})
        except ApiException:
            pass
