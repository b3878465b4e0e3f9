"""Double of source-controller: GitRepository, OCIRepository, Bucket, HelmRepository, HelmChart.

What the "remote" holds is set by the test (``push`` a revision, ``publish`` a chart version).
A reconcile, as source-controller v1.9's reconcilers write (tests/realflux/test_doubles.py
compares): for a new generation or a new ``reconcile.fluxcd.io/requestedAt`` an early
conditions write (Reconciling=True "Progressing"; Ready=Unknown only when it was absent or
Unknown), which fails the reconcile when refused; garbage collection against the *stored*
``status.artifact`` (it never deletes that file; keeps the 2 newest others); for a new
revision a conditions write (ArtifactOutdated=True "NewRevision" when there was an artifact,
Reconciling and Ready=Unknown "building artifact: new upstream revision 'R'": GitRepository
and HelmRepository stop when it fails, the others only log) and the artifact file written to
storage; then the deferred end-of-reconcile patch: ``status.artifact`` (only when new),
Ready=True "stored artifact for revision 'R'", ``observedGeneration`` and
``lastHandledReconcileAt``. An interval reconcile with nothing new writes nothing.
"""

from __future__ import annotations

import hashlib
import threading

from tests.doubles.flux.patch import StatusPatcher, condition, delete_condition, now_text, set_condition
from tests.doubles.flux.runner import Double, requested_at

SOURCE_KINDS = ("GitRepository", "OCIRepository", "Bucket", "HelmRepository", "HelmChart")
STOPS_ON_EARLY_FAILURE = ("GitRepository", "HelmRepository")
KEEP = 2  # garbage collection keeps this many records besides the stored artifact


class Storage:
    """The artifact files source-controller serves over HTTP, by path."""

    def __init__(self):
        self.files: dict[str, str] = {}
        self.lock = threading.Lock()

    def put(self, path: str, content: str) -> None:
        with self.lock:
            self.files[path] = content

    def get(self, path: str) -> str:
        with self.lock:
            if path not in self.files:
                raise FileNotFoundError(f"artifact {path} not found")
            return self.files[path]

    def collect(self, directory: str, stored: str | None) -> None:
        with self.lock:
            others = [p for p in self.files if p.startswith(directory) and p != stored]
            for path in others[:-KEEP] if len(others) > KEEP else []:
                del self.files[path]


def _digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _version_key(version: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in version.split("."))


def matches(version: str, constraint: str | None) -> bool:
    """The semver ranges the tests use: ``*``, ``6.x``, ``6.0.x``, an exact version."""
    if constraint in (None, "", "*"):
        return True
    want = constraint.split(".")
    have = version.split(".")
    return all(w in ("x", "*") or (i < len(have) and have[i] == w) for i, w in enumerate(want))


class SourceController(Double):
    """One kind of source per instance (one controller-runtime reconciler per kind)."""

    manager = "source-controller"

    def __init__(self, api_client, kind: str, storage: Storage, **kwargs):
        self.kind = kind
        super().__init__(api_client, **kwargs)
        self.storage = storage
        self.upstream: dict[tuple[str, str], str] = {}  # source -> the remote's newest revision
        self.charts: dict[tuple[str, str, str], list[str]] = {}  # (repo ns, repo name, chart) -> versions

    # -- the remote -------------------------------------------------------------------
    def push(self, namespace: str, name: str, revision: str) -> None:
        """A new commit/tag/object upstream; the controller notices it at its next poll (now)."""
        self.upstream[(namespace, name)] = revision
        self.enqueue(namespace, name, "upstream")

    def publish(self, namespace: str, repository: str, chart: str, version: str) -> None:
        """A chart version appears in a HelmRepository's index; its HelmCharts look again."""
        self.charts.setdefault((namespace, repository, chart), []).append(version)
        for (ns, name), obj in list(self.cache[self.kind].items()):
            spec = obj.get("spec") or {}
            if (
                spec.get("chart") == chart
                and (spec.get("sourceRef") or {}).get("name") == repository
                and ns == namespace
            ):
                self.enqueue(ns, name, "upstream")

    def _newest(self, obj: dict) -> str | None:
        meta, spec = obj["metadata"], obj.get("spec") or {}
        if self.kind != "HelmChart":
            return self.upstream.get((meta["namespace"], meta["name"]))
        versions = self.charts.get(
            (meta["namespace"], (spec.get("sourceRef") or {}).get("name"), spec.get("chart")), []
        )
        fitting = [v for v in versions if matches(v, spec.get("version"))]
        return max(fitting, key=_version_key) if fitting else None

    # -- one reconcile ----------------------------------------------------------------
    def _progressive(self, obj: dict, drift: bool, message: str) -> None:
        """fluxcd/pkg runtime/reconcile ProgressiveStatus: Reconciling=True; Ready=Unknown only
        on drift or when Ready is absent or already Unknown."""
        set_condition(obj, "Reconciling", "True", "Progressing", message)
        ready = condition(obj, "Ready")
        if drift or ready is None or ready.get("status") == "Unknown":
            set_condition(obj, "Ready", "Unknown", "Progressing", message)

    def reconcile(self, obj: dict, trigger: str) -> None:
        meta = obj["metadata"]
        patcher = StatusPatcher(self.api, self.kind, obj, self.manager)
        directory = f"{self.kind.lower()}/{meta['namespace']}/{meta['name']}/"
        status = obj.get("status") or {}
        stored = status.get("artifact") or {}
        # Persist Reconciling at once for a new generation or a reconcile request (the
        # reconcile fails if that write does); otherwise it stays in memory.
        self._progressive(obj, False, "reconciliation in progress")
        if meta.get("generation") != status.get("observedGeneration"):
            self._progressive(
                obj,
                False,
                f"processing object: new generation "
                f"{status.get('observedGeneration') or 0} -> {meta.get('generation')}",
            )
            patcher.patch(obj)
        elif requested_at(obj) != status.get("lastHandledReconcileAt"):
            patcher.patch(obj)
        self.storage.collect(directory, stored.get("path"))
        revision = self._newest(obj)
        if revision is None:
            return
        if revision != stored.get("revision"):
            message = f"new upstream revision '{revision}'"
            if stored:
                set_condition(obj, "ArtifactOutdated", "True", "NewRevision", message)
            self._progressive(obj, True, f"building artifact: {message}")
            try:
                patcher.patch(obj)
            except Exception:
                if self.kind in STOPS_ON_EARLY_FAILURE:
                    raise
            content = f"{self.kind} {meta['namespace']}/{meta['name']} at {revision}"
            digest = _digest(content)
            path = f"{directory}{digest.split(':')[1][:16]}.tar.gz"
            self.storage.put(path, content)
            obj.setdefault("status", {})["artifact"] = {
                "revision": revision,
                "digest": digest,
                "path": path,
                "size": len(content),
                "url": f"http://source-controller.flux-system.svc.cluster.local./{path}",
                "lastUpdateTime": now_text(),
            }
        # The deferred end-of-reconcile patch (an up-to-date artifact is left as it is).
        obj["status"]["observedGeneration"] = meta.get("generation")
        if requested_at(obj):
            obj["status"]["lastHandledReconcileAt"] = requested_at(obj)
        delete_condition(obj, "ArtifactOutdated")
        set_condition(
            obj, "ArtifactInStorage", "True", "Succeeded", f"stored artifact for revision '{revision}'"
        )
        set_condition(obj, "Ready", "True", "Succeeded", f"stored artifact for revision '{revision}'")
        delete_condition(obj, "Reconciling")
        patcher.patch(obj)
