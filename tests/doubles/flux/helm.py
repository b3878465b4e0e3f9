"""Double of helm-controller v2: one reconcile of a HelmRelease, as helm-controller v1.6 writes
(tests/realflux/test_doubles.py compares).

It keeps the generated HelmChart (``<namespace>-<name>`` in the chart source's namespace, with
the release's owner labels,
``spec.version`` copied from the HelmRelease, ``*`` when empty) and requires its
``generation == observedGeneration`` and an artifact; while it is not ready, the reconcile
fails with Ready=False "SourceNotReady". Early write: Reconciling "Fulfilling prerequisites"
(Ready is not touched) and ``status.helmChart``. In memory: ``lastAttemptedGeneration``,
``lastAttemptedRevision`` (the chart version), ``lastAttemptedConfigDigest`` (the values'
digest), ``storageNamespace``. When the chart or values differ from ``status.history[0]``, one
patch writes Reconciling "Running 'upgrade' action with timeout of 5m0s" (Ready=Unknown) with
those fields *just before* the Helm action; if it fails, no action runs and no Event is
emitted. The action here: a ConfigMap ``<name>-release`` with chart version and values, and
``Double.applied``; then one patch with the history entry, ``inventory``,
``lastAttemptedReleaseAction(Duration)``, Released and Ready=True. The deferred
end-of-reconcile patch, on every path: ``lastHandledReconcileAt``; when Ready=True,
``observedGeneration`` and Reconciling removed; after a refused write it sends the refused
fields again, and the reconcile fails with the first error. It reconciles on its HelmChart's
artifact revision changes.
"""

from __future__ import annotations

import hashlib
import json
import time

import yaml
from kubernetes.client.rest import ApiException

from admission.core.base import names
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

TIMEOUT = "5m0s"


def chart_of(release: dict) -> tuple[str, str]:
    """Namespace and name of the HelmChart generated for ``release``."""
    meta = release["metadata"]
    ref = (((release.get("spec") or {}).get("chart") or {}).get("spec") or {}).get("sourceRef") or {}
    return ref.get("namespace") or meta["namespace"], f"{meta['namespace']}-{meta['name']}"


def values_digest(values: dict) -> str:
    """The double's ``lastAttemptedConfigDigest`` for ``values`` (helm-controller's differs; the
    webhook only compares it with ``history[0].configDigest``)."""
    return "sha256:" + hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()


def _merge(base: dict, over: dict) -> dict:
    """The double's merge of values: maps merge key by key, ``over`` wins elsewhere (a null is a
    value here, not a deletion: this is no merge patch)."""
    out = dict(base)
    for key, value in over.items():
        out[key] = (
            _merge(out[key], value) if isinstance(out.get(key), dict) and isinstance(value, dict) else value
        )
    return out


class HelmController(Double):
    kind = "HelmRelease"
    watched = ("HelmChart",)
    manager = "helm-controller"

    def related(self, kind, old, new):
        if new is None or artifact_revision(old) == artifact_revision(new):
            return []
        where = (new["metadata"]["namespace"], new["metadata"]["name"])
        return [key for key, release in list(self.cache[self.kind].items()) if chart_of(release) == where]

    def _values(self, release: dict) -> dict:
        spec = release.get("spec") or {}
        values: dict = {}
        for ref in spec.get("valuesFrom") or []:
            if ref.get("kind", "ConfigMap") != "ConfigMap":
                continue
            try:
                data = (
                    self.api.core.read_namespaced_config_map(
                        ref["name"], release["metadata"]["namespace"]
                    ).data
                    or {}
                )
            except ApiException as err:
                raise ReconcileError(
                    f"could not resolve ConfigMap chart values reference "
                    f"'{release['metadata']['namespace']}/{ref['name']}': {err.reason}"
                ) from None
            values = _merge(values, yaml.safe_load(data.get(ref.get("valuesKey") or "values.yaml", "")) or {})
        return _merge(values, spec.get("values") or {})

    def _chart(self, release: dict) -> dict:
        chart_spec = ((release.get("spec") or {}).get("chart") or {}).get("spec") or {}
        namespace, name = chart_of(release)
        wanted = {
            "chart": chart_spec.get("chart"),
            "version": chart_spec.get("version") or "*",
            "sourceRef": {
                "kind": (chart_spec.get("sourceRef") or {}).get("kind", "HelmRepository"),
                "name": (chart_spec.get("sourceRef") or {}).get("name"),
            },
            "interval": chart_spec.get("interval") or "10m",
            "reconcileStrategy": "ChartVersion",
        }
        # helm-controller applies the chart with its release's owner labels (fluxcd/pkg/ssa
        # SetOwnerLabels): the webhook finds the release, and the API server sends its status, by them.
        labels = {
            names.HELM_NAME_LABEL: release["metadata"]["name"],
            names.HELM_NAMESPACE_LABEL: release["metadata"]["namespace"],
        }
        chart = self.api.get("HelmChart", namespace, name)
        if chart is None:
            self.api.create(
                "HelmChart",
                namespace,
                {
                    "apiVersion": "source.toolkit.fluxcd.io/v1",
                    "kind": "HelmChart",
                    "metadata": {"name": name, "namespace": namespace, "labels": labels},
                    "spec": wanted,
                },
                self.manager,
            )
            raise ReconcileError(f"HelmChart '{namespace}/{name}' is not ready")
        if any((chart.get("spec") or {}).get(k) != v for k, v in wanted.items()) or any(
            (chart["metadata"].get("labels") or {}).get(k) != v for k, v in labels.items()
        ):
            self.api.patch(
                "HelmChart", namespace, name, {"metadata": {"labels": labels}, "spec": wanted}, self.manager
            )
            raise ReconcileError("latest generation of object has not been reconciled")
        if chart["metadata"].get("generation") != (chart.get("status") or {}).get("observedGeneration"):
            raise ReconcileError("latest generation of object has not been reconciled")
        if not artifact_revision(chart):
            raise ReconcileError(f"HelmChart '{namespace}/{name}' is not ready")
        return chart

    def reconcile(self, obj: dict, trigger: str) -> None:
        if (obj.get("spec") or {}).get("suspend"):
            return
        patcher = StatusPatcher(self.api, self.kind, obj, self.manager)
        error: Exception | None = None
        try:
            self._reconcile(obj, trigger, patcher)
        except ReconcileError as err:
            # A chart that is not ready: Ready=False "SourceNotReady" (other failures keep Ready).
            if "not ready" in str(err) or "not been reconciled" in str(err):
                set_condition(obj, "Ready", "False", "SourceNotReady", str(err))
            error = err
        except PatchError as err:
            error = err
        # The deferred end-of-reconcile patch, on every path: after a refused write it sends
        # the refused fields again.
        meta, status = obj["metadata"], obj.setdefault("status", {})
        if requested_at(obj):
            status["lastHandledReconcileAt"] = requested_at(obj)
        if (condition(obj, "Ready") or {}).get("status") == "True":
            delete_condition(obj, "Reconciling")
            status["observedGeneration"] = meta.get("generation")
        deferred_patch(patcher, obj, error)

    def _reconcile(self, obj: dict, trigger: str, patcher: StatusPatcher) -> None:
        meta = obj["metadata"]
        status = obj.setdefault("status", {})
        set_condition(obj, "Reconciling", "True", "Progressing", "Fulfilling prerequisites")
        status["helmChart"] = "/".join(chart_of(obj))
        patcher.patch(obj)
        chart = self._chart(obj)
        values = self._values(obj)
        chart_version = artifact_revision(chart)
        config_digest = values_digest(values)
        status["lastAttemptedGeneration"] = meta.get("generation")
        status["lastAttemptedRevision"] = chart_version
        status["lastAttemptedConfigDigest"] = config_digest
        status["storageNamespace"] = meta["namespace"]
        history = list(status.get("history") or [])
        current = history[0] if history else None
        action = (
            "install"
            if current is None
            else (
                "upgrade"
                if (current.get("chartVersion"), current.get("configDigest"))
                != (chart_version, config_digest)
                else None
            )
        )
        if action:
            set_condition(
                obj,
                "Reconciling",
                "True",
                "Progressing",
                f"Running '{action}' action with timeout of {TIMEOUT}",
            )
            set_condition(
                obj, "Ready", "Unknown", "Progressing", f"Running '{action}' action with timeout of {TIMEOUT}"
            )
            patcher.patch(obj)  # a failure here: no Helm action, no Event (only a log line)
            number = (current or {}).get("version", 0) + 1
            self._release(obj, chart_version, config_digest, values, trigger)
            chart_name = (chart.get("spec") or {}).get("chart")
            history.insert(
                0,
                {
                    "name": meta["name"],
                    "namespace": meta["namespace"],
                    "version": number,
                    "status": "deployed",
                    "chartName": chart_name,
                    "chartVersion": chart_version,
                    "appVersion": chart_version,
                    "configDigest": config_digest,
                    "digest": "sha256:"
                    + hashlib.sha256(f"{chart_version}{config_digest}".encode()).hexdigest(),
                    "firstDeployed": now_text(),
                    "lastDeployed": now_text(),
                },
            )
            status["history"] = history[:5]
            status["inventory"] = {
                "entries": [{"id": f"{meta['namespace']}_{meta['name']}-release__ConfigMap", "v": "v1"}]
            }
            status["lastAttemptedReleaseAction"] = action
            status["lastAttemptedReleaseActionDuration"] = (
                f"{number}s"  # a duration; its value is the double's
            )
            set_condition(
                obj,
                "Released",
                "True",
                f"{action.capitalize()}Succeeded",
                f"Helm {action} succeeded for release {meta['namespace']}/{meta['name']}.v{number} "
                f"with chart {chart_name}@{chart_version}",
            )
            set_condition(
                obj,
                "Ready",
                "True",
                f"{action.capitalize()}Succeeded",
                f"Helm {action} succeeded for release {meta['namespace']}/{meta['name']}.v{number} "
                f"with chart {chart_name}@{chart_version}",
            )
            patcher.patch(obj)  # the action's outcome, before the deferred patch
        else:
            set_condition(
                obj, "Ready", "True", "ReconciliationSucceeded", "Release in-sync with desired state"
            )

    def _release(self, obj: dict, chart_version: str, config_digest: str, values: dict, trigger: str) -> None:
        meta = obj["metadata"]
        self.api.put_config_map(
            meta["namespace"],
            f"{meta['name']}-release",
            {
                "chartVersion": chart_version,
                "configDigest": config_digest,
                "values": json.dumps(values, sort_keys=True),
            },
            self.manager,
        )
        self.applied.append(
            Applied(
                (self.kind, meta["namespace"], meta["name"]),
                chart_version,
                time.monotonic(),
                trigger,
                {"configDigest": config_digest, "values": values},
            )
        )
