"""Gate state: a pure function of a Gate, its GateKeepers and ``now`` (SPEC §2-3)."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo
from typing import Iterable

from admission.core import names
from admission.core.objects import metadata
from admission.core.schedule import HORIZON, UTC, Entry, ScheduleError, parse_entry, zone
from admission.core.timefmt import format_time, parse_duration, parse_time

MODES = ("enforce", "audit")
_MAX_STEPS = 500  # bound on the search for the next transition
# The search for the next transition visits every schedule entry at every step; it gives up
# ("unknown", never "open") after this many visits, so its cost does not grow with what a
# GateKeeper contains (bench/gatekeeper.py: a few milliseconds at most).
EVALUATION_BUDGET = 500
MAX_ENTRIES = 32  # schedule entries of one gate, over all its GateKeepers
MAX_ENTRIES_PER_LIST = 16  # the CRD's maxItems for cronjob.closed and cronjob.opened


@dataclass(frozen=True)
class GateState:
    """Whether a gate is open at a given time, why, and until when."""

    namespace: str
    name: str
    open: bool
    reason: str
    message: str
    mode: str | None = None  # the gate's own enforce/audit override
    requested_at: datetime | None = None  # the toggle in effect
    reset_to_default_at: datetime | None = None
    requested_by: str | None = None
    request_message: str | None = None
    problems: tuple[str, ...] = ()  # ignored input, reported in status
    next_transition: datetime | None = None  # when it next opens (closed) or closes (open)
    valid_until: datetime | None = None  # nothing can change before this (None: never)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def not_found(namespace: str, name: str) -> GateState:
    """The state of a referenced gate that does not exist: closed."""
    return GateState(namespace, name, False, names.REASON_NOT_FOUND, "Gate not found")


def unknown(namespace: str, name: str, why: str) -> GateState:
    """The state of a gate we cannot know (cache not synced or stale): closed."""
    return GateState(namespace, name, False, names.REASON_UNKNOWN, f"gate state unknown: {why}")


def invalid(namespace: str, name: str, why: str) -> GateState:
    """The state of a gate that cannot be evaluated: closed."""
    return GateState(namespace, name, False, names.REASON_INVALID, f"Gate is invalid: {why}")


@dataclass(frozen=True)
class _Toggle:
    at: datetime
    open: bool


@dataclass(frozen=True)
class CompiledGate:
    """A Gate and its GateKeepers, parsed once and evaluated at many times."""

    namespace: str
    name: str
    default_open: bool = True
    window: timedelta | None = None
    mode: str | None = None
    toggles: tuple[_Toggle, ...] = ()
    closed_entries: tuple[tuple[str, Entry], ...] = ()
    opened_entries: tuple[tuple[str, Entry], ...] = ()
    errors: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    requested_by: str | None = None
    request_message: str | None = None
    keepers: tuple[str, ...] = field(default=())


def _spec(obj: dict) -> dict | None:
    spec = obj.get("spec", {}) if isinstance(obj, dict) else None
    return {} if spec is None else spec if isinstance(spec, dict) else None


def _go_duration(spec: dict, key: str, errors: list[str]) -> timedelta | None:
    raw = spec.get(key)
    if raw is None:
        return None
    try:
        value = parse_duration(raw)
    except ValueError as err:
        errors.append(f"spec.{key}: {err}")
        return None
    if value <= timedelta(0):
        errors.append(f"spec.{key} {raw!r} must be positive")
        return None
    return value


def compile_gate(gate: dict, keepers: Iterable[dict] = ()) -> CompiledGate:
    """Parse a Gate and the GateKeepers that name it; errors make it Invalid, never raise."""
    meta = metadata(gate)
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
    errors: list[str] = []
    problems: list[str] = []
    spec = _spec(gate)
    if spec is None:
        return CompiledGate(namespace, name, errors=("spec must be an object",))

    default = spec.get("default")
    closed = spec.get("closed")
    if default not in (None, "opened", "closed"):
        errors.append(f"spec.default {default!r} must be 'opened' or 'closed'")
    if closed is not None and not isinstance(closed, bool):
        errors.append(f"spec.closed {closed!r} must be true or false")
    elif (default == "opened" and closed is True) or (default == "closed" and closed is False):
        errors.append(f"spec.default '{default}' contradicts spec.closed: {str(closed).lower()}")
    default_open = not (default == "closed" or closed is True)
    window = _go_duration(spec, "window", errors)
    _go_duration(spec, "interval", errors)
    mode = spec.get("mode")
    if mode is not None and mode not in MODES:
        errors.append(f"spec.mode {mode!r} must be 'enforce' or 'audit'")
        mode = None

    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
    toggles = []
    for key, is_open in ((names.OPEN_ANNOTATION, True), (names.CLOSE_ANNOTATION, False)):
        raw = annotations.get(key)
        if raw is None:
            continue
        try:
            toggles.append(_Toggle(parse_time(raw), is_open))
        except ValueError as err:
            problems.append(f"ignoring {key}: {err}")

    closed_entries: list[tuple[str, Entry]] = []
    opened_entries: list[tuple[str, Entry]] = []
    keeper_names = []
    for keeper in keepers:
        kmeta = metadata(keeper)
        kspec = _spec(keeper) or {}
        if kspec.get("gate") != name or (kmeta.get("namespace") or "default") != namespace:
            continue
        kname = str(kmeta.get("name") or "")
        keeper_names.append(kname)
        try:
            closed_part, opened_part = _keeper_entries(kspec)
        except ScheduleError as err:
            errors.append(f"GateKeeper '{kname}' cannot be evaluated: {err}")
            continue
        closed_entries += [(kname, e) for e in closed_part]
        opened_entries += [(kname, e) for e in opened_part]
    if len(closed_entries) + len(opened_entries) > MAX_ENTRIES:
        errors.append(f"GateKeepers {', '.join(sorted(set(keeper_names)))} have "
                      f"{len(closed_entries) + len(opened_entries)} schedule entries, more than {MAX_ENTRIES}")

    return CompiledGate(
        namespace, name, default_open, window, mode,
        tuple(sorted(toggles, key=lambda t: (t.at, not t.open))),
        tuple(closed_entries), tuple(opened_entries), tuple(errors), tuple(problems),
        _str_or_none(annotations.get(names.REQUESTED_BY_ANNOTATION)),
        _str_or_none(annotations.get(names.MESSAGE_ANNOTATION)),
        tuple(sorted(keeper_names)),
    )


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _keeper_entries(spec: dict) -> tuple[list[Entry], list[Entry]]:
    kind = spec.get("type", "cronexpression")
    if kind != "cronexpression":
        raise ScheduleError(f"type {kind!r} is not supported: use 'cronexpression'")
    tz_name = spec.get("timeZone")
    if tz_name is not None and not isinstance(tz_name, str):
        raise ScheduleError("timeZone must be a string such as 'Europe/Berlin'")
    zone(tz_name)  # an unknown zone is an error even if every entry has CRON_TZ
    cronjob = spec.get("cronjob") or {}
    if not isinstance(cronjob, dict):
        raise ScheduleError("cronjob must be an object with 'closed' and 'opened' lists")
    parts = []
    for key in ("closed", "opened"):
        items = cronjob.get(key) or []
        if not isinstance(items, list):
            raise ScheduleError(f"cronjob.{key} must be a list")
        if len(items) > MAX_ENTRIES_PER_LIST:
            raise ScheduleError(f"cronjob.{key} has {len(items)} entries, more than {MAX_ENTRIES_PER_LIST}")
        parts.append([parse_entry(item, tz_name) for item in items])
    return parts[0], parts[1]


def _applied_toggle(cg: CompiledGate, now: datetime) -> _Toggle | None:
    # Toggles are sorted by (time, open-before-close): the last one not in the future
    # is the latest request, and at equal times the close.
    latest = None
    for toggle in cg.toggles:
        if toggle.at <= now:
            latest = toggle
    if latest is None or (cg.window is not None and now >= latest.at + cg.window):
        return None
    return latest


def _scheduled(cg: CompiledGate, now: datetime) -> tuple[bool, str, Entry] | None:
    for keeper, entry in cg.closed_entries:
        if entry.active(now):
            return False, keeper, entry
    for keeper, entry in cg.opened_entries:
        if entry.active(now):
            return True, keeper, entry
    return None


def _is_open(cg: CompiledGate, now: datetime) -> bool:
    if cg.errors:
        return False
    toggle = _applied_toggle(cg, now)
    if toggle is not None:
        return toggle.open
    scheduled = _scheduled(cg, now)
    return scheduled[0] if scheduled else cg.default_open


def _change_points(cg: CompiledGate, now: datetime) -> list[datetime]:
    """Times after ``now`` at which the state may change; it cannot change before the first."""
    points = [t.at for t in cg.toggles if t.at > now]
    if cg.window is not None:
        points += [t.at + cg.window for t in cg.toggles if t.at + cg.window > now]
    for _, entry in cg.closed_entries + cg.opened_entries:
        nxt = entry.next_change(now)
        if nxt is not None:
            points.append(nxt)
    return points


def next_transition(cg: CompiledGate, now: datetime, horizon: timedelta = HORIZON) -> datetime | None:
    """When the gate next opens (if closed) or closes (if open), if known within ``horizon``.

    Steps through the instants at which an input can change, re-evaluating the gate at each;
    only the entries that change at a step are asked for their next change (a heap), and the
    number of steps shrinks with the number of entries (EVALUATION_BUDGET)."""
    if cg.errors:
        return None
    was_open = _is_open(cg, now)
    deadline = now + horizon
    fixed = [t.at for t in cg.toggles if t.at > now]
    if cg.window is not None:
        fixed += [t.at + cg.window for t in cg.toggles if t.at + cg.window > now]
    fixed.sort(reverse=True)  # popped from the end, earliest first
    entries = [entry for _, entry in cg.closed_entries + cg.opened_entries]
    pending = [(change, i) for i, entry in enumerate(entries) if (change := entry.next_change(now)) is not None]
    heapq.heapify(pending)
    for _ in range(min(_MAX_STEPS, EVALUATION_BUDGET // max(1, len(entries)))):
        if not pending and not fixed:
            return None
        cur = min(pending[0][0] if pending else fixed[-1], fixed[-1] if fixed else pending[0][0])
        while fixed and fixed[-1] <= cur:
            fixed.pop()
        while pending and pending[0][0] <= cur:
            _, i = heapq.heappop(pending)
            change = entries[i].next_change(cur)
            if change is not None:
                heapq.heappush(pending, (change, i))
        if _is_open(cg, cur) != was_open:
            return cur  # change points are exact, even beyond the horizon
        if cur > deadline:
            return None
    return None


def evaluate(cg: CompiledGate, now: datetime) -> GateState:
    """The state of a compiled gate at ``now``."""
    if cg.errors:
        return GateState(cg.namespace, cg.name, False, names.REASON_INVALID, "Gate is invalid: " + "; ".join(cg.errors),
                         mode=cg.mode, problems=cg.problems)
    points = _change_points(cg, now)
    common = dict(mode=cg.mode, problems=cg.problems, valid_until=min(points) if points else None,
                  next_transition=next_transition(cg, now))
    toggle = _applied_toggle(cg, now)
    if toggle is not None:
        reason = names.REASON_OPEN_REQUESTED if toggle.open else names.REASON_CLOSE_REQUESTED
        ends = toggle.at + cg.window if cg.window is not None else None
        verb = "open" if toggle.open else "close"
        message = f"Gate {verb} requested"
        if ends is not None and _is_open(cg, ends) != toggle.open:
            message = f"Gate scheduled for {'closing' if toggle.open else 'opening'} at {format_time(ends)}"
        return GateState(cg.namespace, cg.name, toggle.open, reason, message,
                         requested_at=toggle.at, reset_to_default_at=ends,
                         requested_by=cg.requested_by, request_message=cg.request_message, **common)
    scheduled = _scheduled(cg, now)
    if scheduled is not None:
        is_open, keeper, entry = scheduled
        message = f"Gate {'opened' if is_open else 'closed'} by GateKeeper '{keeper}' schedule {entry}"
        return GateState(cg.namespace, cg.name, is_open, names.REASON_SCHEDULED, message, **common)
    message = f"Gate {'opened' if cg.default_open else 'closed'} by default"
    return GateState(cg.namespace, cg.name, cg.default_open, names.REASON_DEFAULT, message, **common)


def evaluate_gate(gate: dict, keepers: Iterable[dict], now: datetime) -> GateState:
    """The state of ``gate`` at ``now`` under the GateKeepers that name it."""
    return evaluate(compile_gate(gate, keepers), now)


# -- calendar ---------------------------------------------------------------------------

MAX_INTERVAL_STEPS = 5000  # bound on change points examined for one calendar


@dataclass(frozen=True)
class Interval:
    """A span ``[start, end)`` during which a gate is open or closed, and why it is at its start.

    ``known`` is False for the tail of a calendar whose schedule changes too often to list
    within the bound: its state there is not computed (and shown as unknown, not as open).
    """

    start: datetime
    end: datetime
    open: bool
    reason: str
    message: str
    known: bool = True


def _cause(cg: CompiledGate, now: datetime) -> tuple[bool, str, str]:
    """Whether the gate is open at ``now``, the reason, and a short message (no look-ahead)."""
    if cg.errors:
        return False, names.REASON_INVALID, "Gate is invalid: " + "; ".join(cg.errors)
    toggle = _applied_toggle(cg, now)
    if toggle is not None:
        verb = "open" if toggle.open else "close"
        by = f" by {cg.requested_by}" if cg.requested_by else ""
        why = f": {cg.request_message}" if cg.request_message else ""
        return toggle.open, names.REASON_OPEN_REQUESTED if toggle.open else names.REASON_CLOSE_REQUESTED, f"Gate {verb} requested{by}{why}"
    scheduled = _scheduled(cg, now)
    if scheduled is not None:
        is_open, keeper, entry = scheduled
        return is_open, names.REASON_SCHEDULED, f"Gate {'opened' if is_open else 'closed'} by GateKeeper '{keeper}' schedule {entry}"
    return cg.default_open, names.REASON_DEFAULT, f"Gate {'opened' if cg.default_open else 'closed'} by default"


def intervals(cg: CompiledGate, start: datetime, end: datetime,
              max_steps: int = MAX_INTERVAL_STEPS) -> list[Interval]:
    """The gate's open and closed spans covering ``[start, end)``, adjacent spans of the same
    state merged; they come from the change points the admission decisions use.

    At most ``max_steps`` change points are examined: past them the rest of the range is one
    interval with ``known=False`` (a schedule that flips every minute cannot be listed for weeks).
    """
    if end <= start:
        return []
    out: list[Interval] = []
    cur = start
    for _ in range(max_steps):
        is_open, reason, message = _cause(cg, cur)
        points = [p for p in _change_points(cg, cur) if p > cur] if not cg.errors else []
        nxt = min(min(points), end) if points else end
        if out and out[-1].open == is_open and out[-1].known:
            out[-1] = Interval(out[-1].start, nxt, is_open, out[-1].reason, out[-1].message)
        else:
            out.append(Interval(cur, nxt, is_open, reason, message))
        if nxt >= end:
            return out
        cur = nxt
    out.append(Interval(cur, end, False, names.REASON_UNKNOWN,
                        f"the schedule changes more than {max_steps} times in this range; not computed further",
                        known=False))
    return out


def time_zone(cg: CompiledGate) -> tzinfo:
    """The zone a gate's schedules are read in: their common zone, else UTC (no schedule, or mixed)."""
    zones = {entry.spec.zone for _, entry in cg.closed_entries + cg.opened_entries}
    return zones.pop() if len(zones) == 1 else UTC
