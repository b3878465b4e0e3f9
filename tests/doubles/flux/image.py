"""Double of image-reflector-controller: ImageRepository scans and ImagePolicy selection.

The registry is in memory (``push_tag``). A scan writes the ImageRepository's status
(``lastScanResult``, Ready); each ImagePolicy on that repository then reconciles: it picks the
newest tag its ``spec.policy.semver.range`` allows and saves it in the end-of-reconcile status
patch as ``status.latestRef`` {name, tag} with ``observedPreviousRef`` (API version v1beta2:
``latestImage``/``observedPreviousImage`` strings). Ready=True "Latest image tag for 'IMAGE'
resolved to TAG". ImageUpdateAutomation reads ``latestRef`` from there; it has no double.

Not compared with the real controller write by write: tests/realflux/test_images.py runs the
real image-reflector-controller and image-automation-controller through the same hold.
"""

from __future__ import annotations

from tests.doubles.flux.patch import StatusPatcher, delete_condition, now_text, set_condition
from tests.doubles.flux.runner import Double, ReconcileError, requested_at
from tests.doubles.flux.source import _version_key, matches


def _repo_ref(policy: dict) -> tuple[str, str]:
    ref = (policy.get("spec") or {}).get("imageRepositoryRef") or {}
    return ref.get("namespace") or policy["metadata"]["namespace"], ref.get("name")


def _scanned(repository: dict | None) -> object:
    return ((repository or {}).get("status") or {}).get("lastScanResult")


class ImageReflectorController(Double):
    kind = "ImagePolicy"
    watched = ("ImageRepository",)
    manager = "image-reflector-controller"

    def __init__(self, api_client, **kwargs):
        super().__init__(api_client, **kwargs)
        self.tags: dict[tuple[str, str], list[str]] = {}

    def push_tag(self, namespace: str, repository: str, tag: str) -> None:
        """A new tag in the registry, and the ImageRepository's scan that finds it."""
        tags = self.tags.setdefault((namespace, repository), [])
        tags.append(tag)
        obj = self.api.get("ImageRepository", namespace, repository)
        if obj is None:
            raise LookupError(f"ImageRepository {namespace}/{repository}")
        patcher = StatusPatcher(self.api, "ImageRepository", obj, self.manager)
        obj.setdefault("status", {})["lastScanResult"] = {
            "tagCount": len(tags),
            "scanTime": now_text(),
            "latestTags": sorted(tags, key=_version_key)[-10:],
        }
        obj["status"]["canonicalImageName"] = (obj.get("spec") or {}).get("image")
        obj["status"]["observedGeneration"] = obj["metadata"].get("generation")
        set_condition(obj, "Ready", "True", "Succeeded", f"successful scan: found {len(tags)} tags")
        patcher.patch(obj)

    def related(self, kind, old, new):
        if new is None or _scanned(old) == _scanned(new):
            return []
        where = (new["metadata"]["namespace"], new["metadata"]["name"])
        return [key for key, policy in list(self.cache[self.kind].items()) if _repo_ref(policy) == where]

    def reconcile(self, obj: dict, trigger: str) -> None:
        namespace, repository = _repo_ref(obj)
        repo = self.api.get("ImageRepository", namespace, repository)
        if repo is None:
            raise ReconcileError(f"referenced ImageRepository '{namespace}/{repository}' not found")
        image = (repo.get("spec") or {}).get("image")
        semver = (((obj.get("spec") or {}).get("policy") or {}).get("semver") or {}).get("range")
        fitting = [t for t in self.tags.get((namespace, repository), []) if matches(t, semver)]
        if not fitting:
            raise ReconcileError(f"cannot determine latest tag for policy: no tag matches '{semver}'")
        tag = max(fitting, key=_version_key)
        patcher = StatusPatcher(self.api, self.kind, obj, self.manager)
        status = obj.setdefault("status", {})
        if obj["apiVersion"].endswith("/v1beta2"):
            if status.get("latestImage") and status["latestImage"] != f"{image}:{tag}":
                status["observedPreviousImage"] = status["latestImage"]
            status["latestImage"] = f"{image}:{tag}"
        else:
            previous = status.get("latestRef")
            if previous and previous.get("tag") != tag:
                status["observedPreviousRef"] = previous
            status["latestRef"] = {"name": image, "tag": tag}
        status["observedGeneration"] = obj["metadata"].get("generation")
        if requested_at(obj):
            status["lastHandledReconcileAt"] = requested_at(obj)
        set_condition(obj, "Ready", "True", "Succeeded", f"Latest image tag for {image} resolved to {tag}")
        delete_condition(obj, "Reconciling")
        patcher.patch(obj)
