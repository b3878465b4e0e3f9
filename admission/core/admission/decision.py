"""The decision on one admission request: allowed, held (denied or audited), and why."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Final

from admission.core.admission.admitted import Admission, User, admission_of
from admission.core.admission.changes import Change, ContentChange, Deletion, PolicyReleases, classify
from admission.core.admission.review import AdmissionRequest
from admission.core.base import names
from admission.core.base.lazy import Lazy
from admission.core.base.objects import Object, label, metadata
from admission.core.base.timefmt import format_time
from admission.core.flux import content
from admission.core.flux.contentkinds import ContentKind
from admission.core.flux.holdmessage import NewContent, gate_clause
from admission.core.gates import approvals, gates
from admission.core.gates.gates import GateState
from admission.core.gates.references import Policy, may_be_held, policy_of, same_gating, suspension_of

Lookup = Callable[[str, str, datetime], GateState]

# What was held: names.EDIT or names.CONTENT (re-exported: the webhook and the hold points read them here).
EDIT: Final = names.EDIT
CONTENT: Final = names.CONTENT


@dataclass(frozen=True)
class Settings:
    """Server-wide policy: the default mode and who may always pass (break-glass)."""

    mode: names.Mode = names.ENFORCE
    exempt_users: frozenset[str] = frozenset()
    exempt_groups: frozenset[str] = frozenset()
    # Who may write an approval for a caller it authenticated (the receiver's identity): its
    # approvals record "<caller> via <relay>" (admission.core.gates.approvals.stamp).
    approval_relays: frozenset[str] = frozenset()
    # The key the webhook seals approvals with (admission.core.gates.approvalseal); without it the
    # webhook records none. Never printed.
    approval_key: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Context:
    """What a judgement reads besides the request: gate states, the time, the server's policy,
    and the Flux objects known (what sources serve, HelmReleases; ``get`` None: none)."""

    lookup: Lookup
    now: datetime
    settings: Settings = Settings()
    get: content.Get | None = None

    def parents(self, obj: Object) -> tuple[Object, ...]:
        """The objects whose gates ``obj`` inherits (a generated HelmChart: its HelmRelease)."""
        return content.inherits_from(obj, self.get) if self.get is not None else ()


@dataclass(frozen=True)
class Hold:
    """How one gate policy judges an object now."""

    policy: Policy
    states: tuple[GateState, ...]
    closed: tuple[GateState, ...]  # the gates that keep it held (all of them under oneOf)
    suspension: str | None
    held: bool
    suspended: bool = False  # status.suspended: spec.suspend, or the suspension above


@dataclass(frozen=True)
class Decision:
    """The verdict on a request, with everything logs, warnings and patches need."""

    allowed: bool
    gated: bool = False  # a change that gates judge (CREATE, spec change, artifact, ...)
    held: bool = False  # would be denied in enforce mode
    mode: names.Mode = names.ENFORCE
    change: str | None = None
    message: str | None = None
    exempt: str | None = None
    hold: Hold | None = None
    held_what: names.HeldWhat | None = None  # EDIT or CONTENT, for logs and metrics
    approved: str | None = None  # the approvals that let this content through closed gates


ALLOWED = Decision(allowed=True)  # nothing to judge, or nothing holds it


def not_judged(fail_open: bool) -> Decision:
    """The decision when judging failed: what the endpoint's failure policy answers."""
    return Decision(allowed=fail_open)


def own_hold(obj: Object | None, lookup: Lookup, now: datetime, policy: Policy | None = None) -> Hold:
    """How the object's own gate policy (``policy``, when the caller has it) and suspension judge
    it at ``now``: one Hold, held or not (``active_holds``: the ones that hold, inherited too)."""
    policy = policy or policy_of(obj)
    states = tuple(
        gates.invalid(ref.namespace, ref.name, ref.error)
        if ref.error
        else lookup(ref.namespace, ref.name, now)
        for ref in policy.refs
    )
    closed = tuple(s for s in states if not s.open)
    if policy.require == names.REQUIRE_ONE_OF:
        gates_hold = bool(states) and len(closed) == len(states)
    else:
        gates_hold = bool(closed)
    suspension = suspension_of(obj, now)
    return Hold(
        policy,
        states,
        closed if gates_hold else (),
        suspension.hold,
        gates_hold or suspension.hold is not None,
        suspension.suspended,
    )


def releases(leaving: Hold, entering: Hold) -> str | None:
    """Why an UPDATE from the policy judged as ``leaving`` to the one judged as ``entering``
    (against the same gate states) would release an object its gates hold, or None. Whatever
    the references and require modes, as written or however spelt, a change of policy may not
    do what opening a gate does."""
    if not leaving.closed or entering.closed:
        return None
    opened = [f"gate '{s.key}' is open" for s in entering.states if s.open]
    return "the new gate policy would release it" + (": " + ", ".join(opened) if opened else "")


def policy_release(
    old: Object | None, new: Object | None, before: Policy, after: Policy, lookup: Lookup, now: datetime
) -> tuple[str, Hold] | None:
    """Why an UPDATE that changes only the gate policy (``before`` to ``after``) would release
    the object its gates hold, and the hold it leaves; None when it would not."""
    if (before.refs, before.require) == (after.refs, after.require):
        return None
    leaving, entering = own_hold(old, lookup, now, before), own_hold(new, lookup, now, after)
    change = releases(leaving, entering)
    return (change, leaving) if change is not None else None


def _gate_clause(state: GateState) -> str:
    detail = state.message
    if state.next_transition is not None:
        detail += f"; opens at {format_time(state.next_transition)}"
    return f"{gate_clause(state.key)} ({detail})"


def describe(kind: str, namespace: str, name: str, holds: list[Hold]) -> str:
    """One message naming the object, every closed gate, the require mode and next opening."""
    clauses: dict[str, str] = {}
    notes: list[str] = []
    for hold in holds:
        for state in hold.closed:
            if state.key not in clauses:  # (a gate named by both policies is described once)
                clauses[state.key] = _gate_clause(state)
        if hold.suspension:
            clauses.setdefault(hold.suspension, hold.suspension)
        notes += [n for n in hold.policy.notes if n not in notes]
    message = f"{kind} {namespace}/{name} is held: " + ", ".join(clauses.values())
    requires = list(dict.fromkeys(h.policy.require for h in holds if h.closed))
    if requires:
        message += "; require=" + "->".join(requires)
    if notes:
        message += "; " + "; ".join(notes)
    return message


def mode_of(holds: list[Hold], settings: Settings) -> names.Mode:
    """enforce when any closed gate (or a suspension, under the server's mode) enforces."""
    modes: set[names.Mode] = {s.mode or settings.mode for h in holds for s in h.closed}
    if any(h.suspension for h in holds):
        modes.add(settings.mode)
    return names.ENFORCE if names.ENFORCE in modes else names.AUDIT


def active_holds(obj: Object, context: Context) -> list[Hold]:
    """The holds that hold ``obj`` now: its own, and those of the objects it inherits gates from."""
    return [h for h in _judged(obj, context) if h is not None and h.held]


def _judged(obj: Object, context: Context) -> list[Hold | None]:
    """How ``obj``'s own policy judges it now (None: it names no gate nor suspension), then
    each object it inherits gates from that names any."""
    own = own_hold(obj, context.lookup, context.now) if may_be_held(obj) else None
    return [own, *(own_hold(p, context.lookup, context.now) for p in context.parents(obj) if may_be_held(p))]


@dataclass(frozen=True)
class Standing:
    """How an object stands now, whatever a request would change: held or not, in which mode, and why."""

    holds: tuple[Hold, ...]
    mode: names.Mode
    message: str  # names the object, every closed gate, the require mode and the next opening
    suspended: bool = False  # the object's own status.suspended (spec.suspend, or a suspension now)

    @property
    def held(self) -> bool:
        return bool(self.holds)


def standing(obj: Object, context: Context) -> Standing:
    """The holds on the stored ``obj`` now (its own and inherited): ``kubectl gate get``, the
    denial Events and the shown attempts all say what this says."""
    judged = _judged(obj, context)
    own = judged[0]
    # An object that names no suspension is suspended by spec.suspend alone: no cron to evaluate.
    suspended = own.suspended if own is not None else suspension_of(obj, context.now).suspended
    return _standing_of(obj, judged, suspended, context.settings)


def _standing_of(obj: Object, judged: list[Hold | None], suspended: bool, settings: Settings) -> Standing:
    holds = [h for h in judged if h is not None and h.held]
    if not holds:
        return Standing((), settings.mode, "", suspended)
    meta = metadata(obj)
    return Standing(
        tuple(holds),
        mode_of(holds, settings),
        describe(str(obj.get("kind") or ""), meta.get("namespace") or "", meta.get("name") or "", holds),
        suspended,
    )


def target_of(obj: Object) -> str:
    """How an approval's ``for`` names an object: Kind/namespace/name."""
    meta = metadata(obj)
    return label(obj.get("kind") or "", meta.get("namespace") or "", meta.get("name") or "")


def approved_for(
    found: ContentKind, carried: NewContent | None, new: Object | None, context: Context
) -> tuple[Context, list[approvals.Approval]]:
    """The context in which a closed gate counts as open for this status write because it
    approves the exact content the write carries (``carried``, read by the caller; compared as
    the whole identities of ``found.approvable``, ``found`` the kind's content), for the object,
    what it inherits its gates from, or ``*``, and the approvals that do. Any other write, and
    every other gate, as before."""
    if carried is None or not isinstance(new, dict):
        return context, []
    # Read only when a closed gate has approvals to match: most status writes meet none.
    obj, brings = new, carried  # (narrowed, for the lambdas)
    parents = Lazy(lambda: context.parents(obj))
    identities = Lazy(lambda: found.approvable(obj, brings, context.get, parents.value))
    targets = Lazy(lambda: tuple(target_of(o) for o in (obj, *parents.value)))
    used: list[approvals.Approval] = []
    closed_lookup = context.lookup

    def lookup(namespace: str, name: str, now: datetime) -> GateState:
        state = closed_lookup(namespace, name, now)
        if state.open or not state.approvals:
            return state
        found = approvals.admitting(
            state.approvals, state.required_approvals, identities.value, targets.value, now
        )
        if not found:
            return state
        used.extend(a for a in found if a not in used)
        return replace(state, open=True, reason=names.REASON_APPROVED, message=approvals.describe(found))

    return replace(context, lookup=lookup), used


def _unknown_deletion(admission: Admission, settings: Settings) -> Decision:
    """A DELETE without ``oldObject``: API servers since 1.15 send the object being deleted, and
    without it its gates cannot be read, so it may be gated: held (fail closed) in the server's
    mode, as when the gate cache cannot be trusted."""
    about = admission.about
    message = (
        f"{about.kind} {about.namespace}/{about.name} is held: the request carries no oldObject (the object "
        "being deleted), so whether its gates allow deleting it is unknown"
    )
    return Decision(
        allowed=settings.mode == names.AUDIT,
        gated=True,
        held=True,
        mode=settings.mode,
        change=Deletion.text,
        message=message,
        held_what=EDIT,
    )


def _exemption(user: User, settings: Settings) -> Decision | None:
    """Who may always pass (break-glass), and why; None for everyone else."""
    if user.name in settings.exempt_users:
        return Decision(allowed=True, exempt=f"user '{user.name}' is exempt")
    exempt_groups = settings.exempt_groups.intersection(user.groups)
    if exempt_groups:
        return Decision(allowed=True, exempt=f"group '{sorted(exempt_groups)[0]}' is exempt")
    return None


@dataclass(frozen=True)
class StatusJudgement:
    """A status write judged once, for both webhooks: what it carries, the context in which
    approved content counts as open, the approvals that do, and how the new object's own policy
    and those it inherits judge it in that context."""

    carried: NewContent | None
    context: Context
    used: tuple[approvals.Approval, ...]
    own: Hold | None  # None: the object names no gate nor suspension
    inherited: tuple[Hold, ...]  # every object it inherits gates from (a generated HelmChart's release)
    # How the written object stands: the mutating webhook's view (``standing``), said when asked.
    stands: Lazy[Standing]


def judge_status(admission: Admission, context: Context) -> StatusJudgement:
    """The one judgement of a status write (``admission.new`` a dict): approved content passes
    its gates; the object's own gates and those it inherits count."""
    new = admission.new
    assert isinstance(new, dict)  # (the callers check it)
    carried = admission.carried
    context, used = approved_for(admission.row.content, carried, new, context)
    own = own_hold(new, context.lookup, context.now) if may_be_held(new) else None
    inherited = tuple(own_hold(parent, context.lookup, context.now) for parent in context.parents(new))

    def stands() -> Standing:
        # An object that names no suspension is suspended by spec.suspend alone: no cron to evaluate.
        suspended = own.suspended if own is not None else suspension_of(obj, context.now).suspended
        return _standing_of(obj, [own, *inherited], suspended, context.settings)

    obj = new  # (narrowed, for the closure)
    return StatusJudgement(carried, context, tuple(used), own, inherited, Lazy(stands))


def decide(request: AdmissionRequest, context: Context) -> Decision:
    """Judge a well-formed AdmissionRequest: the webhook and ``kubectl gate check`` both ask this."""
    admission = admission_of(request)
    return ALLOWED if admission is None else judge(admission, context)


def judge(admission: Admission, context: Context) -> Decision:
    """The verdict on a request on a gated kind, read once (``admitted.admission_of``).
    Inherited gates count on status writes (a generated HelmChart's: its HelmRelease's)."""
    exempt = _exemption(admission.user, context.settings)
    if exempt is not None:
        return exempt
    if admission.operation == "DELETE" and admission.by_kubernetes:
        return ALLOWED
    if admission.sub_resource:
        # Only a status write that carries new content is gated: approved content passes.
        if not admission.status_update or admission.carried is None or not isinstance(admission.new, dict):
            return ALLOWED
        return _judge_status_write(admission, context)
    if admission.operation == "DELETE" and not isinstance(admission.old, dict):
        return _unknown_deletion(admission, context.settings)
    return _judge_object(admission, context)


def _judge_status_write(admission: Admission, context: Context) -> Decision:
    """A status write is judged by the policy of the object it leaves, then as ``judge_status``
    judges it (the same verdict the mutating webhook's hold points act on)."""
    write = judge_status(admission, context)
    assert write.carried is not None  # (checked by the caller)
    old, new = admission.old, admission.new
    assert isinstance(new, dict)
    own = write.own or own_hold(new, write.context.lookup, context.now)
    # The policy it leaves is judged too, unless it names exactly what the new one does (as the
    # API server keeps it on a status write): the same hold twice adds nothing to the verdict.
    leaves = isinstance(old, dict) and not same_gating(old, new)
    judgements = [own_hold(old, write.context.lookup, context.now), own] if leaves else [own]
    judgements += write.inherited
    change = ContentChange(write.carried, write.carried.as_change())
    return _verdict(admission, change, judgements, context.settings, write.used)


def _judge_object(admission: Admission, context: Context) -> Decision:
    """A CREATE, UPDATE or DELETE of the object itself: its change, then each policy's hold."""
    old, new, now = admission.old, admission.new, context.now
    read = Lazy(lambda: (policy_of(old), policy_of(new)))  # read once, if at all
    change: Change | None = classify(admission, lambda: read.value)
    if change is None:
        if admission.operation != "UPDATE":
            return ALLOWED
        # An UPDATE that changes nothing but its gate policy (or nothing at all).
        released = policy_release(old, new, *read.value, context.lookup, now)
        if released is None:
            return ALLOWED
        change, judgements = PolicyReleases(released[0]), [released[1]]
    else:
        # An UPDATE must satisfy both the policy it leaves and the one it enters.
        objects = (old,) if admission.operation == "DELETE" else (old, new)  # zip pairs each with its policy
        judged = [(o, p) for o, p in zip(objects, read.value, strict=False) if isinstance(o, dict)]
        judgements = [own_hold(obj, context.lookup, now, policy) for obj, policy in judged]
    return _verdict(admission, change, judgements, context.settings, ())


def _verdict(
    admission: Admission,
    change: Change,
    judgements: list[Hold],
    settings: Settings,
    used: tuple[approvals.Approval, ...],
) -> Decision:
    """Held when any judgement holds, in the mode its closed gates say, with one message."""
    holds = [h for h in judgements if h.held]
    if not holds:
        return Decision(
            allowed=True,
            gated=True,
            change=change.text,
            hold=judgements[-1] if judgements else None,
            approved=approvals.describe(used) or None,
        )
    mode = mode_of(holds, settings)
    about = admission.about
    return Decision(
        allowed=mode == names.AUDIT,
        gated=True,
        held=True,
        mode=mode,
        change=change.text,
        message=change.explain(describe(admission.kind, about.namespace, about.shown_name, holds)),
        hold=holds[-1],
        held_what=CONTENT if admission.sub_resource else EDIT,
    )
