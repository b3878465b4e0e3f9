"""Half a release (pure): warnings for an object whose inputs are gated differently from it, so
that approving its content (or opening one gate) lands only part of a reviewed change
(docs/decisions/0057, "Half a release"). ``kubectl gate pending`` and ``kubectl gate check``
print them.

The inputs: the source a Kustomization or HelmRelease applies, what it ``dependsOn``, a
HelmRelease's ``valuesFrom`` (ConfigMaps and Secrets: no gate holds them, a change there waits
at the release as a new values digest: a chart approved with the old values does not land
with it), and the ImageUpdateAutomations an ImagePolicy feeds (an approved image lands as a
commit, which then waits at the Git source the automation pushes to, if that is gated).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from admission.core.base.objects import label, metadata, namespace_of
from admission.core.flux import content, kinds
from admission.core.flux.sourcerefs import generated_chart_name
from admission.core.gates.references import policy_of

Listing = Callable[
    [str, str], Iterable[dict[str, Any]]
]  # (kind, namespace) -> the objects of that kind there
VALUES_KINDS = ("ConfigMap", "Secret")


def _gates(obj: dict[str, Any] | None) -> list[str]:
    return sorted(r.key for r in policy_of(obj).refs) if obj is not None else []


def _shown(gates: list[str]) -> str:
    return ", ".join(gates) or "no gate"


def _spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, dict) else {}


def warnings(
    obj: dict[str, Any], get: content.Get, listing: Listing = lambda kind, namespace: ()
) -> list[str]:
    """Why approving ``obj``'s content may land only part of a change; [] when it would not."""
    kind, namespace = str(obj.get("kind") or ""), namespace_of(obj)
    own = _gates(obj)
    found = _inputs(kind, obj, namespace, own, get)
    if kind == "HelmRelease":
        found += _values_from(obj, namespace)
    if kind == "ImagePolicy":
        found += _automations(obj, namespace, get, listing)
    return found


def _inputs(kind: str, obj: dict[str, Any], namespace: str, own: list[str], get: content.Get) -> list[str]:
    inputs: list[tuple[str, tuple[str, str, str]]] = []
    source = kinds.content_of(kind).upstream(obj)
    if source is not None and not (
        source[0] == "HelmChart" and source[2] == generated_chart_name(namespace, metadata(obj).get("name"))
    ):
        inputs.append(("source", source))  # (a generated HelmChart inherits the release's gates)
    for dep in _spec(obj).get("dependsOn") or []:
        if isinstance(dep, dict) and isinstance(dep.get("name"), str):
            inputs.append(("dependency", (kind, str(dep.get("namespace") or namespace), dep["name"])))
    found = []
    for what, (input_kind, input_ns, input_name) in inputs:
        found_input = get(input_kind, input_ns, input_name)
        if found_input is None:  # not in the manifest, nor (offline) anywhere: how it is gated is unknown
            continue
        theirs = _gates(found_input)
        if theirs != own:
            found.append(
                f"its {what} {label(input_kind, input_ns, input_name)} is gated by {_shown(theirs)}, "
                f"it by {_shown(own)}: an approval here lands only what those gates let "
                "through, part of a change can land without the rest"
            )
    return found


def _values_from(release: dict[str, Any], namespace: str) -> list[str]:
    names = [
        label(ref["kind"], namespace, ref["name"])
        for ref in _spec(release).get("valuesFrom") or []
        if isinstance(ref, dict) and ref.get("kind") in VALUES_KINDS and isinstance(ref.get("name"), str)
    ]
    if not names:
        return []
    return [
        f"its values come from {', '.join(names)}, which no gate holds: a change there waits here as a "
        "new values digest, and a chart approved with the old values does not land with the new ones: "
        "approve the chart with the values that wait here"
    ]


def _selects(automation: dict[str, Any], policy: dict[str, Any]) -> bool:
    """Whether the automation's ``spec.policySelector`` takes this policy (no selector: every
    ImagePolicy of its namespace, as image-automation-controller does)."""
    selector = _spec(automation).get("policySelector")
    if not isinstance(selector, dict):
        return True
    labels = metadata(policy).get("labels")
    labels = labels if isinstance(labels, dict) else {}
    wanted = selector.get("matchLabels")
    if isinstance(wanted, dict) and any(labels.get(k) != v for k, v in wanted.items()):
        return False
    for rule in selector.get("matchExpressions") or []:
        if not isinstance(rule, dict):
            continue
        key, operator, values = rule.get("key"), rule.get("operator"), rule.get("values") or []
        present = key in labels
        if (
            (operator == "In" and labels.get(key) not in values)
            or (operator == "NotIn" and labels.get(key) in values)
            or (operator == "Exists" and not present)
            or (operator == "DoesNotExist" and present)
        ):
            return False
    return True


def _automations(policy: dict[str, Any], namespace: str, get: content.Get, listing: Listing) -> list[str]:
    found = []
    for automation in listing("ImageUpdateAutomation", namespace):
        if not isinstance(automation, dict) or not _selects(automation, policy):
            continue
        ref = _spec(automation).get("sourceRef")
        if not isinstance(ref, dict) or not isinstance(ref.get("name"), str):
            continue
        git = (str(ref.get("kind") or "GitRepository"), str(ref.get("namespace") or namespace), ref["name"])
        theirs = _gates(get(*git))
        if theirs:
            found.append(
                f"it feeds {label('ImageUpdateAutomation', namespace, metadata(automation).get('name'))}, "
                f"whose commits wait at {label(*git)}, gated by {_shown(theirs)}: an image approved here "
                "lands once that commit is let through there too"
            )
    return found
