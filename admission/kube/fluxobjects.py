"""Listing the gated Flux objects in a cluster, whichever API versions it serves."""

from __future__ import annotations

from kubernetes import client
from kubernetes.client.rest import ApiException

from admission.core.kinds import BY_KIND, FLUX_KINDS, FluxKind


class FluxObjects:
    """Lists gated Flux objects cluster-wide and patches them, remembering served versions."""

    def __init__(self, custom: client.CustomObjectsApi):
        self.custom = custom
        self.versions: dict[str, str] = {}

    def list_kind(self, kind: str) -> list[dict]:
        """Every object of ``kind`` in the cluster (none when its CRD is not installed)."""
        row = BY_KIND[kind]
        group, plural = row.group, row.plural
        known = self.versions.get(kind)
        for version in ([known] if known else list(row.versions)):
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
        return [obj for row in FLUX_KINDS for obj in self.list_kind(row.kind)]

    def patch(self, kind: str, namespace: str, name: str, body: dict) -> dict:
        row = BY_KIND[kind]
        version = self.versions.get(kind) or row.versions[0]
        return self.custom.patch_namespaced_custom_object(row.group, version, namespace, row.plural, name, body)

    def get(self, kind: str, namespace: str, name: str, version: str) -> dict | None:
        row = BY_KIND[kind]
        try:
            return self.custom.get_namespaced_custom_object(row.group, version, namespace, row.plural, name)
        except ApiException as err:
            if err.status == 404:
                return None
            raise


def read_stored(get, row: FluxKind, namespace: str, name: str, versions: dict[str, str]) -> dict | None:
    """One object as the API server stores it, read with ``get(group, version, namespace,
    plural, name)`` (the main resource or ``/status``) at the version that answered last, else
    each version the table knows; None when it does not exist. ``versions`` remembers, per kind,
    the version that answered."""
    known = versions.get(row.kind)
    for version in ([known] if known else []) + [v for v in row.versions if v != known]:
        try:
            obj = get(row.group, version, namespace, row.plural, name)
        except ApiException as err:
            if err.status == 404:
                continue
            raise
        versions[row.kind] = version
        return obj
    return None
