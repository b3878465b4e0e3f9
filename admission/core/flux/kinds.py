"""The one table of the Flux kinds we gate: webhook rules, RBAC, listing and tests follow from it."""

from __future__ import annotations

from dataclasses import dataclass

from admission.core.base import names
from admission.core.flux.contentkinds import (
    ARTIFACT,
    ATTEMPTED_RELEASE,
    ATTEMPTED_REVISION,
    CHART_ARTIFACT,
    LATEST_IMAGE,
    NO_CONTENT,
    Artifact,
    ContentKind,
)


@dataclass(frozen=True)
class FluxKind:
    """One gated kind: its API coordinates and the kind of new content its status carries."""

    kind: str
    group: str
    plural: str
    versions: tuple[str, ...]  # served versions we know, newest first; the first served is used
    # Where a closed gate can hold new content (docs/design.md, "Hold points"); NO_CONTENT: only
    # edits of the object itself are gated.
    content: ContentKind = NO_CONTENT

    @property
    def source(self) -> bool:
        return isinstance(self.content, Artifact)

    @property
    def keeps_content(self) -> bool:
        """New content is rewritten back while held (sources, ImagePolicy): Blocked shows it."""
        return self.content.keeps

    @property
    def records_attempts(self) -> bool:
        """The write recording a new attempt is denied while held: Approved=False shows it."""
        return self.content.records_attempts

    @property
    def shows_denied_attempts(self) -> bool:
        """The webhook writes Approved=False itself after denying an attempt (off the admission
        path): a HelmRelease's attempt can carry content no source serves (a values digest), and
        only the denied write carries it (docs/design.md, "Hold points")."""
        return self.content.shows_denied_attempts

    @property
    def hold_condition(self) -> str | None:
        """The condition that says new content waits on a held object of this kind."""
        return self.content.hold_condition if self.content.holds else None


_SOURCE_VERSIONS = ("v1", "v1beta2")
_IMAGE_VERSIONS = ("v1", "v1beta2")

FLUX_KINDS: tuple[FluxKind, ...] = (
    FluxKind(
        "Kustomization",
        names.KUSTOMIZE_GROUP,
        "kustomizations",
        ("v1", "v1beta2", "v1beta1"),
        ATTEMPTED_REVISION,
    ),
    FluxKind(
        "HelmRelease", names.HELM_GROUP, "helmreleases", ("v2", "v2beta2", "v2beta1"), ATTEMPTED_RELEASE
    ),
    FluxKind("GitRepository", names.SOURCE_GROUP, "gitrepositories", _SOURCE_VERSIONS, ARTIFACT),
    FluxKind("OCIRepository", names.SOURCE_GROUP, "ocirepositories", _SOURCE_VERSIONS, ARTIFACT),
    FluxKind("HelmRepository", names.SOURCE_GROUP, "helmrepositories", _SOURCE_VERSIONS, ARTIFACT),
    FluxKind("HelmChart", names.SOURCE_GROUP, "helmcharts", _SOURCE_VERSIONS, CHART_ARTIFACT),
    FluxKind("Bucket", names.SOURCE_GROUP, "buckets", _SOURCE_VERSIONS, ARTIFACT),
    # Serves an artifact, but its producer (source-watcher) server-side applies status with force
    # and garbage-collects old artifacts without reading the stored status: one written back
    # could name a deleted file. Only edits are gated (docs/design.md, "Hold points").
    FluxKind("ExternalArtifact", names.SOURCE_GROUP, "externalartifacts", ("v1",)),
    FluxKind("ImagePolicy", names.IMAGE_GROUP, "imagepolicies", _IMAGE_VERSIONS, LATEST_IMAGE),
    FluxKind("ImageRepository", names.IMAGE_GROUP, "imagerepositories", _IMAGE_VERSIONS),
    FluxKind("ImageUpdateAutomation", names.IMAGE_GROUP, "imageupdateautomations", _IMAGE_VERSIONS),
)

BY_KIND: dict[str, FluxKind] = {k.kind: k for k in FLUX_KINDS}
BY_GROUP_KIND: dict[tuple[str, str], FluxKind] = {(k.group, k.kind): k for k in FLUX_KINDS}
SOURCE_KINDS = frozenset(k.kind for k in FLUX_KINDS if k.source)
# What the webhook looks up (never per review from the API server: a watch cache, e.g.
# admission.kube.fluxcache): what each source serves, and HelmReleases, whose gates their
# generated HelmCharts inherit.
CACHED_KINDS = SOURCE_KINDS | {"ExternalArtifact", "HelmRelease"}  # what consumers' sources serve
# Whose status the webhook patches (``get`` and ``patch`` on ``<plural>/status``) to show a
# denied attempt: admission.kube.attempts.
ATTEMPT_SHOWING_KINDS = frozenset(k.kind for k in FLUX_KINDS if k.shows_denied_attempts)
# What the webhook reads one object at a time (``get`` on the main resource), off the admission
# path, before it writes a denial Event about it (a review only names the object):
# admission.kube.events.
EVENT_KINDS = frozenset(BY_KIND)


def content_of(kind: object) -> ContentKind:
    """The content objects of ``kind`` carry, for readers of stored objects, which name their
    kind (the controller, the command line): NO_CONTENT for a kind we gate only edits of, or
    do not gate. The admission path has the kind's row (core.admission.admitted)."""
    row = BY_KIND.get(kind) if isinstance(kind, str) else None
    return row.content if row is not None else NO_CONTENT


def lookup(group: str, kind: str) -> FluxKind | None:
    """The table's row for ``group``/``kind``, or None when we do not gate it."""
    return BY_GROUP_KIND.get((group, kind))


def is_gated_kind(group: str, kind: str) -> bool:
    """Whether objects of this group and kind are gated."""
    return (group, kind) in BY_GROUP_KIND


def resources_by_group() -> dict[str, tuple[str, ...]]:
    """Plural resource names per API group, in table order: webhook rules and RBAC."""
    out: dict[str, tuple[str, ...]] = {}
    for k in FLUX_KINDS:
        out[k.group] = out.get(k.group, ()) + (k.plural,)
    return out
