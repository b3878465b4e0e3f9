"""What the webhooks answer to a write of a Gate whose approvals change (pure): refused when an
approval is malformed, else the approver stamped (mutating) and checked (validating).

The API server calls these entries only when an approval annotation is new or changed
(admission.core.admission.matching), so opening and closing a gate never depends on the webhook. A write
that adds an approval and loosens ``spec.approvals`` at once is refused; an approval is stamped
with the stricter of the policies before and after the write, and counts only under that one
or a stricter one (``approvals.does_not_count``), so a later write lowering the policy, which
these entries never see, cannot make it count either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime

from admission.core.admission.decision import ALLOWED, Context, Decision
from admission.core.admission.review import AdmissionRequest
from admission.core.base import names
from admission.core.base.objects import Object, metadata
from admission.core.base.objects import annotations as annotations_of
from admission.core.gates import approvalrecord, approvals, gatespec


def _refused(gate: Object, problems: list[str]) -> Decision:
    meta = metadata(gate)
    message = (
        f"{names.GATE_KIND} {meta.get('namespace') or ''}/{meta.get('name') or ''}: approval refused: "
        + "; ".join(problems)
    )
    return Decision(allowed=False, gated=True, change="approval", message=message)


def _recorded(gate: Object, keys: list[str], values: dict[str, str]) -> Decision:
    found = []
    for key in keys:
        try:
            found.append(approvals.parse(key, values[key]))
        except ValueError:
            continue
    found = [replace(a, unverified=None) for a in found]  # sealed here, or checked just before
    return Decision(allowed=True, gated=True, change="approval", approved=approvals.describe(found) or None)


def _policy(gate: Object) -> approvals.Policy:
    spec = gate.get("spec")
    return approvals.parse_policy(spec if isinstance(spec, dict) else {})[0]


def judge(request: AdmissionRequest, context: Context, stamping: bool) -> tuple[Decision, dict[str, str]]:
    """The decision on a Gate write, and (``stamping``: the mutating webhook) the values its new
    or changed approvals must be recorded with: ``by`` the user the API server authenticated,
    ``at`` now, sealed for this Gate and key with the server's key. The validating webhook
    (``stamping`` False) sees the stamped values, and refuses any whose seal does not verify,
    whose ``at`` is not now, or whose ``by`` is not the writer's: an approval nobody stamped, or
    one stamped earlier and written again while the mutating entry was absent, is never recorded.
    A Gate being created has no uid yet to seal for: it is approved once it exists."""
    new, old = request.get("object"), request.get("oldObject")
    if request["operation"] not in ("CREATE", "UPDATE") or not isinstance(new, dict):
        return ALLOWED, {}
    written = annotations_of(new)
    keys = approvals.changed(annotations_of(old), written)
    if not keys:
        return ALLOWED, {}
    policy = _policy(new)
    before = _policy(old) if isinstance(old, dict) else policy
    loosened = before.loosened_by(policy)
    if loosened:
        problems = [
            f"this write loosens spec.approvals ({loosened}): change the policy in a write of its own "
            "(approvals given under the stricter one then stop counting), then approve"
        ]
        return _refused(new, problems), {}
    policy = before.stricter(policy)
    problems = [f"{key}: {why}" for key in keys if (why := approvals.refuse(written[key], policy))]
    problems += approvalrecord.refusals(
        old if isinstance(old, dict) else None, new, keys, context.now, stamped=not stamping
    )
    secret, uid = context.settings.approval_key, str(metadata(new).get("uid") or "")
    user = request["userInfo"].get("username", "")
    relays = context.settings.approval_relays
    if request["operation"] == "CREATE":
        problems.append("a Gate is approved once it exists: create it, then approve")
    elif not secret:
        problems.append("this server holds no approval key: it cannot record approvals that count")
    elif not stamping:  # every reason at once: an unsealed value is said to be one, whatever else
        problems += _not_stamped_by_this_write(
            keys, written, (secret, uid), user, relays, policy, context.now
        )
    if problems:
        return _refused(new, problems), {}
    if not stamping or secret is None:  # (no key: refused above)
        return _recorded(new, keys, written), {}
    expiry = gatespec.approval_expiry(new)
    stamped = {
        key: approvals.stamp(
            written[key], user, context.now, expiry, relays, (secret, uid, key), under=policy
        )
        for key in keys
    }
    return _recorded(new, keys, stamped), stamped


def _not_stamped_by_this_write(
    keys: list[str],
    written: Mapping[str, object],
    sealed_for: tuple[bytes, str],
    user: str,
    relays: frozenset[str],
    policy: approvals.Policy,
    now: datetime,
) -> list[str]:
    """Why the stamped values the validating webhook sees were not stamped by the mutating one
    in this very write: a seal that does not verify, an ``at`` that is not now, a ``by`` that is
    not the writer, a ``required`` that is not the policy's."""
    secret, uid = sealed_for
    problems = []
    for key in keys:
        try:
            found = approvals.parse(key, written[key], uid, secret)
        except ValueError as err:
            problems.append(f"{key}: {err}")
            continue
        if found.unverified:
            problems.append(f"{key}: not recorded by the approval webhook ({found.unverified})")
        elif abs(found.at - now) > approvals.STAMP_SKEW:
            problems.append(f"{key}: at {found.row()['at']} is not now: it was not stamped by this write")
        elif found.by != user and not (user in relays and found.by.endswith(f" via {user}")):
            problems.append(f"{key}: by {found.by!r} is not who wrote it ({user!r})")
        if found.required != policy.required:
            problems.append(
                f"{key}: required {found.required} is not the gate's spec.approvals.required "
                f"({policy.required})"
            )
    return problems
