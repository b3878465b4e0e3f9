"""What a status write of a gated Flux object becomes while the object is held (pure).

Sources and ImagePolicies keep serving what they served: a write that would change
``status.artifact`` or the chosen image gets the stored one back, and ``Blocked`` says what
waits. Kustomizations and HelmReleases show ``Ready=False``/``Approved=False`` with reason
GateClosed while new content waits (the write that records the attempt itself is denied by
the validating webhook: admission.core.changes). docs/design.md, "Hold points".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from admission.core import content
from admission.core import kinds
from admission.core import names
from admission.core.decision import Hold

REMOVE = object()  # a status field the rewrite removes


@dataclass(frozen=True)
class Held:
    """Why an object is held, in the words its conditions use."""

    clauses: tuple[str, ...]  # "gate 'ns/a' is closed", or a suspension's reason
    message: str  # the decision's message (Ready's on a held Kustomization or HelmRelease)


def held_by(holds: list[Hold], message: str) -> Held:
    """The clauses of the holds, in order, once each."""
    clauses: dict[str, None] = {}
    for hold in holds:
        for state in hold.closed:
            clauses.setdefault(content.gate_clause(state.key))
        if hold.suspension:
            clauses.setdefault(hold.suspension)
    return Held(tuple(clauses), message)


def _content_fields(row: kinds.FluxKind) -> tuple[str, ...]:
    if row.content == kinds.ARTIFACT:
        return (names.ARTIFACT_FIELD,)
    return (names.LATEST_REF_FIELD, names.LATEST_IMAGE_FIELD)


def _keep_content(row: kinds.FluxKind, old: dict | None, new: dict, held: Held | None,
                  now: datetime) -> dict[str, object]:
    status, stored = content.status_of(new), content.status_of(old)
    conditions = content.conditions_of(new)
    changes: dict[str, object] = {}
    waits = None
    if held is not None:
        carried = content.new_content(row.kind, old, new)
        if carried is not None:
            waits = carried[0]
            for field in _content_fields(row):
                if stored.get(field) != status.get(field):
                    changes[field] = stored[field] if field in stored else REMOVE
        else:  # a write that carries no new content: what waited still waits
            previous = content.holding_condition(new, row.kind) or content.holding_condition(old, row.kind)
            parsed = content.parse_message(previous.get("message", "")) if previous else None
            waits = parsed[1] if parsed else None
    if waits is not None:
        serves = content.served_revision(row.kind, old if changes else new)
        message = content.blocked_message(held.clauses, waits, serves)
        conditions = content.with_condition(conditions, names.BLOCKED_CONDITION, "True",
                                            names.GATE_CLOSED_REASON, message, now)
        ready = content.condition({"status": {"conditions": conditions}}, names.READY_CONDITION)
        # Ready's status is never changed (helm-controller reads it), but its message must not
        # say the source serves what waits.
        if ready is not None and waits in str(ready.get("message") or "") and ready.get("message") != message:
            conditions = [dict(c, message=message) if c is ready else c for c in conditions]
    else:
        conditions = content.without_condition(conditions, names.BLOCKED_CONDITION)
    if conditions != content.conditions_of(new):
        changes["conditions"] = conditions
    return changes


def _show_approval(row: kinds.FluxKind, old: dict | None, new: dict, held: Held | None,
                   now: datetime, upstream: tuple[str, str] | None) -> dict[str, object]:
    conditions = content.conditions_of(new)
    pending = None
    if held is not None:
        pending = content.new_content(row.kind, old, new) or content.recorded_attempt(row.kind, new) or upstream
    if pending is not None:
        waits, serves = pending
        conditions = content.with_condition(
            conditions, names.READY_CONDITION, "False", names.GATE_CLOSED_REASON,
            f"{held.message}; {waits} waits, serving {serves}", now)
        conditions = content.with_condition(
            conditions, names.APPROVED_CONDITION, "False", names.GATE_CLOSED_REASON,
            content.approval_message(held.clauses, waits, serves), now)
    else:
        conditions = content.without_condition(conditions, names.APPROVED_CONDITION)
    return {"conditions": conditions} if conditions != content.conditions_of(new) else {}


def rewrite_status(kind: str, old: dict | None, new: dict, held: Held | None, now: datetime,
                   upstream: tuple[str, str] | None = None) -> dict[str, object]:
    """The status fields a status UPDATE must change (``REMOVE`` to drop one): none when the
    object is not held and carries none of our conditions. ``upstream`` is ``(waits, serves)``
    when the source a Kustomization or HelmRelease applies serves content it has not applied."""
    row = kinds.BY_KIND.get(kind)
    if row is None or row.hold_condition is None or not isinstance(new, dict):
        return {}
    if held is None:  # the common case, kept short: only our condition, if any, goes
        conditions = content.conditions_of(new)
        kept = content.without_condition(conditions, row.hold_condition)
        return {"conditions": kept} if len(kept) != len(conditions) else {}
    if row.keeps_content:
        return _keep_content(row, old, new, held, now)
    if row.records_attempts:
        return _show_approval(row, old, new, held, now, upstream)
    return {}
