"""The two admission handlers, validate (enforce or audit) and mutate (patches): HTTP-shaped answers to the core's verdicts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from admission.core.admission import approvalreview, holdpoints, matching, mutation, togglereview
from admission.core.admission.decision import ALLOWED, Context, Decision, decide
from admission.core.admission.review import AdmissionRequest, AdmissionResponse
from admission.core.base import names
from admission.core.base.objects import annotations as annotations_of
from admission.webhook.review import allowed, denied, patched


@dataclass(frozen=True)
class Outcome:
    """A handler's answer, and the decision behind it for logs and metrics."""

    response: AdmissionResponse
    decision: Decision
    patch: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None  # the handler failed: why (the response is then fail-open or fail-closed)


class Handler(Protocol):
    """One shape for both endpoints: a well-formed request and what to judge it with, in; an answer out."""

    def __call__(self, request: AdmissionRequest, context: Context, /) -> Outcome: ...


def _unconcerned() -> Outcome:
    """The answer to a request the API server would not send us (matching.concerns): on an
    API server without matchConditions it comes anyway, and must be answered as if judged."""
    return Outcome(allowed(), ALLOWED)


def _audit_annotations(decision: Decision) -> dict[str, str]:
    if decision.exempt:
        return {"exempt": decision.exempt}
    if decision.held:
        return {"held": decision.message or "", "mode": decision.mode}
    return {}


def validate(request: AdmissionRequest, context: Context) -> Outcome:
    """Deny a held change (enforce), or allow it with a warning and an audit record (audit)."""
    if not matching.concerns(matching.VALIDATE, request):
        return _unconcerned()
    return judge_validation(request, context)


def _is_gate(request: AdmissionRequest) -> bool:
    kind = request["kind"]
    return (kind.get("group"), kind.get("kind")) == (names.GATING_GROUP, names.GATE_KIND)


def judge_validation(request: AdmissionRequest, context: Context) -> Outcome:
    """``validate`` for a request that concerns us (what any request would get, exemptions aside)."""
    if _is_gate(request):  # its approvals: refused when malformed or not stamped by the writer
        decision, _ = approvalreview.judge(request, context, stamping=False)
        return Outcome(
            allowed() if decision.allowed else denied(decision.message or "approval refused"), decision
        )
    decision = decide(request, context)
    if not decision.allowed:
        return Outcome(denied(decision.message or "held by a closed gate"), decision)
    warnings = [f"{names.AUDIT_WARNING}{decision.message}"] if decision.held else None
    return Outcome(allowed(warnings=warnings, audit=_audit_annotations(decision)), decision)


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _annotation_ops(obj: dict[str, Any], annotations: dict[str, str]) -> list[dict[str, Any]]:
    if not annotations:
        return []
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        return [{"op": "add", "path": "/metadata", "value": {"annotations": annotations}}]
    if not isinstance(metadata.get("annotations"), dict):
        return [{"op": "add", "path": "/metadata/annotations", "value": annotations}]
    return [
        {"op": "add", "path": f"/metadata/annotations/{_pointer(key)}", "value": value}
        for key, value in annotations.items()
    ]


def _field_ops(changes: dict[str, object], status: object) -> list[dict[str, Any]]:
    if not changes:
        return []
    if not isinstance(status, dict):
        kept = {f: v for f, v in changes.items() if v is not holdpoints.REMOVE}
        return [{"op": "add", "path": "/status", "value": kept}] if kept else []
    ops: list[dict[str, Any]] = []
    for key, value in changes.items():
        if value is holdpoints.REMOVE:
            if key in status:
                ops.append({"op": "remove", "path": f"/status/{_pointer(key)}"})
        else:
            ops.append({"op": "add", "path": f"/status/{_pointer(key)}", "value": value})
    return ops


def _toggle_ops(request: AdmissionRequest, context: Context) -> list[dict[str, Any]]:
    obj = request.get("object") or {}
    current = annotations_of(obj)
    ops: list[dict[str, Any]] = []
    for key, value in togglereview.judge(request, context).items():
        if value is not None:
            ops += _annotation_ops(obj, {key: value})
        elif key in current:
            ops.append({"op": "remove", "path": f"/metadata/annotations/{_pointer(key)}"})
    return ops


def mutate(request: AdmissionRequest, context: Context) -> Outcome:
    """On status writes: status.suspended, and the hold points (a held source or ImagePolicy
    keeps what it serves; Blocked, Approved and Ready say what waits). On main-resource writes:
    the audit record of an audited hold. Mutation never blocks: validation enforces."""
    if not matching.concerns(matching.MUTATE, request):
        return _unconcerned()
    return judge_mutation(request, context)


def judge_mutation(request: AdmissionRequest, context: Context) -> Outcome:
    """``mutate`` for a request that concerns us (what any request would get)."""
    if _is_gate(request):  # new or changed approvals: the approver the API server authenticated
        decision, stamped = approvalreview.judge(request, context, stamping=True)
        if not decision.allowed:
            return Outcome(denied(decision.message or "approval refused"), decision)
        ops = [
            {"op": "add", "path": f"/metadata/annotations/{_pointer(key)}", "value": value}
            for key, value in stamped.items()
        ]
        ops += _toggle_ops(request, context)  # who opened or closed it, for the record
        return Outcome(patched(ops), decision, ops)
    found = mutation.judge(request, context)
    obj = request.get("object") or {}  # (none on a DELETE: then nothing changes)
    ops = _annotation_ops(obj, found.annotations) + _field_ops(found.status, obj.get("status"))
    return Outcome(patched(ops), found.decision, ops)
