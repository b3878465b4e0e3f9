"""What a held Flux object waits for, what an approval names to let it through, and which
HelmRelease generated a HelmChart (FLUX-WRITES.md).

What a kind's content says of an object is asked of the kind's value itself
(``FluxKind.content``; ``kinds.content_of`` for a stored object). Pure: reads plain dicts.
``waiting(obj)`` tells any reader (kubectl gate, the controller) what a held object waits for,
from the condition the webhook wrote (admission.core.flux.holdmessage).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from admission.core.base import names
from admission.core.base.objects import Object, mapping, metadata, namespace_of
from admission.core.flux import contentkinds, holdmessage, kinds
from admission.core.flux.conditions import holding_condition
from admission.core.flux.sourcerefs import generated_chart_name, generated_chart_namespace

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


def approval_of(obj: Object, waits: str, get: Get) -> str | None:
    """What an approval names to let ``waits`` through, as ``obj``'s hold message shows it
    waiting (``kubectl gate approve`` and ``pending``): the identity its hold point compares
    whole, or None when that cannot be known (a cut text; a chart whose source is not found)."""
    found = kinds.content_of(obj.get("kind"))
    if not found.holds:
        return None
    return found.approval_of(obj, waits, get, inherits_from(obj, get))


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
        return Waiting(kind, "", kinds.BY_KIND[kind].content.serves(obj), (), message)
    return Waiting(kind, hold.content.waits, hold.content.serves, hold.gates, message)
