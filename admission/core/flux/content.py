"""What a Flux object's status says it serves and what new content waits, by kind (FLUX-WRITES.md).

Each function looks up the kind's content (admission.core.flux.contentkinds) and asks it. Pure:
reads plain dicts. ``waiting(obj)`` tells any reader (kubectl gate, the controller) what
a held object waits for, from the condition the webhook wrote (admission.core.flux.holdmessage).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from admission.core.base import names
from admission.core.base.objects import Object, mapping, metadata, namespace_of
from admission.core.flux import contentkinds, holdmessage, kinds
from admission.core.flux.conditions import holding_condition
from admission.core.flux.contentkinds import (
    NOTHING,
    ContentKind,
    generated_chart_name,
    generated_chart_namespace,
)
from admission.core.flux.holdmessage import NewContent

Get = Callable[[str, str, str], "Object | None"]  # (kind, namespace, name) -> the stored object
MAX_TEXT = contentkinds.MAX_TEXT  # a revision longer than this is cut in messages (display only)


@dataclass(frozen=True)
class Waiting:
    """What waits for a held object and what it serves meanwhile, read from its conditions."""

    kind: str
    waits: str
    serves: str
    gates: tuple[str, ...]  # the closed gates named in the message ("ns/name")
    message: str


def of(kind: str) -> ContentKind | None:
    """The kind of new content objects of ``kind`` carry (admission.core.flux.contentkinds), or None."""
    row = kinds.BY_KIND.get(kind)
    return row.content if row is not None else None


# ---- by a kind's name, for readers of stored objects (the controller, the command line): each asks
# the kind's content (admission.core.flux.contentkinds). The admission path has the kind's row
# (core.admission.admitted) and asks its content itself. ------------------------------------------


def served_revision(kind: str, obj: Object | None) -> str:
    """What the object serves (sources, ImagePolicy) or last applied (Kustomization, HelmRelease)."""
    found = of(kind)
    return found.serves(obj) if found is not None else NOTHING


def new_content(kind: str, old: Object | None, new: Object | None) -> NewContent | None:
    """``(waits, serves)`` when this status write carries new content, the change a closed gate
    holds: a source's artifact (revision or digest), an ImagePolicy's image, a Kustomization's
    ``lastAttemptedRevision`` moving to a revision other than its ``lastAppliedRevision``, a
    HelmRelease's ``lastAttempted*`` moving to values other than ``history[0]``'s."""
    found = of(kind)
    return found.brings(old, new) if found is not None else None


def approval_of(obj: Object, waits: str, get: Get) -> str | None:
    """What an approval names to let ``waits`` through, as ``obj``'s hold message shows it
    waiting (``kubectl gate approve`` and ``pending``): the identity its hold point compares
    whole, or None when that cannot be known (a cut text; a chart whose source is not found)."""
    kind = obj.get("kind")
    found = of(kind) if isinstance(kind, str) else None
    if found is None:
        return None
    return found.approval_of(obj, waits, get, inherits_from(obj, get))


def attempt_of(kind: str, obj: Object | None) -> Object:
    """Only the attempt an object's status records (``{"status": {field: value}}``)."""
    found = of(kind)
    return found.attempt(obj) if found is not None else {"status": {}}


def upstream(kind: str, obj: Object | None) -> tuple[str, str, str] | None:
    """The source a Kustomization or HelmRelease applies: ``(kind, namespace, name)``."""
    found = of(kind)
    if found is None or not isinstance(obj, dict) or not isinstance(obj.get("spec"), dict):
        return None
    return found.upstream(obj)


def upstream_waits(
    kind: str, obj: Object | None, source_kind: str, source: Object | None
) -> NewContent | None:
    """``(waits, serves)`` when the source a Kustomization or HelmRelease applies serves
    content it has not applied yet (None when they agree, or we cannot tell)."""
    found = of(kind)
    return found.upstream_waits(obj, source_kind, source) if found is not None else None


def upstream_of(kind: str, obj: Object | None, get: Get) -> NewContent | None:
    """``upstream_waits`` for the source ``obj`` applies, looked up with ``get`` (a cache)."""
    found = of(kind)
    return upstream_from(found, obj, get) if found is not None else None


def upstream_from(found: ContentKind, obj: Object | None, get: Get) -> NewContent | None:
    """``upstream_of`` for an object whose kind of content the caller has (``FluxKind.content``)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("spec"), dict):
        return None
    ref = found.upstream(obj)
    if ref is None:
        return None
    return found.upstream_waits(obj, ref[0], get(*ref))


# ---- generated HelmCharts -----------------------------------------------------------------


def generator(chart: Object) -> tuple[str, str] | None:
    """(namespace, name) of the HelmRelease that generated ``chart``: helm-controller labels the
    chart it generates with its release (names.HELM_NAME_LABEL/NAMESPACE_LABEL, fluxcd/pkg/ssa
    SetOwnerLabels) and names it ``<namespace>-<name>``. A chart with the labels under another
    name was deployed by that release, not generated. The labels, not the name, say where the
    namespace ends (both may hold dashes), and the webhooks' matchConditions read the same
    (admission.core.admission.matching)."""
    meta = metadata(chart)
    labels = mapping(meta.get("labels"))
    namespace, name = labels.get(names.HELM_NAMESPACE_LABEL), labels.get(names.HELM_NAME_LABEL)
    if (
        isinstance(namespace, str)
        and isinstance(name, str)
        and meta.get("name") == generated_chart_name(namespace, name)
    ):
        return namespace, name
    return None


def generating_releases(chart: Object, get: Get) -> tuple[Object, ...]:
    """The HelmRelease whose generated HelmChart is ``chart`` (FLUX-WRITES.md: one per
    HelmRelease, in its sourceRef's namespace), checked against the HelmRelease found; a
    dictionary lookup."""
    owner = generator(chart)
    release = get("HelmRelease", *owner) if owner else None
    if release is None:
        return ()
    spec = mapping(release.get("spec"))
    if (
        isinstance(spec.get("chart"), dict)
        and not spec.get("chartRef")
        and generated_chart_namespace(release) == namespace_of(chart)
    ):
        return (release,)
    return ()


def inherits_from(obj: Object, get: Get) -> tuple[Object, ...]:
    """The objects whose gates ``obj`` inherits: a generated HelmChart's HelmRelease."""
    return generating_releases(obj, get) if obj.get("kind") == "HelmChart" else ()


# ---- what a held object shows ----------------------------------------------------------


def waiting(obj: Object | None) -> Waiting | None:
    """What waits for a held object, from the Blocked (sources, ImagePolicy) or Approved
    (Kustomization, HelmRelease) condition the webhook wrote; None when nothing waits."""
    kind = obj.get("kind") if isinstance(obj, dict) else None
    if not isinstance(kind, str) or kind not in kinds.BY_KIND:
        return None
    found = holding_condition(obj, kind)
    if found is None:
        return None
    message = found.get("message")
    message = message if isinstance(message, str) else ""
    hold = holdmessage.parse(message)
    if hold is None:
        return Waiting(kind, "", served_revision(kind, obj), (), message)
    return Waiting(kind, hold.content.waits, hold.content.serves, hold.gates, message)
