"""What a status write of a gated Flux object becomes while the object is held (pure).

Sources and ImagePolicies keep serving what they served: a write that would change
``status.artifact`` or the chosen image gets the stored one back, and ``Blocked`` says what
waits. Kustomizations and HelmReleases show ``Ready=False``/``Approved=False`` with reason
GateClosed while new content waits (the write that records the attempt itself is denied by
the validating webhook: admission.core.admission.changes; ``show_denied_attempt`` is what the webhook then
writes itself when only that write carried it). docs/design.md, "Hold points".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from admission.core.admission.admitted import Admission
from admission.core.admission.decision import (
    ALLOWED,
    CONTENT,
    Context,
    Decision,
    Hold,
    Standing,
    judge_status,
)
from admission.core.base import names
from admission.core.base.jsonvalues import same
from admission.core.base.objects import Object, status_of
from admission.core.flux import holdmessage, kinds
from admission.core.flux.conditions import (
    conditions_of,
    find,
    holding_condition,
    with_condition,
    without_condition,
)
from admission.core.flux.contentkinds import ContentKind
from admission.core.flux.holdmessage import HoldMessage, NewContent
from admission.core.gates import approvals

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
            clauses.setdefault(holdmessage.gate_clause(state.key))
        if hold.suspension:
            clauses.setdefault(hold.suspension)
    return Held(tuple(clauses), message)


def enforced(stands: Standing) -> Held | None:
    """How an object that stands so is held, in its conditions' words: None when nothing holds
    it, or only audit-mode gates do (audit mode holds nothing; the validating webhook records
    the would-be hold)."""
    if not stands.held or stands.mode != names.ENFORCE:
        return None
    return held_by(list(stands.holds), stands.message)


def _keep_content(
    row: kinds.FluxKind,
    kept: ContentKind,
    old: Object | None,
    new: Object,
    held: Held | None,
    now: datetime,
    carried: NewContent | None,
) -> dict[str, object]:
    status, stored = status_of(new), status_of(old)
    conditions = conditions_of(new)
    changes: dict[str, object] = {}
    waits = None
    if held is not None:
        if carried is not None:
            waits = carried.waits
            for field in kept.fields:
                if not same(stored.get(field, REMOVE), status.get(field, REMOVE)):
                    changes[field] = stored[field] if field in stored else REMOVE
        else:  # a write that carries no new content: what waited still waits
            previous = holding_condition(new, row.kind) or holding_condition(old, row.kind)
            parsed = holdmessage.parse(previous.get("message", "")) if previous else None
            waits = parsed.content.waits if parsed else None
    if held is not None and waits is not None:
        serves = kept.serves(old if changes else new)
        message = HoldMessage.of(names.BLOCKED_CONDITION, held.clauses, NewContent(waits, serves)).format()
        conditions = with_condition(
            conditions, names.BLOCKED_CONDITION, "True", names.GATE_CLOSED_REASON, message, now
        )
        ready = find({"status": {"conditions": conditions}}, names.READY_CONDITION)
        # Ready's status is never changed (helm-controller reads it), but its message must not
        # say the source serves what waits.
        if ready is not None and waits in str(ready.get("message") or "") and ready.get("message") != message:
            conditions = [dict(c, message=message) if c is ready else c for c in conditions]
    else:
        conditions = without_condition(conditions, names.BLOCKED_CONDITION)
    if not same(conditions, conditions_of(new)):
        changes["conditions"] = conditions
    return changes


def _approval_conditions(
    conditions: list[Object], held: Held, pending: NewContent, now: datetime
) -> list[Object]:
    conditions = with_condition(
        conditions, names.READY_CONDITION, "False", names.GATE_CLOSED_REASON, pending.after(held.message), now
    )
    return with_condition(
        conditions,
        names.APPROVED_CONDITION,
        "False",
        names.GATE_CLOSED_REASON,
        HoldMessage.of(names.APPROVED_CONDITION, held.clauses, pending).format(),
        now,
    )


def _denied_attempt(
    kind: str, attempted: ContentKind, old: Object | None, new: Object, denied: NewContent | None
) -> NewContent | None:
    """``(waits, serves)`` of an attempt the validating webhook denied: the one just denied
    (``denied``), else the one a stored Approved condition shows (the webhook wrote it after the
    denial: admission.kube.attempts). It goes once what waits is what the object applied, or
    when the controller reports Ready=True: it reconciled without it (say, the values went back)."""
    ready = find(new, names.READY_CONDITION)
    if ready is not None and ready.get("status") == "True":
        return None
    if denied is not None:
        return denied
    shown = holding_condition(new, kind) or holding_condition(old, kind)
    parsed = holdmessage.parse(shown.get("message", "")) if shown else None
    if parsed is None:
        return None
    waits, serves = parsed.content.waits, attempted.serves(new)
    return None if waits == serves else NewContent(waits, serves)


def _show_approval(
    row: kinds.FluxKind,
    attempted: ContentKind,
    old: Object | None,
    new: Object,
    held: Held | None,
    now: datetime,
    carried: NewContent | None,
    upstream: NewContent | None,
) -> dict[str, object]:
    conditions = conditions_of(new)
    pending = None
    if held is not None:
        pending = (
            carried
            or attempted.recorded(new)
            or upstream
            or _denied_attempt(row.kind, attempted, old, new, None)
        )
    if held is not None and pending is not None:
        conditions = _approval_conditions(conditions, held, pending, now)
    else:
        conditions = without_condition(conditions, names.APPROVED_CONDITION)
    return {"conditions": conditions} if not same(conditions, conditions_of(new)) else {}


def show_denied_attempt(
    kind: str,
    stored: Object | None,
    attempted: Object | None,
    held: Held | None,
    now: datetime,
    upstream: NewContent | None = None,
) -> dict[str, object]:
    """The status changes that show, on ``stored`` (the object as it is now), the attempt a
    denied status write (``attempted``) recorded: Approved=False and Ready=False, GateClosed, the
    conditions ``rewrite_status`` then keeps on later writes while it holds. None (``{}``) when
    the kind does not need it, nothing is held or waits, or the conditions already say so."""
    row = kinds.BY_KIND.get(kind)
    if (
        row is None
        or not row.content.holds
        or not row.shows_denied_attempts
        or held is None
        or not isinstance(stored, dict)
    ):
        return {}
    # The order of _show_approval, so the mutating webhook keeps what this writes on its way in.
    shown = row.content
    pending = (
        shown.recorded(stored)
        or upstream
        or _denied_attempt(kind, shown, stored, stored, shown.held_attempt(attempted, stored))
    )
    if pending is None:
        return {}
    conditions = _approval_conditions(conditions_of(stored), held, pending, now)
    return {"conditions": conditions} if not same(conditions, conditions_of(stored)) else {}


def rewrite_status(
    row: kinds.FluxKind,
    old: Object | None,
    new: Object,
    held: Held | None,
    now: datetime,
    *,
    carried: NewContent | None,
    upstream: NewContent | None = None,
) -> dict[str, object]:
    """The status fields a status UPDATE must change (``REMOVE`` to drop one): none when the
    object is not held and carries none of our conditions. ``carried`` is what the write
    brings (``ContentKind.brings``); ``upstream`` is ``(waits, serves)`` when the source a
    Kustomization or HelmRelease applies serves content it has not applied."""
    if not row.content.holds or not isinstance(new, dict):
        return {}
    if held is None:  # the common case, kept short: only our condition, if any, goes
        conditions = conditions_of(new)
        kept = without_condition(conditions, row.content.hold_condition)
        return {"conditions": kept} if len(kept) != len(conditions) else {}
    if row.content.keeps:
        return _keep_content(row, row.content, old, new, held, now, carried)
    if row.content.records_attempts:
        return _show_approval(row, row.content, old, new, held, now, carried, upstream)
    return {}


@dataclass(frozen=True)
class StatusVerdict:
    """What the mutating webhook does to a status write at the hold points, and the decision behind it."""

    changes: dict[str, object]  # status fields to set (``REMOVE``: drop)
    decision: Decision
    suspended: bool | None = None  # the object's status.suspended as judged (None: not judged)


def judge_status_write(admission: Admission, context: Context) -> StatusVerdict:
    """The status fields a status write of a kind with content must change, and the decision:
    held (content rewritten back) only in enforce mode; audit mode holds nothing (the validating
    webhook records the would-be hold of the same write). Judged as the validating webhook
    judges it (``decision.judge_status``)."""
    row, old, new = admission.row, admission.old, admission.new
    if not row.content.holds or not isinstance(new, dict):
        return StatusVerdict({}, ALLOWED)
    write = judge_status(
        admission, context
    )  # what it carries, read once: approvals, the rewrite, the decision
    carried, now = write.carried, context.now
    stands = write.stands.value
    held = enforced(stands)
    if held is None:
        decision = (
            ALLOWED
            if not write.used
            else Decision(
                allowed=True, gated=True, held_what=CONTENT, approved=approvals.describe(write.used)
            )
        )
        return StatusVerdict(
            rewrite_status(row, old, new, None, now, carried=carried), decision, stands.suspended
        )
    upstream = (
        row.content.upstream_of(new, context.get) if row.content.records_attempts and context.get else None
    )
    changes = rewrite_status(row, old, new, held, now, carried=carried, upstream=upstream)
    if not row.content.keeps or carried is None:  # no content rewritten: nothing to log or count
        return StatusVerdict(changes, ALLOWED, stands.suspended)
    decision = Decision(
        allowed=True,
        gated=True,
        held=True,
        mode=names.ENFORCE,
        hold=stands.holds[-1],
        held_what=CONTENT,
        change=carried.as_change(),  # (the words of changes.ContentChange)
        message=carried.after(held.message),
    )
    return StatusVerdict(changes, decision, stands.suspended)
