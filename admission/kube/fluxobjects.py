"""Listing the gated Flux objects in a cluster, whichever API versions it serves."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from admission.core.base.objects import Object
from admission.core.flux.kinds import BY_KIND, FLUX_KINDS, FluxKind

T = TypeVar("T")
# The client declares what it reads as ``object``: a custom object, or a list of them, is a JSON
# object, so the casts below state what the API server sends rather than convert anything.


def first_served(row: FluxKind, call: Callable[[str], T], known: str | None = None) -> tuple[str, T] | None:
    """``call(version)`` at ``known`` (the version that answered last), then at each other version
    of ``row``, in the table's order, until one is not answered 404; that version and what the call
    returned, or None when every one was.

    Flux moves its kinds to new API versions between releases, and a cluster serves those of the
    release it runs: every list, watch and read of a Flux object finds its version here."""
    for version in ([known] if known else []) + [v for v in row.versions if v != known]:
        try:
            return version, call(version)
        except ApiException as err:
            if err.status != 404:  # a version not served, or (for one object) none at that name
                raise
    return None


class FluxObjects:
    """Lists gated Flux objects cluster-wide and patches them, remembering served versions."""

    def __init__(self, custom: client.CustomObjectsApi):
        self.custom = custom
        self.versions: dict[str, str] = {}

    def list_kind(self, kind: str) -> list[Object]:
        """Every object of ``kind`` in the cluster (none when its CRD is not installed)."""
        row = BY_KIND[kind]

        def list_at(version: str) -> Object:
            return cast(Object, self.custom.list_cluster_custom_object(row.group, version, row.plural))

        served = first_served(row, list_at, self.versions.get(kind))
        if served is None:
            return []
        version, listed = served
        self.versions[kind] = version
        items = listed.get("items") or []
        for item in items:
            item.setdefault("apiVersion", f"{row.group}/{version}")
            item.setdefault("kind", kind)
        return items

    def list_all(self) -> list[Object]:
        return [obj for row in FLUX_KINDS for obj in self.list_kind(row.kind)]

    def patch(self, kind: str, namespace: str, name: str, body: Object) -> Object:
        row = BY_KIND[kind]
        version = self.versions.get(kind) or row.versions[0]
        return cast(
            Object,
            self.custom.patch_namespaced_custom_object(row.group, version, namespace, row.plural, name, body),
        )

    def get(self, kind: str, namespace: str, name: str, version: str) -> Object | None:
        row = BY_KIND[kind]
        try:
            return cast(
                Object,
                self.custom.get_namespaced_custom_object(row.group, version, namespace, row.plural, name),
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise


def read_stored(
    get: Callable[[str, str, str, str, str], object],
    row: FluxKind,
    namespace: str,
    name: str,
    versions: dict[str, str],
) -> Object | None:
    """One object as the API server stores it, read with ``get(group, version, namespace,
    plural, name)`` (the main resource or ``/status``) at the version that answered last, else
    each version the table knows; None when it does not exist. ``versions`` remembers, per kind,
    the version that answered."""
    served = first_served(
        row, lambda version: get(row.group, version, namespace, row.plural, name), versions.get(row.kind)
    )
    if served is None:
        return None
    versions[row.kind], obj = served
    return cast(Object, obj)
