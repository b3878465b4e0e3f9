"""What a status write of a gated Flux object becomes while the object is held (pure).

Sources and ImagePolicies keep serving what they served: a write that would change
``status.artifact`` or the chosen image gets the stored one back, and ``Blocked`` says what
waits. Kustomizations and HelmReleases show ``Ready=False``/``Approved=False`` with reason
GateClosed while new content waits (the write that records the attempt itself is denied by
the validating webhook: admission.core.changes; ``show_denied_attempt`` is what the webhook then
writes itself when only that write carried it). docs/design.md, "Hold points".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from admission.core import content
from admission.core import kinds
from admission.core import names
from admission.core.decision import Hold, Settings, describe, mode_of
from admission.core.jsonvalues import same

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


def enforced(kind: str, namespace: str, name: str, holds: list[Hold], settings: Settings) -> Held | None:
    """How an object with these ``holds`` is held, in its conditions' words: None when nothing
    holds it, or only audit-mode gates do (audit mode holds nothing; the validating webhook
    records the would-be hold)."""
    if not holds or mode_of(holds, settings) != "enforce":
        return None
    return held_by(holds, describe(kind, namespace, name, holds))


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
                if not same(stored.get(field, REMOVE), status.get(field, REMOVE)):
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
    if not same(conditions, content.conditions_of(new)):
        changes["conditions"] = conditions
    return changes


def _approval_conditions(conditions: list[dict], held: Held, waits: str, serves: str,
                         now: datetime) -> list[dict]:
    conditions = content.with_condition(
        conditions, names.READY_CONDITION, "False", names.GATE_CLOSED_REASON,
        f"{held.message}; {waits} waits, serving {serves}", now)
    return content.with_condition(
        conditions, names.APPROVED_CONDITION, "False", names.GATE_CLOSED_REASON,
        content.approval_message(held.clauses, waits, serves), now)


def _denied_attempt(kind: str, old: dict | None, new: dict, denied: tuple[str, str] | None) -> tuple[str, str] | None:
    """``(waits, serves)`` of an attempt the validating webhook denied: the one just denied
    (``denied``), else the one a stored Approved condition shows (the webhook wrote it after the
    denial: admission.kube.attempts). It goes once what waits is what the object applied, or
    when the controller reports Ready=True: it reconciled without it (say, the values went back)."""
    ready = content.condition(new, names.READY_CONDITION)
    if ready is not None and ready.get("status") == "True":
        return None
    if denied is not None:
        return denied
    shown = content.holding_condition(new, kind) or content.holding_condition(old, kind)
    parsed = content.parse_message(shown.get("message", "")) if shown else None
    if parsed is None:
        return None
    waits, serves = parsed[1], content.served_revision(kind, new)
    return None if waits == serves else (waits, serves)


def _show_approval(row: kinds.FluxKind, old: dict | None, new: dict, held: Held | None, now: datetime,
                   upstream: tuple[str, str] | None) -> dict[str, object]:
    conditions = content.conditions_of(new)
    pending = None
    if held is not None:
        pending = (content.new_content(row.kind, old, new) or content.recorded_attempt(row.kind, new) or upstream
                   or _denied_attempt(row.kind, old, new, None))
    if pending is not None:
        conditions = _approval_conditions(conditions, held, *pending, now)
    else:
        conditions = content.without_condition(conditions, names.APPROVED_CONDITION)
    return {"conditions": conditions} if not same(conditions, content.conditions_of(new)) else {}


def show_denied_attempt(kind: str, stored: dict | None, attempted: dict | None, held: Held | None, now: datetime,
                        upstream: tuple[str, str] | None = None) -> dict[str, object]:
    """The status changes that show, on ``stored`` (the object as it is now), the attempt a
    denied status write (``attempted``) recorded: Approved=False and Ready=False, GateClosed, the
    conditions ``rewrite_status`` then keeps on later writes while it holds. None (``{}``) when
    the kind does not need it, nothing is held or waits, or the conditions already say so."""
    row = kinds.BY_KIND.get(kind)
    if row is None or not row.shows_denied_attempts or held is None or not isinstance(stored, dict):
        return {}
    # The order of _show_approval, so the mutating webhook keeps what this writes on its way in.
    pending = (content.recorded_attempt(kind, stored) or upstream
               or _denied_attempt(kind, stored, stored, content.held_attempt(kind, attempted, stored)))
    if pending is None:
        return {}
    conditions = _approval_conditions(content.conditions_of(stored), held, *pending, now)
    return {"conditions": conditions} if not same(conditions, content.conditions_of(stored)) else {}


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
