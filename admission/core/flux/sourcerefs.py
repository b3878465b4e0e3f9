"""How one Flux object names another: a ``sourceRef``/``chartRef``, and the HelmChart
helm-controller generates for a HelmRelease (FLUX-WRITES.md). Pure: reads plain dicts."""

from __future__ import annotations

from admission.core.base.objects import Object, mapping, namespace_of

Ref = tuple[str, str, str]  # (kind, namespace, name)


def source_ref(ref: object, namespace: str) -> Ref | None:
    """A ``sourceRef``/``chartRef`` as ``(kind, namespace, name)``, in ``namespace`` unless it says another."""
    if (
        not isinstance(ref, dict)
        or not isinstance(ref.get("kind"), str)
        or not isinstance(ref.get("name"), str)
    ):
        return None
    return ref["kind"], str(ref.get("namespace") or namespace), ref["name"]


def generated_chart_namespace(release: Object) -> str:
    """Where helm-controller creates a HelmRelease's HelmChart: its sourceRef's namespace."""
    ref = mapping(mapping(mapping(mapping(release.get("spec")).get("chart")).get("spec")).get("sourceRef"))
    return str(ref.get("namespace") or namespace_of(release))


def generated_chart_name(release_namespace: object, release_name: object) -> str:
    """The name helm-controller gives the HelmChart it generates for a HelmRelease:
    ``<namespace>-<name>`` of the release (FLUX-WRITES.md)."""
    return f"{release_namespace}-{release_name}"
