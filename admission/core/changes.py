"""What counts as a change that a closed gate holds back (the table of SPEC §5)."""

from __future__ import annotations

from typing import Callable

from admission.core import kinds
from admission.core import names
from admission.core.references import Policy, loosens, policy_of

# Fields of spec that are not desired state: suspending is always allowed, and gate
# references are judged as policy (tightening always passes, loosening is held).
_NOT_DESIRED_STATE = ("suspend", "gates")


def _spec(obj: dict | None) -> dict:
    spec = obj.get("spec") if isinstance(obj, dict) else None
    if not isinstance(spec, dict):
        return {}
    return {k: v for k, v in spec.items() if k not in _NOT_DESIRED_STATE}


def _artifact(obj: dict | None) -> tuple[object, object]:
    status = obj.get("status") if isinstance(obj, dict) else None
    artifact = status.get("artifact") if isinstance(status, dict) else None
    if not isinstance(artifact, dict):
        return None, None
    return artifact.get("revision"), artifact.get("digest")


def gated_change(kind: str, operation: str, sub_resource: str, old: dict | None, new: dict | None,
                 policies: Callable[[], tuple[Policy, Policy]] | None = None) -> str | None:
    """Describe the change a held object may not make, or None when it is never gated.
    ``policies()`` gives those of ``old`` and ``new`` when the caller keeps them."""
    if operation == "DELETE" and not sub_resource:
        return "deletion"
    if operation == "CREATE" and not sub_resource:
        return "creation"
    if operation != "UPDATE":
        return None
    if sub_resource == "status":
        if kind in kinds.SOURCE_KINDS:
            before, after = _artifact(old), _artifact(new)
            if before != after:
                return f"artifact change from {before[0] or before[1]!r} to {after[0] or after[1]!r}"
        return None
    if sub_resource:
        return None
    if _spec(old) != _spec(new):
        return "spec change"
    return loosens(*(policies() if policies else (policy_of(old), policy_of(new))))
