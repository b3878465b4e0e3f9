"""The two admission handlers: validate (enforce or audit) and mutate (patches)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable

import orjson

from admission.core import kinds
from admission.core import names
from admission.core.decision import Decision, Lookup, Settings, decide
from admission.core.references import suspension_of
from admission.webhook.review import AdmissionRequest, AdmissionResponse, allowed, denied, patched
from admission.core.timefmt import format_time


@dataclass(frozen=True)
class Outcome:
    """A handler's answer, and the decision behind it for logs and metrics."""

    response: AdmissionResponse
    decision: Decision
    patch: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None  # the handler failed: why (the response is then fail-open or fail-closed)


Handler = Callable[[AdmissionRequest, Lookup, datetime, Settings], Outcome]


def _audit_annotations(decision: Decision) -> dict[str, str]:
    if decision.exempt:
        return {"exempt": decision.exempt}
    if decision.held:
        return {"held": decision.message or "", "mode": decision.mode}
    return {}


def validate(request: AdmissionRequest, lookup: Lookup, now: datetime, settings: Settings) -> Outcome:
    """Deny a held change (enforce), or allow it with a warning and an audit record (audit)."""
    decision = decide(request, lookup, now, settings)
    if not decision.allowed:
        return Outcome(denied(decision.message or "held by a closed gate"), decision)
    warnings = [f"gate audit: change would be denied in enforce mode: {decision.message}"] if decision.held else None
    return Outcome(allowed(warnings=warnings, audit=_audit_annotations(decision)), decision)


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _status_patch(obj: dict, now: datetime) -> list[dict[str, Any]]:
    want = suspension_of(obj, now).suspended
    status = obj.get("status")
    if not isinstance(status, dict):
        return [{"op": "add", "path": "/status", "value": {"suspended": want}}]
    if status.get("suspended") is want:
        return []
    return [{"op": "add", "path": "/status/suspended", "value": want}]


def audit_record(request: AdmissionRequest, decision: Decision, now: datetime) -> str:
    """The value of the audit annotation: who tried what, when, and why it was held."""
    return orjson.dumps({
        "time": format_time(now),
        "user": request["userInfo"].get("username", ""),
        "operation": request["operation"],
        "change": decision.change,
        "message": decision.message,
    }).decode()


def _audit_patch(obj: dict, record: str) -> list[dict[str, Any]]:
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        return [{"op": "add", "path": "/metadata", "value": {"annotations": {names.AUDIT_ANNOTATION: record}}}]
    if not isinstance(metadata.get("annotations"), dict):
        return [{"op": "add", "path": "/metadata/annotations", "value": {names.AUDIT_ANNOTATION: record}}]
    return [{"op": "add", "path": f"/metadata/annotations/{_pointer(names.AUDIT_ANNOTATION)}", "value": record}]


def mutate(request: AdmissionRequest, lookup: Lookup, now: datetime, settings: Settings) -> Outcome:
    """Inject status.suspended on status writes; record audited holds on main-resource writes.

    Mutation never blocks: validation enforces.
    """
    kind = request["kind"]
    obj = request.get("object")
    if not kinds.is_gated_kind(kind["group"], kind["kind"]) or not isinstance(obj, dict):
        return Outcome(allowed(), Decision(allowed=True))
    sub_resource = request.get("subResource") or ""
    if sub_resource == "status" and request["operation"] == "UPDATE":
        ops = _status_patch(obj, now)
        return Outcome(patched(ops), Decision(allowed=True), ops)
    if sub_resource or request["operation"] not in ("CREATE", "UPDATE"):
        return Outcome(allowed(), Decision(allowed=True))
    decision = decide(request, lookup, now, settings)
    ops = _audit_patch(obj, audit_record(request, decision, now)) if decision.held and decision.allowed else []
    return Outcome(patched(ops), decision, ops)
