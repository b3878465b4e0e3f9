"""What the mutating webhook writes on a gated Flux object, decided here (pure): the webhook only spells it as a JSON patch.

A status UPDATE gets ``status.suspended`` and the hold points' rewrite (admission.core.admission.holdpoints);
a CREATE or UPDATE of the object itself gets the audit record of a hold audit mode let through.
docs/decisions/0012-status-suspended-mutation.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

from admission.core.admission import holdpoints
from admission.core.admission.admitted import Admission, admission_of
from admission.core.admission.decision import ALLOWED, Context, Decision
from admission.core.admission.decision import judge as decision_of
from admission.core.admission.review import AdmissionRequest
from admission.core.base import names
from admission.core.base.objects import Object, status_of
from admission.core.base.timefmt import format_time
from admission.core.gates.references import suspension_of


@dataclass(frozen=True)
class Mutation:
    """The changes to one object, as plain data, and the decision behind them."""

    decision: Decision
    status: dict[str, object] = field(default_factory=dict)  # status fields to set (holdpoints.REMOVE: drop)
    annotations: dict[str, str] = field(default_factory=dict)  # annotations to set


NONE = Mutation(ALLOWED)  # nothing to change


def suspended_field(obj: Object, want: bool) -> dict[str, object]:
    """``status.suspended`` when it must change to ``want``: spec.suspend OR an active suspension."""
    # Absent says "not suspended" as false does (the CRD patch defaults it to false): the API
    # server does not call us for an unsuspended object without it (admission.core.admission.matching).
    current = status_of(obj).get("suspended", False)
    return {} if current is want else {"suspended": want}


def audit_record(admission: Admission, decision: Decision, now: datetime) -> str:
    """The value of the audit annotation: who tried what, when, and why it was held."""
    return json.dumps(
        {
            "time": format_time(now),
            "user": admission.user.name,
            "operation": admission.operation,
            "change": decision.change,
            "message": decision.message,
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )  # compact, as the webhook has always written it


def judge(request: AdmissionRequest, context: Context) -> Mutation:
    """What a request on a gated Flux kind changes: on a status UPDATE, ``status.suspended`` and
    the hold points (a held source or ImagePolicy keeps what it serves; Blocked, Approved and
    Ready say what waits); on the object's CREATE or UPDATE, the audit record of an audited hold."""
    admission = admission_of(request)
    if admission is None or not isinstance(admission.new, dict):
        return NONE
    obj = admission.new
    if admission.status_update:
        verdict = holdpoints.judge_status_write(admission, context) if admission.row.content.holds else None
        changes = verdict.changes if verdict is not None else {}
        # The verdict judged the suspension already; kinds without content are judged here.
        suspended = verdict.suspended if verdict is not None else None
        want = suspension_of(obj, context.now).suspended if suspended is None else suspended
        status = {**changes, **suspended_field(obj, want)}
        if status and not isinstance(obj.get("status"), dict):
            # A status written whole says suspended too: the property every status we patch keeps.
            status["suspended"] = want
        return Mutation(verdict.decision if verdict is not None else ALLOWED, status)
    if admission.sub_resource or admission.operation not in ("CREATE", "UPDATE"):
        return NONE
    decision = decision_of(admission, context)
    if not (decision.held and decision.allowed):
        return Mutation(decision)
    return Mutation(
        decision, annotations={names.AUDIT_ANNOTATION: audit_record(admission, decision, context.now)}
    )
