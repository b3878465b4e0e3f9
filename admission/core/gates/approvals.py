"""Approvals of exact content on a Gate (pure): parse, check a write, stamp the approver, match
a held write, and say when an approval has landed or expired (docs/decisions/0057).

An approval is one annotation on the Gate, ``approval.gating.toolkit.fluxcd.io/<id>``, whose
value is compact JSON: ``content`` (what waits, exactly as the hold message shows it), ``for``
(``Kind/namespace/name`` or ``*``), ``message``, ``expires``, and ``by``/``at``, which only the
webhook writes: whatever a client puts there is replaced with the identity the API server
authenticated (``stamp``), and ``required``, the approvers the gate's policy asked for when it
was given (the stricter of the policy before and after the write that recorded it). An approval
counts only while the gate asks for at least that many (``does_not_count``): lowering
``spec.approvals`` never makes an approval given before or with it count. The whole value is
sealed for this Gate and key (admission.core.gates.approvalseal): an approval whose seal does not
verify is shown as unverified and counts for nothing. A relay's ``requestedBy`` (the name a
receiver's caller gave) is shown beside ``by`` and is never an approver. A closed gate counts
as open for a status write whose new content is approved (``admitting``), and for nothing else.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from admission.core.base import names
from admission.core.base.controls import has_controls
from admission.core.base.timefmt import format_time, parse_time
from admission.core.flux import kinds
from admission.core.flux.contentkinds import ChartContent
from admission.core.gates import approvalseal

CONTENT, FOR, MESSAGE, EXPIRES, BY, AT = "content", "for", "message", "expires", "by", "at"
REQUIRED = "required"  # stamped: spec.approvals.required in force when it was given
REQUESTED_BY = "requestedBy"  # a relay's caller's own words: shown, never counted as an approver
SEAL = approvalseal.FIELD
FIELDS = (CONTENT, FOR, MESSAGE, EXPIRES, BY, AT, REQUIRED, REQUESTED_BY, SEAL)
# How far the ``at`` the validating webhook sees may be from its own clock: the mutating
# webhook wrote it moments before in the same request (replicas' clocks may differ a little).
# An older sealed value is a replay, written while the mutating entry was absent.
STAMP_SKEW = timedelta(minutes=2)
DEFAULT_EXPIRY = timedelta(hours=24)  # a gate without spec.window: how long an unused approval lasts
# The longest an approval lasts after it was stamped, whatever its ``expires`` says: an ended
# approval is remembered at least this long after its annotation is withdrawn, so a copy of it
# written back later is dead (admission.core.gates.approvalrecord, docs/decisions/0070).
MAX_EXPIRY = timedelta(days=7)
CLOCK_SKEW = timedelta(minutes=1)  # how far ahead of this clock another pod's stamp may be
MAX_TEXT = 512  # content and message: longer is refused (a revision is < 100 characters)
MAX_REQUIRED = 10  # spec.approvals.required
ID_LENGTH = 16  # hex digits of an approval's id: its key stays well under 63 characters
ANY = names.APPROVAL_ANY_TARGET
UNVERIFIED = "unverified"  # a row's reason its seal does not verify
# When the controller sees a new approval it asks Flux to reconcile what waits for it, then asks
# again after each of these while that content still waits: the webhook pods' gate caches may
# see the approval a moment after the controller did, and a held write they deny is otherwise
# retried only at the source's next interval. Bounded: an approval Flux cannot use (its content
# was superseded upstream) costs five requests, not one per pass until it expires.
REQUEST_AGAIN_AFTER = (
    timedelta(seconds=3),
    timedelta(seconds=10),
    timedelta(seconds=30),
    timedelta(seconds=90),
)


@dataclass(frozen=True)
class Approval:
    """One stamped approval, as the Gate holds it."""

    key: str  # the annotation's key
    content: str
    target: str  # "Kind/namespace/name" or "*"
    message: str
    by: str
    at: datetime
    expires: datetime
    required: int = 1  # the approvers the gate asked for when it was given
    requested_by: str = ""  # a relay's caller's own words (unverified)
    unverified: str | None = None  # why the webhook's seal does not verify (None: it does)

    def live(self, now: datetime) -> bool:
        # Stamped in the future (beyond clock skew): not an approval yet, and not ended either.
        return self.at - CLOCK_SKEW <= now < self.expires

    def expired(self, now: datetime) -> bool:
        return now >= self.expires

    def covers(self, targets: Iterable[str]) -> bool:
        return self.target == ANY or self.target in targets

    def describe(self) -> str:
        """The one sentence Events, logs, notifications and ``kubectl gate`` print."""
        said = f" (requested by {self.requested_by!r}, unverified)" if self.requested_by else ""
        text = f"approved by {self.by}{said}: {self.content} for {self.target}"
        text += f" — {self.message}" if self.message else ""
        return text + (f" [unverified: {self.unverified}]" if self.unverified else "")

    def row(self) -> dict[str, str | int]:
        """Its stable JSON shape (Gate status, ``kubectl gate`` output); ``requestedBy`` and
        ``unverified`` only when set."""
        row: dict[str, str | int] = {
            "id": self.key.removeprefix(names.APPROVAL_ANNOTATION_PREFIX),
            CONTENT: self.content,
            FOR: self.target,
            MESSAGE: self.message,
            BY: self.by,
            AT: format_time(self.at),
            EXPIRES: format_time(self.expires),
            REQUIRED: self.required,
        }
        if self.requested_by:
            row[REQUESTED_BY] = self.requested_by
        if self.unverified:
            row[UNVERIFIED] = self.unverified
        return row


@dataclass(frozen=True)
class Policy:
    """A Gate's ``spec.approvals``: how many distinct approvers, and whether a message is required."""

    required: int = 1
    message_required: bool = True

    def stricter(self, other: Policy) -> Policy:
        """What both ask for: the policy an approval written while one replaces the other is given under."""
        return Policy(max(self.required, other.required), self.message_required or other.message_required)

    def loosened_by(self, new: Policy) -> str | None:
        """How ``new`` asks for less than this policy (None: it does not)."""
        looser = []
        if new.required < self.required:
            looser.append(f"required {self.required} -> {new.required}")
        if self.message_required and not new.message_required:
            looser.append("messageRequired true -> false")
        return ", ".join(looser) or None


def parse_policy(spec: Mapping[str, object]) -> tuple[Policy, list[str]]:
    """``spec.approvals``, and why it cannot be evaluated (the gate is then Invalid: closed)."""
    raw = spec.get("approvals")
    if raw is None:
        return Policy(), []
    if not isinstance(raw, dict):
        return Policy(), ["spec.approvals must be an object"]
    errors = [
        f"spec.approvals.{k} is not a known field"
        for k in sorted(raw)
        if k not in ("required", "messageRequired")
    ]
    required = raw.get("required", 1)
    if isinstance(required, bool) or not isinstance(required, int) or not 1 <= required <= MAX_REQUIRED:
        errors.append(f"spec.approvals.required {required!r} must be a whole number from 1 to {MAX_REQUIRED}")
        required = 1
    message_required = raw.get("messageRequired", True)
    if not isinstance(message_required, bool):
        errors.append(f"spec.approvals.messageRequired {message_required!r} must be true or false")
        message_required = True
    return Policy(required, message_required), errors


def keys(annotations: Mapping[str, object]) -> list[str]:
    return sorted(
        k for k in annotations if isinstance(k, str) and k.startswith(names.APPROVAL_ANNOTATION_PREFIX)
    )


def new_id(content: str, target: str, nonce: str) -> str:
    """An approval's id: each approver's write gets its own key (``nonce``: the time and who asks)."""
    return hashlib.sha256("\0".join((content, target, nonce)).encode()).hexdigest()[:ID_LENGTH]


def value(
    content: str,
    target: str,
    message: str,
    expires: datetime | None,
    caller: str | None = None,
    requested_by: str | None = None,
) -> str:
    """What a client writes: the webhook adds ``by`` and ``at`` (a relay's ``caller``, the identity
    it authenticated, is kept beside its own name; anyone else's is replaced). ``requested_by``
    is a relay's caller's own words, kept and shown as such."""
    fields: dict[str, str] = {CONTENT: content, FOR: target, MESSAGE: message}
    if caller:
        fields[BY] = caller
    if requested_by:
        fields[REQUESTED_BY] = requested_by
    if expires is not None:
        fields[EXPIRES] = format_time(expires)
    return _dump(fields)


def _dump(fields: Mapping[str, str | int]) -> str:
    return json.dumps(fields, separators=(",", ":"), ensure_ascii=False)


def _fields(raw: object) -> dict[str, object]:
    if not isinstance(raw, str):
        raise ValueError("its value must be a JSON object in a string")
    try:
        found = json.loads(raw)
    except ValueError:
        raise ValueError("its value is not JSON") from None
    if not isinstance(found, dict):
        raise ValueError("its value must be a JSON object")
    unknown = sorted(k for k in found if k not in FIELDS)
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)}; an approval has {', '.join(FIELDS)}")
    return found


def valid_target(target: object) -> bool:
    if target == ANY:
        return True
    parts = target.split("/") if isinstance(target, str) else []
    return len(parts) == 3 and parts[0] in kinds.BY_KIND and all(parts[1:])


def refuse(raw: object, policy: Policy) -> str | None:
    """Why a client's approval value cannot be recorded (None: it can); ``by`` and ``at`` are not
    read: the webhook writes them."""
    try:
        found = _fields(raw)
    except ValueError as err:
        return str(err)
    content, target, message = found.get(CONTENT), found.get(FOR, ANY), found.get(MESSAGE, "")
    if not isinstance(content, str) or not content.strip():
        return "content must name what waits, as `kubectl gate pending` shows it"
    if not valid_target(target):
        return f"for {target!r} must be Kind/namespace/name of a gated kind, or '*'"
    if not isinstance(message, str):
        return "message must be a string"
    said = found.get(REQUESTED_BY, "")
    if not isinstance(said, str) or len(said) > MAX_TEXT or has_controls(said):
        return f"{REQUESTED_BY} must be a string of at most {MAX_TEXT} characters, without control characters"
    if policy.message_required and not message.strip():
        return "a message is required (a ticket, a reason): the gate's spec.approvals.messageRequired"
    for what, text in ((CONTENT, content), (MESSAGE, message)):
        if len(text) > MAX_TEXT:
            return f"{what} is longer than {MAX_TEXT} characters"
        if has_controls(text):
            return f"{what} holds control characters"
    if EXPIRES in found:
        try:
            parse_time(found[EXPIRES])
        except ValueError as err:
            return f"expires: {err}"
    return None


def changed(old: Mapping[str, object], new: Mapping[str, object]) -> list[str]:
    """The approval keys that are new, or whose value changed, in a write of a Gate."""
    return [k for k in keys(new) if old.get(k) != new.get(k)]


def stamp(
    raw: object,
    user: str,
    now: datetime,
    default_expiry: timedelta,
    relays: frozenset[str],
    seal_with: tuple[bytes, str, str],
    *,
    under: Policy,
) -> str:
    """The value recorded for an approval ``user`` wrote at ``now``: ``by`` is ``user`` whatever
    the client said, except that a relay (the receiver, writing for a caller it authenticated)
    keeps its caller's identity beside its own; ``at`` is now; ``expires`` defaults to the gate's;
    ``required`` is ``under``'s (the policy in force, whatever the client said); and the whole
    value is sealed with ``seal_with`` (the server's key, the Gate's uid, the annotation's key),
    so that only a value recorded here verifies."""
    found = _fields(raw)
    caller = found.get(BY)
    by = f"{caller} via {user}" if user in relays and isinstance(caller, str) and caller.strip() else user
    expires = found.get(EXPIRES)
    fields: dict[str, str | int] = {
        CONTENT: str(found.get(CONTENT)),
        FOR: str(found.get(FOR, ANY)),
        MESSAGE: str(found.get(MESSAGE, "")),
        EXPIRES: str(expires) if isinstance(expires, str) else format_time(now + default_expiry),
        BY: by,
        AT: format_time(now),
    }
    fields[REQUIRED] = under.required
    said = found.get(REQUESTED_BY)
    if user in relays and isinstance(said, str) and said.strip():
        fields[REQUESTED_BY] = said
    secret, gate_uid, key = seal_with
    fields[SEAL] = approvalseal.seal(secret, gate_uid, key, fields)
    return _dump(fields)


def parse(key: str, raw: object, gate_uid: str = "", secret: bytes | None = None) -> Approval:
    """A stamped approval; ValueError says why it is not one (it is then ignored, and reported).
    Its ``unverified`` says why the webhook's seal does not verify with ``secret`` for the Gate
    with ``gate_uid`` (such an approval is shown, and counts for nothing)."""
    found = _fields(raw)
    content, target, message, by = (found.get(f) for f in (CONTENT, FOR, MESSAGE, BY))
    said = found.get(REQUESTED_BY, "")
    if (
        not isinstance(content, str)
        or not content
        or not valid_target(target)
        or not isinstance(message, str)
        or not isinstance(said, str)
    ):
        raise ValueError("content, for, message or requestedBy is missing or malformed")
    if not isinstance(by, str) or not by or AT not in found:
        raise ValueError("it was not recorded through the webhook (no by/at)")
    unverified = approvalseal.unverified(secret, gate_uid, key, found)
    required = found.get(REQUIRED)
    if isinstance(required, bool) or not isinstance(required, int) or not 1 <= required <= MAX_REQUIRED:
        if unverified is None:
            raise ValueError(
                "it does not say which spec.approvals.required it was given under: approve again"
            )
        required = MAX_REQUIRED  # not ours (it counts for nothing), shown as unverified all the same
    at = parse_time(found[AT])
    expires = min(parse_time(found.get(EXPIRES)), at + MAX_EXPIRY)  # written before the bound, or forged
    return Approval(key, content, str(target), message, by, at, expires, required, said, unverified)


def does_not_count(approval: Approval, policy: Policy) -> str | None:
    """Why a stamped approval does not count under the gate's policy now (None: it counts).
    Given while the gate asked for more approvers than it does now, it never counts: one person
    must not meet ``required: N`` by approving and then lowering N (or by doing both at once)."""
    if approval.required > policy.required:
        return (
            f"given while spec.approvals.required was {approval.required}, now {policy.required}: "
            "an approval counts only under the policy it was given under or a stricter one"
        )
    if policy.message_required and not approval.message.strip():
        return "it has no message and spec.approvals.messageRequired is true"
    return None


def parse_all(
    annotations: Mapping[str, object],
    policy: Policy | None = None,
    *,
    gate_uid: str = "",
    secret: bytes | None = None,
) -> tuple[tuple[Approval, ...], list[str]]:
    """Every stamped approval on a Gate that counts under ``policy`` (the gate's now; None: any),
    verified or not (``unverified`` says), and the problems of those ignored."""
    found, problems = [], []
    for key in keys(annotations):
        try:
            approval = parse(key, annotations[key], gate_uid, secret)
        except ValueError as err:
            problems.append(f"ignoring {key}: {err}")
            continue
        # One the seal disowns is shown as unverified (it counts for nothing either way).
        ours = approval.unverified in (None, approvalseal.NO_KEY)
        why = does_not_count(approval, policy) if policy is not None and ours else None
        if why:
            problems.append(f"ignoring {key}: {why}")
        else:
            found.append(approval)
    return tuple(found), problems


def ended(gate: Mapping[str, object]) -> dict[str, dict[str, str]]:
    """The approvals the controller ended (used or expired), by id, from the Gate's status;
    an approval listed there admits nothing, though its annotation stays until withdrawn."""
    status = gate.get("status")
    entries = status.get(names.ENDED_APPROVALS_FIELD) if isinstance(status, dict) else None
    return {
        str(e["id"]): {k: str(v) for k, v in e.items()}
        for e in entries or []
        if isinstance(e, dict) and isinstance(e.get("id"), str)
    }


def ended_entry(approval: Approval, reason: str, now: datetime) -> dict[str, str]:
    """How the Gate's status records that an approval ended, and why."""
    return {
        "id": approval.key.removeprefix(names.APPROVAL_ANNOTATION_PREFIX),
        "reason": reason,
        AT: format_time(now),
    }


def admitting(
    approvals: Iterable[Approval],
    required: int,
    identities: Iterable[str],
    targets: Iterable[str],
    now: datetime,
) -> tuple[Approval, ...]:
    """The live approvals that let a write through: of one content among ``identities`` (what
    the write carries), for one of ``targets`` (the object, or what it inherits gates from) or
    ``*``, by at least ``required`` distinct approvers (``by``: identities the API server, or a
    relay for a token it authenticated, established; never a caller's ``requestedBy``), each
    sealed by the webhook; () when none does."""
    ids, targets = tuple(identities), tuple(targets)
    fitting = [
        a
        for a in approvals
        if a.unverified is None and a.live(now) and a.content in ids and a.covers(targets)
    ]
    for approved in dict.fromkeys(a.content for a in fitting):
        same = [a for a in fitting if a.content == approved]
        if len({a.by for a in same}) >= required:
            return tuple(same)
    return ()


def describe(approvals: Iterable[Approval]) -> str:
    return "; ".join(a.describe() for a in approvals)


def pins(content: str, served: str) -> bool:
    """Whether an object serving (or having applied, or waiting for) ``served``, as its messages
    show it, serves approved ``content``: the same text; for a chart approved with the values a
    release applies, also that chart as its HelmChart shows it and that release as it shows it
    (its status names neither the source nor a HelmChart's digest). What the controller reads to
    say an approval landed; the hold points compare whole identities (``admitting``)."""
    if served == content:
        return True
    chart = ChartContent.parse(content)
    return (
        chart is not None
        and bool(chart.values)
        and served
        in (
            replace(chart, values="").text(),
            *chart.applied_as(),
        )
    )


@dataclass(frozen=True)
class Behind:
    """An object behind a gate, as the controller sees it: what it serves, and what waits for it
    (at its own hold point, or at its source's, not yet applied)."""

    target: str  # Kind/namespace/name
    serves: str
    waits: tuple[str, ...]


def landed(approval: Approval, behind: Iterable[Behind]) -> bool:
    """Its content has landed: an object it covers serves it, and none it covers still waits for it."""
    covered = [b for b in behind if approval.covers((b.target,))]
    return any(pins(approval.content, b.serves) for b in covered) and not any(
        pins(approval.content, waits) for b in covered for waits in b.waits
    )


def waiting_for(approval: Approval, behind: Iterable[Behind]) -> list[str]:
    """The objects it covers where its content still waits: those a reconcile request can land it on."""
    return [
        b.target
        for b in behind
        if approval.covers((b.target,)) and any(pins(approval.content, waits) for waits in b.waits)
    ]
