"""What a reader without the approval key (``kubectl gate``) may show of a Gate's approvals: an
approval is verified only where the Gate's status, written by the controller (which holds the
key), lists exactly that approval as verified (docs/decisions/0064)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from admission.core.gates import approvalseal
from admission.core.gates.approvals import UNVERIFIED, Approval


def vouched(gate: Mapping[str, object]) -> dict[str, dict[str, str]]:
    """The approvals the Gate's status lists as live, by id: those the controller, which holds
    the key, verified. What a reader without the key (``kubectl gate``) may show as verified,
    when the approval it reads is exactly the one listed there."""
    status = gate.get("status")
    rows = status.get("approvals") if isinstance(status, dict) else None
    return {
        str(r["id"]): {k: str(v) for k, v in r.items()}
        for r in rows or []
        if isinstance(r, dict) and isinstance(r.get("id"), str) and UNVERIFIED not in r
    }


NOT_VOUCHED = (
    "the Gate's status does not list it as verified: the controller, which holds the key, "
    "has not verified it (yet)"
)


def read_without_key(approvals: Iterable[Approval], gate: Mapping[str, object]) -> tuple[Approval, ...]:
    """``approvals`` as a reader without the key (``kubectl gate``) may show them: verified
    where the Gate's status lists exactly this approval as verified (``vouched``), else
    unverified, with the controller's reason when its status gives one."""
    listed = vouched(gate)
    status = gate.get("status")
    rows = status.get("unverifiedApprovals") if isinstance(status, dict) else None
    why = {str(r.get("id")): str(r.get(UNVERIFIED)) for r in rows or [] if isinstance(r, dict)}
    shown = []
    for a in approvals:
        if a.unverified != approvalseal.NO_KEY:
            shown.append(a)
            continue
        row = {k: str(v) for k, v in a.row().items() if k != UNVERIFIED}  # as vouched() reads the status
        if listed.get(row["id"]) == row:
            shown.append(replace(a, unverified=None))
        else:
            shown.append(replace(a, unverified=why.get(row["id"]) or NOT_VOUCHED))
    return tuple(shown)
