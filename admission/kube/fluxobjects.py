"""Listing the gated Flux objects in a cluster, whichever API versions it serves."""

from __future__ import annotations

from kubernetes import client
from kubernetes.client.rest import ApiException

from admission.core import names

# Served versions differ across Flux releases: the first that answers is used.
FLUX_RESOURCES = (
    ("Kustomization", names.KUSTOMIZE_GROUP, "kustomizations", ("v1", "v1beta2", "v1beta1")),
    ("HelmRelease", names.HELM_GROUP, "helmreleases", ("v2", "v2beta2", "v2beta1")),
    ("GitRepository", names.SOURCE_GROUP, "gitrepositories", ("v1", "v1beta2")),
    ("OCIRepository", names.SOURCE_GROUP, "ocirepositories", ("v1", "v1beta2")),
    ("HelmRepository", names.SOURCE_GROUP, "helmrepositories", ("v1", "v1beta2")),
    ("HelmChart", names.SOURCE_GROUP, "helmcharts", ("v1", "v1beta2")),
    ("Bucket", names.SOURCE_GROUP, "buckets", ("v1", "v1beta2")),
)
PLURALS = {kind: (group, plural) for kind, group, plural, _ in FLUX_RESOURCES}


class FluxObjects:
    """Lists gated Flux objects cluster-wide and patches them, remembering served versions."""

    def __init__(self, custom: client.CustomObjectsApi):
        self.custom = custom
        self.versions: dict[str, str] = {}

    def list_kind(self, kind: str) -> list[dict]:
        """Every object of ``kind`` in the cluster (none when its CRD is not installed)."""
        _, group, plural, versions = next(r for r in FLUX_RESOURCES if r[0] == kind)
        known = self.versions.get(kind)
        for version in ([known] if known else list(versions)):
            try:
                items = self.custom.list_cluster_custom_object(group, version, plural).get("items") or []
            except ApiException as err:
                if err.status == 404:
                    continue
                raise
            self.versions[kind] = version
            for item in items:
                item.setdefault("apiVersion", f"{group}/{version}")
                item.setdefault("kind", kind)
            return items
        return []

    def list_all(self) -> list[dict]:
        return [obj for kind, *_ in FLUX_RESOURCES for obj in self.list_kind(kind)]

    def patch(self, kind: str, namespace: str, name: str, body: dict) -> dict:
        group, plural = PLURALS[kind]
        version = self.versions.get(kind) or next(r[3][0] for r in FLUX_RESOURCES if r[0] == kind)
        return self.custom.patch_namespaced_custom_object(group, version, namespace, plural, name, body)

    def get(self, kind: str, namespace: str, name: str, version: str) -> dict | None:
        group, plural = PLURALS[kind]
        try:
            return self.custom.get_namespaced_custom_object(group, version, namespace, plural, name)
        except ApiException as err:
            if err.status == 404:
                return None
            raise
