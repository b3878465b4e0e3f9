"""Who toggled a Gate, as the API server authenticated them (pure: the key is passed in;
docs/decisions/0096).

``requestedBy`` is whatever the client wrote. Our mutating webhook, on a Gate write that changes
a toggle (the open or close annotation), stamps ``toggledBy``: the writer's username and groups
as the API server gave them, when, and a seal (``approvalseal``, the approvals' key) over that
and the toggles as written, bound to the Gate. Opening and closing never wait for it: its entry
fails open, so a toggle written while the webhook is down lands, and shows its identity as
unverified with the client's ``requestedBy`` beside it. A stamp shows verified only while the
toggles are exactly those it was sealed with, on the Gate it was sealed for, and it is not
older than the stamp the controller last recorded (a stamp written back: a replay).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from admission.core.base import names
from admission.core.base.objects import Object, metadata, object_key
from admission.core.base.objects import annotations as annotations_of
from admission.core.base.timefmt import format_time, parse_time
from admission.core.gates import approvalseal

KEY = names.TOGGLED_BY_ANNOTATION
BY, GROUPS, AT, GATE, OPEN, CLOSE, CREATED = "by", "groups", "at", "gate", "open", "close", "created"
# How far two clocks may differ: a stamp made on CREATE and creationTimestamp, two replicas' stamps.
STAMP_SKEW = timedelta(minutes=2)
MAX_GROUPS = 16  # groups kept in a stamp: who someone is, not a directory
UNSTAMPED = "no stamp: written without our webhook (down, or absent)"
MALFORMED = "its toggledBy stamp is not one our webhook writes"
MOVED = "the toggles changed since it was stamped: they were written without our webhook"
REPLAYED = "its stamp is older than the one the controller last recorded: an earlier stamp written back"
NOT_VOUCHED = (
    "the Gate's status does not list this stamp as verified: the controller, which holds the key, "
    "has not verified it (yet)"
)


@dataclass(frozen=True)
class ToggleIdentity:
    """Who toggled a Gate: ``by`` as the stamp says (empty without one), verified when
    ``unverified`` is None; ``claimed`` is the client's ``requestedBy``, shown, never counted."""

    by: str = ""
    groups: tuple[str, ...] = ()
    at: datetime | None = None
    claimed: str | None = None
    unverified: str | None = None
    seal: str = ""

    @property
    def verified(self) -> bool:
        return self.unverified is None

    def describe(self) -> str:
        """One line for `get`, Events and notifications."""
        if self.verified:
            return f"{self.by} (verified)"
        said = [f"stamp says {self.by!r}"] if self.by else []
        said += [f"requestedBy says {self.claimed!r}"] if self.claimed else []
        return f"an unverified identity ({', '.join([*said, str(self.unverified)])})"

    def row(self) -> dict[str, object]:
        """As the Gate's status and `get -o json` show it."""
        out: dict[str, object] = {"verified": self.verified}
        if self.by:
            out["user"] = self.by
        if self.groups:
            out[GROUPS] = list(self.groups)
        if self.at is not None:
            out[AT] = format_time(self.at)
        if self.claimed:
            out["requestedBy"] = self.claimed
        if self.unverified:
            out["reason"] = self.unverified
        if self.seal:
            out["seal"] = self.seal
        return out


def toggles(annotations: Mapping[str, object]) -> dict[str, object]:
    """The toggles a stamp is sealed with: both annotations' values (None when absent)."""
    return {OPEN: annotations.get(names.OPEN_ANNOTATION), CLOSE: annotations.get(names.CLOSE_ANNOTATION)}


def _binding(gate: Object, created: bool) -> str:
    """What a seal binds to: the Gate's uid; on CREATE (no uid yet) its namespace and name, and
    the verifier then also asks that the stamp be as old as the Gate."""
    if created:
        namespace, name = object_key(gate)
        return f"{namespace}/{name}@create"
    return str(metadata(gate).get("uid") or "")


def stamp(
    gate: Object,
    user: str,
    groups: list[str] | tuple[str, ...],
    now: datetime,
    secret: bytes,
    created: bool = False,
) -> str:
    """The ``toggledBy`` value for a write of ``gate`` (as it will be stored) by ``user``."""
    namespace, name = object_key(gate)
    fields: dict[str, object] = {
        BY: user,
        GROUPS: [str(g) for g in groups][:MAX_GROUPS],
        AT: format_time(now),
        GATE: f"{namespace}/{name}",
        **toggles(annotations_of(gate)),
    }
    if created:
        fields[CREATED] = True
    fields[approvalseal.FIELD] = approvalseal.seal(secret, _binding(gate, created), KEY, fields)
    return json.dumps(fields, sort_keys=True, separators=(",", ":"))


def relayed(caller: str) -> str:
    """What a relay (the receiver) writes for the caller it authenticated (a token): a stamp
    without a seal, which our webhook records as "<caller> via <relay>" when the relay is one
    (--approval-relays), and which shows unverified while the webhook is down."""
    return json.dumps({BY: caller}, separators=(",", ":"))


def claim(raw: object) -> str | None:
    """The ``by`` a client (a relay: the receiver) wrote in an unsealed stamp, if any."""
    try:
        found = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return None
    by = found.get(BY) if isinstance(found, dict) else None
    return by.strip() if isinstance(by, str) and by.strip() else None


def recorded_at(gate: Object) -> datetime | None:
    """When the stamp the controller last recorded as verified was made (the Gate's status)."""
    status = gate.get("status")
    row = status.get(names.TOGGLED_BY_FIELD) if isinstance(status, dict) else None
    if not isinstance(row, dict) or row.get("verified") is not True or not isinstance(row.get(AT), str):
        return None
    try:
        return parse_time(row[AT])
    except ValueError:
        return None


def read(gate: Object, secret: bytes | None) -> ToggleIdentity | None:
    """Who toggled ``gate``, verified with ``secret``; None when it carries no toggle."""
    annotations = annotations_of(gate)
    now_toggles = toggles(annotations)
    claimed = annotations.get(names.REQUESTED_BY_ANNOTATION)
    claimed = claimed if isinstance(claimed, str) and claimed else None
    if now_toggles == {OPEN: None, CLOSE: None}:
        return None
    raw = annotations.get(KEY)
    if raw is None:
        return ToggleIdentity(claimed=claimed, unverified=UNSTAMPED)
    try:
        found = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        found = None
    by, groups, at_text = (found.get(f) for f in (BY, GROUPS, AT)) if isinstance(found, dict) else (None,) * 3
    if not isinstance(found, dict) or not isinstance(by, str) or not isinstance(at_text, str):
        return ToggleIdentity(claimed=claimed, unverified=MALFORMED)
    try:
        at = parse_time(at_text)
    except ValueError:
        return ToggleIdentity(by=by, claimed=claimed, unverified=MALFORMED)
    shown = ToggleIdentity(
        by=by,
        groups=tuple(str(g) for g in groups) if isinstance(groups, list) else (),
        at=at,
        claimed=claimed,
        seal=str(found.get(approvalseal.FIELD) or ""),
    )
    why = _unverified(gate, found, now_toggles, at, secret)
    return shown if why is None else replace(shown, unverified=why)


def _unverified(
    gate: Object, found: dict[str, object], now_toggles: dict[str, object], at: datetime, secret: bytes | None
) -> str | None:
    if not secret:
        return approvalseal.NO_KEY
    if {OPEN: found.get(OPEN), CLOSE: found.get(CLOSE)} != now_toggles:
        return MOVED
    created = found.get(CREATED) is True
    if created:
        born = metadata(gate).get("creationTimestamp")
        try:
            if not isinstance(born, str) or abs(parse_time(born) - at) > STAMP_SKEW:
                return approvalseal.MISMATCH
        except ValueError:
            return approvalseal.MISMATCH
    namespace, name = object_key(gate)
    if found.get(GATE) != f"{namespace}/{name}":
        return approvalseal.MISMATCH
    why = approvalseal.unverified(secret, _binding(gate, created), KEY, found)
    if why is not None:
        return why
    last = recorded_at(gate)
    # Replicas' clocks differ by a little: only a stamp clearly older than the last is a replay.
    return REPLAYED if last is not None and at < last - STAMP_SKEW else None


def read_without_key(identity: ToggleIdentity | None, gate: Object) -> ToggleIdentity | None:
    """``identity`` (read without the key) as a reader without it (`kubectl gate`) may show it:
    verified where the Gate's status, written by the controller, vouches for exactly this seal;
    else unverified with the controller's reason when it gave one for this seal."""
    if identity is None or identity.unverified != approvalseal.NO_KEY:
        return identity
    status = gate.get("status")
    row = status.get(names.TOGGLED_BY_FIELD) if isinstance(status, dict) else None
    row = row if isinstance(row, dict) else {}
    same = bool(identity.seal) and row.get("seal") == identity.seal
    if same and row.get("verified") is True:
        return replace(identity, unverified=None)
    reason = row.get("reason") if same and isinstance(row.get("reason"), str) else None
    return replace(identity, unverified=reason or NOT_VOUCHED)
