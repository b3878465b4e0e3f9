"""Gate state: a pure function of a Gate, its GateKeepers and ``now`` (SPEC §2-3)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from admission.core.base import names
from admission.core.base.lazy import Lazy
from admission.core.base.timefmt import format_time
from admission.core.gates.approvals import Approval
from admission.core.gates.gatespec import CompiledGate, GateEntry, Toggle, compile_gate
from admission.core.gates.togglestamp import ToggleIdentity
from admission.core.time.calendarentries import CalendarEntry, CalendarGuard
from admission.core.time.cron import HORIZON

_MAX_STEPS = 500  # bound on the search for the next transition
# The search for the next transition asks entries for their next change, at the start and where
# they may have changed; it gives up ("unknown", never "open") once the asks have cost this many
# cron searches, so its cost does not grow with what a GateKeeper contains (bench/gatekeeper.py).
EVALUATION_BUDGET = 64
# A state is memoised until its first possible change; when none is found within HORIZON, for
# this long (a search reaches HORIZON from the day it is made: a year later it reaches further).
VALIDITY = timedelta(hours=24)


class Transition(NamedTuple):
    """What the search for a gate's next transition found: when it flips (``at``), or, when it
    gave up (its budget spent), the instant it reached (``unknown_after``): no flip before it,
    and after it none is known. Neither: none within the horizon, or none ever."""

    at: datetime | None = None
    unknown_after: datetime | None = None


_NO_TRANSITION: Lazy[Transition] = Lazy.of(Transition())


@dataclass(frozen=True)
class GateState:
    """Whether a gate is open at a given time, why, and until when."""

    namespace: str
    name: str
    open: bool
    reason: str
    message: str
    mode: names.Mode | None = None  # the gate's own enforce/audit override
    requested_at: datetime | None = None  # the toggle in effect
    reset_to_default_at: datetime | None = None
    requested_by: str | None = None
    request_message: str | None = None
    problems: tuple[str, ...] = ()  # ignored input, reported in status
    approvals: tuple[
        Approval, ...
    ] = ()  # stamped approvals of exact content (admission.core.gates.approvals)
    required_approvals: int = 1  # distinct approvers an approval needs (spec.approvals.required)
    unverified_approvals: tuple[Approval, ...] = ()  # not sealed by the webhook: shown, never counted
    toggled_by: ToggleIdentity | None = None  # who made the toggle in effect, verified or not
    valid_until: datetime | None = None  # nothing can change before this (None: never)
    # When it next opens (closed) or closes (open): searched for on first use, since deciding
    # does not need it; a denial's message, the status and the notifications do.
    transition: Lazy[Transition] = _NO_TRANSITION

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def next_transition(self) -> datetime | None:
        """When it next opens (closed) or closes (open), if known."""
        return self.transition.value.at

    @property
    def transition_unknown_after(self) -> datetime | None:
        """When no next transition is known because the search gave up: the instant it reached.
        Nothing changes before it; after it, something may (None: the search did not give up)."""
        return self.transition.value.unknown_after


def not_found(namespace: str, name: str) -> GateState:
    """The state of a referenced gate that does not exist: closed."""
    return GateState(namespace, name, False, names.REASON_NOT_FOUND, "Gate not found")


def unknown(namespace: str, name: str, why: str) -> GateState:
    """The state of a gate we cannot know (cache not synced or stale): closed."""
    return GateState(namespace, name, False, names.REASON_UNKNOWN, f"gate state unknown: {why}")


def invalid(namespace: str, name: str, why: str) -> GateState:
    """The state of a gate that cannot be evaluated: closed."""
    return GateState(namespace, name, False, names.REASON_INVALID, f"Gate is invalid: {why}")


def _applied_toggle(cg: CompiledGate, now: datetime) -> Toggle | None:
    # Toggles are sorted by (time, open-before-close): the last one not in the future
    # is the latest request, and at equal times the close.
    latest = None
    for toggle in cg.toggles:
        if toggle.at <= now:
            latest = toggle
    if latest is None or (cg.window is not None and now >= latest.at + cg.window):
        return None
    return latest


def _scheduled(cg: CompiledGate, now: datetime) -> tuple[bool, str, GateEntry] | None:
    for keeper, entry in cg.closed_entries:
        if entry.active(now):
            return False, keeper, entry
    for keeper, entry in cg.opened_entries:
        if entry.active(now):
            return True, keeper, entry
    return None


@dataclass(frozen=True)
class _Cause:
    """Whether a gate is open at an instant, and why (no look-ahead)."""

    open: bool
    reason: str
    message: str
    toggle: Toggle | None = None


def cause_of(cg: CompiledGate, now: datetime) -> _Cause:
    """The one answer to "open or closed, and why" that evaluate, searches and calendars share."""
    if cg.unknown is not None:
        return _Cause(False, names.REASON_UNKNOWN, f"gate state unknown: {cg.unknown}")
    if cg.errors:
        return _Cause(False, names.REASON_INVALID, "Gate is invalid: " + "; ".join(cg.errors))
    toggle = _applied_toggle(cg, now)
    if toggle is not None:
        reason = names.REASON_OPEN_REQUESTED if toggle.open else names.REASON_CLOSE_REQUESTED
        return _Cause(toggle.open, reason, f"Gate {'open' if toggle.open else 'close'} requested", toggle)
    scheduled = _scheduled(cg, now)
    if scheduled is not None:
        is_open, keeper, entry = scheduled
        if isinstance(entry, CalendarGuard):  # a calendar that cannot be read: closed, and why
            return _Cause(
                False, names.REASON_UNKNOWN, f"gate state unknown: GateKeeper '{keeper}' {entry.unknown(now)}"
            )
        what = entry.describe(now) if isinstance(entry, CalendarEntry) else f"schedule {entry}"
        return _Cause(
            is_open,
            names.REASON_SCHEDULED,
            f"Gate {'opened' if is_open else 'closed'} by GateKeeper '{keeper}' {what}",
        )
    return _Cause(
        cg.default_open, names.REASON_DEFAULT, f"Gate {'opened' if cg.default_open else 'closed'} by default"
    )


def _is_open(cg: CompiledGate, now: datetime) -> bool:
    return cause_of(cg, now).open


def _toggle_points(cg: CompiledGate, now: datetime) -> list[datetime]:
    points = [t.at for t in cg.toggles if t.at > now]
    if cg.window is not None:
        points += [t.at + cg.window for t in cg.toggles if t.at + cg.window > now]
    return points


def _entries(cg: CompiledGate) -> list[GateEntry]:
    """The gate's distinct schedule entries (copies are one shared object)."""
    return list(dict.fromkeys(entry for _, entry in cg.closed_entries + cg.opened_entries))


def change_points(cg: CompiledGate, now: datetime) -> list[datetime]:
    """Times after ``now`` at which the state may change; it cannot change before the first."""
    points = _toggle_points(cg, now)
    for entry in _entries(cg):
        nxt = entry.next_change(now)
        if nxt is not None:
            points.append(nxt)
    return points


def _valid_until(cg: CompiledGate, now: datetime) -> datetime | None:
    """A time before which the state cannot change (None: never). When no schedule entry
    changes within HORIZON, VALIDITY from now: the state is looked at again then."""
    points = _toggle_points(cg, now)
    entries = _entries(cg)
    points += [change for entry in entries if (change := entry.stable_until(now)) is not None]
    if not points and entries:
        return now + VALIDITY
    return min(points) if points else None


def next_transition(cg: CompiledGate, now: datetime, horizon: timedelta = HORIZON) -> datetime | None:
    """When the gate next opens (if closed) or closes (if open), if known within ``horizon``."""
    return search_transition(cg, now, horizon).at


def search_transition(cg: CompiledGate, now: datetime, horizon: timedelta = HORIZON) -> Transition:
    """When the gate next opens (if closed) or closes (if open), if found within ``horizon``;
    or the instant the search reached when it gave up.

    Each entry is asked for its state and the time of its next change; neither can change
    before that time. From them, the earliest instant the gate could flip is known (a gate
    closed by active windows opens no earlier than the last of them ends; one a toggle holds,
    not before the toggle ends), so the search goes there at once and asks again only the
    entries that may have changed by then. It gives up (unknown, never "open") after
    EVALUATION_BUDGET worth of asks, whatever the entries are; then it says how far it got,
    which is not "no transition": readers ask again from there."""
    if cg.fixed:
        return Transition()
    entries, closing, opening = _roles(cg)
    # Calendars as the search sees them: fetched again before they go stale (calendarentries._Searched).
    searched = [
        entry.searched_from(now) if isinstance(entry, (CalendarEntry, CalendarGuard)) else entry
        for entry in entries
    ]
    active: list[bool] = [False] * len(entries)
    changes: list[datetime | None] = [None] * len(entries)
    spent = _ask(searched, active, changes, now, 0, due_only=False)
    if spent is None:
        return Transition(unknown_after=now)
    fixed = sorted(_toggle_points(cg, now), reverse=True)  # popped from the end, earliest first
    was_open = _open_by(cg, now, active, closing, opening)
    deadline = now + horizon
    cur = now
    for _ in range(_MAX_STEPS):
        flip = _earliest_flip(cg, cur, active, changes, closing, opening, fixed[-1] if fixed else None)
        if flip is None:
            return Transition()
        cur = flip  # no flip before it: the state at it is what is not known yet
        while fixed and fixed[-1] <= cur:
            fixed.pop()
        spent = _ask(searched, active, changes, cur, spent, due_only=True)
        if spent is None:
            return Transition(unknown_after=cur)
        if _open_by(cg, cur, active, closing, opening) != was_open:
            return Transition(at=cur)  # change points are exact, even beyond the horizon (a toggle in 2030)
        if cur > deadline:
            return Transition()
    return Transition(unknown_after=cur)


def _roles(cg: CompiledGate) -> tuple[list[GateEntry], list[int], list[int]]:
    """The entries the search asks, and which of them close and which open the gate."""
    closers = [e for _, e in cg.closed_entries]
    # Opening entries cannot change whether a gate that is open by default is open.
    entries = [entry for entry in _entries(cg) if not cg.default_open or any(entry is e for e in closers)]
    closing = [i for i, entry in enumerate(entries) if any(entry is e for e in closers)]
    # An entry that also closes never opens the gate (closing wins while it is active): as an
    # opener it would only make the search step through each of its changes.
    opening = [
        i
        for i, entry in enumerate(entries)
        if i not in closing and any(entry is e for _, e in cg.opened_entries)
    ]
    return entries, closing, opening


def _ask(
    searched: list[Any],
    active: list[bool],
    changes: list[datetime | None],
    at: datetime,
    spent: int,
    due_only: bool,
) -> int | None:
    """Ask the entries (with ``due_only``, those whose last answer may have changed by ``at``)
    for their state at ``at`` and their next change; what the search has spent after it, or
    None once it is over EVALUATION_BUDGET."""
    for i, search in enumerate(searched):
        change = changes[i]
        if due_only and (change is None or change > at):
            continue
        if spent >= EVALUATION_BUDGET:
            return None
        active[i], changes[i], cost = search.state_and_next_change(at)
        spent += cost
    return spent


def _open_by(
    cg: CompiledGate, at: datetime, active: list[bool], closing: list[int], opening: list[int]
) -> bool:
    """Whether the gate is open at ``at``, its entries being ``active`` (as ``_is_open``)."""
    toggle = _applied_toggle(cg, at)
    if toggle is not None:
        return toggle.open
    if any(active[i] for i in closing):
        return False
    return True if any(active[i] for i in opening) else cg.default_open


def _earliest_flip(
    cg: CompiledGate,
    cur: datetime,
    active: list[bool],
    changes: list[datetime | None],
    closing: list[int],
    opening: list[int],
    next_fixed: datetime | None,
) -> datetime | None:
    """The earliest instant after ``cur`` at which the gate could open or close: an entry
    keeps its state until its change, so no flip can come before this (None: none is known)."""
    candidates = [next_fixed] if next_fixed is not None else []
    if _applied_toggle(cg, cur) is None:  # a toggle holds until the next toggle point
        closers = [i for i in closing if active[i]]
        openers = [i for i in opening if active[i]]
        if closers:  # closed until every active closing entry has ended
            ends = _all_changes(changes, closers)
            if ends is not None:
                candidates.append(max(ends))
        else:  # open or closed until a closing entry starts, or the open ones end
            starts = [change for i in closing if (change := changes[i]) is not None]
            if starts and (openers or cg.default_open):
                candidates.append(min(starts))
            if openers and not cg.default_open:
                ends = _all_changes(changes, openers)
                if ends is not None:
                    candidates.append(max(ends))
            if not openers and not cg.default_open:
                candidates += [change for i in opening if (change := changes[i]) is not None]
    candidates = [c for c in candidates if c > cur]
    return min(candidates) if candidates else None


def _all_changes(changes: list[datetime | None], indices: list[int]) -> list[datetime] | None:
    """The next changes of these entries, or None when one of them has none."""
    found = []
    for i in indices:
        change = changes[i]
        if change is None:
            return None
        found.append(change)
    return found


# What arithmetic on instants raises when it leaves the calendar (an OverflowError; a ValueError
# for a year past 9999). Bounded input (timefmt.LATEST, MAX_GATE_DURATION) keeps it from
# happening; should it all the same, that one gate is invalid: its readers (every gate's metrics,
# the calendar, a listing) must not fail with it.
OUT_OF_RANGE = (OverflowError, ValueError)


def out_of_range(cg: CompiledGate, now: datetime, err: Exception) -> GateState:
    """The state of a gate whose evaluation at ``now`` left the calendar: invalid, closed."""
    state = invalid(cg.namespace, cg.name, f"cannot be evaluated at {format_time(now)}: {err}")
    return dataclasses.replace(state, mode=cg.mode, problems=cg.problems)


def _searched(cg: CompiledGate, now: datetime) -> Transition:
    try:
        return search_transition(cg, now)
    except OUT_OF_RANGE:  # nothing is known after now: asked again from there, never "open"
        return Transition(unknown_after=now)


def evaluate(cg: CompiledGate, now: datetime) -> GateState:
    """The state of a compiled gate at ``now``; its next transition is searched for when asked.
    Never raises for a gate's content: one that cannot be evaluated is invalid (closed)."""
    try:
        return _evaluate(cg, now)
    except OUT_OF_RANGE as err:
        return out_of_range(cg, now, err)


def _evaluate(cg: CompiledGate, now: datetime) -> GateState:
    cause = cause_of(cg, now)
    if cg.fixed:
        return GateState(
            cg.namespace, cg.name, False, cause.reason, cause.message, mode=cg.mode, problems=cg.problems
        )
    toggle = cause.toggle
    ends = toggle.at + cg.window if toggle is not None and cg.window is not None else None
    message = cause.message
    if toggle is not None and ends is not None and _is_open(cg, ends) != toggle.open:
        message = f"Gate scheduled for {'closing' if toggle.open else 'opening'} at {format_time(ends)}"
    return GateState(
        cg.namespace,
        cg.name,
        cause.open if toggle is None else toggle.open,
        cause.reason,
        message,
        # What a toggle in effect says of itself: who asked, when, and when it lapses.
        requested_at=toggle.at if toggle is not None else None,
        reset_to_default_at=ends,
        requested_by=cg.requested_by if toggle is not None else None,
        request_message=cg.request_message if toggle is not None else None,
        toggled_by=cg.toggled_by if toggle is not None else None,
        mode=cg.mode,
        problems=cg.problems,
        valid_until=_valid_until(cg, now),
        transition=Lazy(functools.partial(_searched, cg, now)),
        approvals=cg.approvals,
        required_approvals=cg.required_approvals,
        unverified_approvals=cg.unverified_approvals,
    )


def evaluate_gate(
    gate: dict[str, Any],
    keepers: Iterable[dict[str, Any]],
    now: datetime,
    approval_key: bytes | None = None,
) -> GateState:
    """The state of ``gate`` at ``now`` under the GateKeepers that name it (``approval_key``:
    the webhook's, to verify approvals with)."""
    return evaluate(compile_gate(gate, keepers, approval_key), now)
