"""The one table of the Flux kinds we gate: webhook rules, RBAC, listing and tests follow from it."""

from __future__ import annotations

from dataclasses import dataclass

from admission.core import names

# What new content looks like in a kind's status, i.e. where a closed gate can hold it
# (docs/design.md, "Hold points"). None: only edits of the object itself are gated.
ARTIFACT = "artifact"  # a source serves status.artifact


@dataclass(frozen=True)
class FluxKind:
    """One gated kind: its API coordinates and the status field that carries new content."""

    kind: str
    group: str
    plural: str
    versions: tuple[str, ...]  # served versions we know, newest first; the first served is used
    content: str | None = None

    @property
    def source(self) -> bool:
        return self.content == ARTIFACT


FLUX_KINDS: tuple[FluxKind, ...] = (
    FluxKind("Kustomization", names.KUSTOMIZE_GROUP, "kustomizations", ("v1", "v1beta2", "v1beta1")),
    FluxKind("HelmRelease", names.HELM_GROUP, "helmreleases", ("v2", "v2beta2", "v2beta1")),
    FluxKind("GitRepository", names.SOURCE_GROUP, "gitrepositories", ("v1", "v1beta2"), ARTIFACT),
    FluxKind("OCIRepository", names.SOURCE_GROUP, "ocirepositories", ("v1", "v1beta2"), ARTIFACT),
    FluxKind("HelmRepository", names.SOURCE_GROUP, "helmrepositories", ("v1", "v1beta2"), ARTIFACT),
    FluxKind("HelmChart", names.SOURCE_GROUP, "helmcharts", ("v1", "v1beta2"), ARTIFACT),
    FluxKind("Bucket", names.SOURCE_GROUP, "buckets", ("v1", "v1beta2"), ARTIFACT),
)

BY_KIND: dict[str, FluxKind] = {k.kind: k for k in FLUX_KINDS}
_BY_GROUP_KIND: dict[tuple[str, str], FluxKind] = {(k.group, k.kind): k for k in FLUX_KINDS}
SOURCE_KINDS = frozenset(k.kind for k in FLUX_KINDS if k.source)


def lookup(group: str, kind: str) -> FluxKind | None:
    """The table's row for ``group``/``kind``, or None when we do not gate it."""
    return _BY_GROUP_KIND.get((group, kind))


def is_gated_kind(group: str, kind: str) -> bool:
    """Whether objects of this group and kind are gated."""
    return (group, kind) in _BY_GROUP_KIND


def resources_by_group() -> dict[str, tuple[str, ...]]:
    """Plural resource names per API group, in table order: webhook rules and RBAC."""
    out: dict[str, tuple[str, ...]] = {}
    for k in FLUX_KINDS:
        out[k.group] = out.get(k.group, ()) + (k.plural,)
    return out


def webhook_resources(validating: bool) -> dict[str, list[str]]:
    """The resources each webhook must be registered for, per API group. Both see every main
    resource; the mutating webhook sees every ``/status`` (status.suspended), the validating
    one only those whose status carries new content."""
    out: dict[str, list[str]] = {}
    for k in FLUX_KINDS:
        out.setdefault(k.group, []).append(k.plural)
        if not validating or k.content is not None:
            out[k.group].append(f"{k.plural}/status")
    return out
