"""A gate's definition: its spec and its GateKeepers' entries, parsed and checked once (CompiledGate)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeAlias

from admission.core.base import names
from admission.core.base.objects import metadata, namespace_of, object_key
from admission.core.base.timefmt import format_duration, parse_duration, parse_time
from admission.core.gates import approvalrecord, approvalseal, togglestamp
from admission.core.gates import approvals as approvals_
from admission.core.gates.approvals import Approval
from admission.core.gates.togglestamp import ToggleIdentity
from admission.core.time.calendarentries import CalendarEntry, CalendarGuard, keeper_calendars
from admission.core.time.cron import ScheduleError, zone
from admission.core.time.schedule import Entry, parse_entry

MAX_ENTRIES = 32  # schedule entries of one gate, over all its GateKeepers
MAX_GATE_DURATION = timedelta(days=100 * 365)  # spec.window, spec.interval
MAX_ENTRIES_PER_LIST = 16  # the CRD's maxItems for cronjob.closed and cronjob.opened

# The fields a Gate or GateKeeper has (the CRDs'): any other is a typo, which must not pass as an
# absent field (``spec: {defualt: closed}`` would read as an open gate). The API server prunes
# them from cluster objects; files and the CRD's free-form parts keep them.
OBJECT_FIELDS = ("apiVersion", "kind", "metadata", "spec", "status")
GATE_FIELDS = ("default", "closed", "window", "interval", "mode", "approvals")
KEEPER_FIELDS = ("gate", "type", "timeZone", "cronjob", "calendars")
CRONJOB_FIELDS = ("closed", "opened")

# What a gate's schedule is made of: cron entries, and its GateKeepers' calendars with their guards.
GateEntry: TypeAlias = "Entry | CalendarEntry | CalendarGuard"


@dataclass(frozen=True)
class Toggle:
    at: datetime
    open: bool


@dataclass(frozen=True)
class CompiledGate:
    """A Gate and its GateKeepers, parsed once and evaluated at many times."""

    namespace: str
    name: str
    default_open: bool = True
    window: timedelta | None = None
    mode: names.Mode | None = None
    toggles: tuple[Toggle, ...] = ()
    closed_entries: tuple[tuple[str, GateEntry], ...] = ()
    opened_entries: tuple[tuple[str, GateEntry], ...] = ()
    errors: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    requested_by: str | None = None
    request_message: str | None = None
    keepers: tuple[str, ...] = field(default=())
    # Why the gate's definition cannot be known (a gates file that may define or schedule it
    # was never read whole): closed, reason Unknown, whatever else is known of it.
    unknown: str | None = None
    approvals: tuple[Approval, ...] = ()  # sealed by the webhook: these may count
    required_approvals: int = 1
    unverified_approvals: tuple[Approval, ...] = ()  # shown as unverified, never counted
    toggled_by: ToggleIdentity | None = None  # who the webhook's stamp says toggled it, verified or not

    @property
    def fixed(self) -> bool:
        """Closed for a reason no time can change (invalid, or unknown): nothing to search."""
        return bool(self.errors) or self.unknown is not None


def _spec(obj: object) -> dict[str, Any] | None:
    spec = obj.get("spec", {}) if isinstance(obj, dict) else None
    return {} if spec is None else spec if isinstance(spec, dict) else None


def unknown_fields(value: dict[str, Any], known: tuple[str, ...], where: str) -> list[str]:
    """One line per field of ``value`` that is not ``known``, naming the fields that are."""
    return [
        f"{where}{key!s} is not a known field (known: {', '.join(known)})"
        for key in sorted(map(str, set(value) - set(known)))
    ]


def _go_duration(spec: dict[str, Any], key: str, errors: list[str]) -> timedelta | None:
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
    if value > MAX_GATE_DURATION:  # a toggle's end must stay a date (year 9999 at most)
        errors.append(f"spec.{key} {raw!r} is longer than {format_duration(MAX_GATE_DURATION)}")
        return None
    return value


def compile_gate(
    gate: dict[str, Any], keepers: Iterable[dict[str, Any]] = (), approval_key: bytes | None = None
) -> CompiledGate:
    """Parse a Gate and the GateKeepers that name it; errors make it Invalid, never raise.
    ``approval_key`` verifies the webhook's seal on approvals: without it none counts."""
    meta = metadata(gate)
    namespace, name = object_key(gate)
    errors: list[str] = []
    problems: list[str] = []
    spec = _spec(gate)
    if spec is None:
        return CompiledGate(namespace, name, errors=("spec must be an object",))
    errors += unknown_fields(gate, OBJECT_FIELDS, "") + unknown_fields(spec, GATE_FIELDS, "spec.")
    default_open, window = _state_fields(spec, errors)
    approval_policy, approval_errors = approvals_.parse_policy(spec)
    errors += approval_errors
    mode = _mode(spec, errors)

    annotations = meta.get("annotations")
    annotations = annotations if isinstance(annotations, dict) else {}
    toggles = _toggles(annotations, problems)
    # Counted under the policy now: lowering it never makes an approval given before count.
    parsed, approval_problems = approvals_.parse_all(
        annotations, approval_policy, gate_uid=str(meta.get("uid") or ""), secret=approval_key
    )
    parsed, too_many = approvalrecord.counting(gate, parsed)  # not ended, and not too many
    approved = tuple(a for a in parsed if a.unverified is None)
    unverified = tuple(a for a in parsed if a.unverified is not None)
    problems += approval_problems + ([too_many] if too_many else [])
    # A reader without the key (kubectl gate) cannot tell: not the approval's problem.
    problems += [
        f"ignoring {a.key}: {a.unverified}" for a in unverified if a.unverified != approvalseal.NO_KEY
    ]
    schedule = _keeper_schedule(namespace, name, keepers, errors)

    return CompiledGate(
        namespace,
        name,
        default_open,
        window,
        mode,
        tuple(sorted(toggles, key=lambda t: (t.at, not t.open))),
        schedule.closed,
        schedule.opened,
        tuple(errors),
        tuple(problems),
        _str_or_none(annotations.get(names.REQUESTED_BY_ANNOTATION)),
        _str_or_none(annotations.get(names.MESSAGE_ANNOTATION)),
        schedule.keepers,
        approvals=approved,
        required_approvals=approval_policy.required,
        unverified_approvals=unverified,
        toggled_by=togglestamp.read(gate, approval_key),
    )


def _state_fields(spec: dict[str, Any], errors: list[str]) -> tuple[bool, timedelta | None]:
    """``spec.default``/``spec.closed`` (is it open by default) and ``spec.window``;
    ``spec.interval`` is only checked."""
    default = spec.get("default")
    closed = spec.get("closed")
    if default not in (None, "opened", "closed"):
        errors.append(f"spec.default {default!r} must be 'opened' or 'closed'")
    if closed is not None and not isinstance(closed, bool):
        errors.append(f"spec.closed {closed!r} must be true or false")
    elif (default == "opened" and closed is True) or (default == "closed" and closed is False):
        errors.append(f"spec.default '{default}' contradicts spec.closed: {str(closed).lower()}")
    window = _go_duration(spec, "window", errors)
    _go_duration(spec, "interval", errors)
    return not (default == "closed" or closed is True), window


def _mode(spec: dict[str, Any], errors: list[str]) -> names.Mode | None:
    mode = spec.get("mode")
    if mode is not None and mode not in names.MODES:
        errors.append(f"spec.mode {mode!r} must be " + " or ".join(map(repr, names.MODES)))
        return None
    return mode


def _toggles(annotations: dict[str, Any], problems: list[str]) -> list[Toggle]:
    toggles: list[Toggle] = []
    for key, is_open in ((names.OPEN_ANNOTATION, True), (names.CLOSE_ANNOTATION, False)):
        raw = annotations.get(key)
        if raw is None:
            continue
        try:
            toggles.append(Toggle(parse_time(raw), is_open))
        except ValueError as err:
            problems.append(f"ignoring {key}: {err}")
    return toggles


@dataclass(frozen=True)
class _Schedule:
    closed: tuple[tuple[str, GateEntry], ...]
    opened: tuple[tuple[str, GateEntry], ...]
    keepers: tuple[str, ...]


def _keeper_schedule(
    namespace: str, name: str, keepers: Iterable[dict[str, Any]], errors: list[str]
) -> _Schedule:
    """The entries of the GateKeepers that name this gate, each with its keeper's name."""
    closed_entries: list[tuple[str, GateEntry]] = []
    opened_entries: list[tuple[str, GateEntry]] = []
    keeper_names: list[str] = []
    counted = 0
    for keeper in keepers:
        kspec = _spec(keeper) or {}
        if kspec.get("gate") != name or namespace_of(keeper) != namespace:
            continue
        kname = str(metadata(keeper).get("name") or "")
        keeper_names.append(kname)
        try:
            if isinstance(keeper, dict) and (extra := unknown_fields(keeper, OBJECT_FIELDS, "")):
                raise ScheduleError("; ".join(extra))
            closed_part, opened_part = _keeper_entries(kspec)
            feeds = keeper_calendars(kname, kspec, keeper.get("status") if isinstance(keeper, dict) else None)
        except ScheduleError as err:
            errors.append(f"GateKeeper '{kname}' cannot be evaluated: {err}")
            continue
        # A calendar that cannot be read closes the gate: its guard comes first, so it says why.
        closing: list[GateEntry] = [*feeds.guards, *closed_part, *feeds.closed]
        opening: list[GateEntry] = [*opened_part, *feeds.opened]
        closed_entries += [(kname, e) for e in closing]
        opened_entries += [(kname, e) for e in opening]
        counted += len(closed_part) + len(opened_part) + len(feeds.guards)
    if counted > MAX_ENTRIES:
        errors.append(
            f"GateKeepers {', '.join(sorted(set(keeper_names)))} have "
            f"{counted} schedule entries and calendars, more than {MAX_ENTRIES}"
        )
    return _Schedule(tuple(closed_entries), tuple(opened_entries), tuple(sorted(keeper_names)))


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _keeper_entries(spec: dict[str, Any]) -> tuple[list[Entry], list[Entry]]:
    unknown = unknown_fields(spec, KEEPER_FIELDS, "spec.")
    if unknown:
        raise ScheduleError("; ".join(unknown))
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
    unknown = unknown_fields(cronjob, CRONJOB_FIELDS, "spec.cronjob.")
    if unknown:
        raise ScheduleError("; ".join(unknown))
    parts: list[list[Entry]] = []
    for key in ("closed", "opened"):
        items = cronjob.get(key) or []
        if not isinstance(items, list):
            raise ScheduleError(f"cronjob.{key} must be a list")
        if len(items) > MAX_ENTRIES_PER_LIST:
            raise ScheduleError(f"cronjob.{key} has {len(items)} entries, more than {MAX_ENTRIES_PER_LIST}")
        parts.append([parse_entry(item, tz_name) for item in items])
    return parts[0], parts[1]


def approval_expiry(gate: dict[str, Any]) -> timedelta:
    """How long an approval written without ``expires`` lasts: the gate's window, else a day (at
    most ``approvals.MAX_EXPIRY``)."""
    spec = _spec(gate) or {}
    return min(_go_duration(spec, "window", []) or approvals_.DEFAULT_EXPIRY, approvals_.MAX_EXPIRY)
