"""What a Flux object asks of its gates: references, require mode, suspension (SPEC §4)."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from admission.core.base import names
from admission.core.base.objects import annotations as annotations_of
from admission.core.base.objects import namespace_of
from admission.core.base.timefmt import format_time
from admission.core.time.cron import ScheduleError, parse_cron

_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# Distinct gates one object may reference (annotation and spec.gates together). No real object
# needs more; one that names more is held, never judged by some of them only.
MAX_REFS = 64
# The longest valid reference is a 63-character namespace, '/' and a 253-character name: the
# annotation can name MAX_REFS of them with ", " between them. A longer annotation, and a
# spec.gates of more entries (repeats included) than MAX_LISTED, are held too: refused before
# they are read, so no input costs more than this to judge.
MAX_REF_LENGTH = 63 + 1 + 253
MAX_ANNOTATION_LENGTH = MAX_REFS * (MAX_REF_LENGTH + 2)
MAX_LISTED = 1024


@dataclass(frozen=True)
class GateRef:
    """A reference to a gate; ``error`` is set when the reference itself is unusable."""

    namespace: str
    name: str
    error: str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Policy:
    """The gates an object references and how many must be open."""

    refs: tuple[GateRef, ...]
    require: names.Require
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Suspension:
    """Effective suspension: ``suspended`` feeds status.suspended; ``hold`` holds changes."""

    suspended: bool
    hold: str | None = None  # why the object is held by annotation or schedule
    until: datetime | None = None  # when a schedule-driven hold may end


def _ref(text: object, namespace: str) -> GateRef:
    if isinstance(text, dict):
        name, ns = text.get("name"), text.get("namespace") or namespace
    elif isinstance(text, str):
        ns, _, name = text.strip().rpartition("/")
        ns = ns or namespace
    else:
        return GateRef(namespace, str(text), f"gate reference {text!r} is not a name")
    if not isinstance(name, str) or not isinstance(ns, str):
        return GateRef(str(ns), str(name), f"gate reference {text!r} is not a name")
    if not _NAME.fullmatch(name) or not is_namespace(ns):
        return GateRef(ns, name, f"gate reference {text!r} is not a valid [namespace/]name")
    return GateRef(ns, name)


def is_name(text: object) -> bool:
    """Whether ``text`` can name a gate (a DNS-1123 subdomain)."""
    return isinstance(text, str) and bool(_NAME.fullmatch(text))


def is_namespace(text: object) -> bool:
    """Whether ``text`` can name a Kubernetes namespace (a DNS-1123 label)."""
    return isinstance(text, str) and bool(_NAMESPACE.fullmatch(text))


def is_object_name(text: object) -> bool:
    """Whether ``text`` can name a namespaced custom object (a DNS-1123 subdomain): no
    slashes, no ``..``, at most 253 characters."""
    return isinstance(text, str) and len(text) <= 253 and bool(_SUBDOMAIN.fullmatch(text))


def _spec_gates(spec_gates: object, namespace: str) -> tuple[list[object], object]:
    """The entries of both seed shapes: a list of ``{name, namespace?}`` (RFC) or
    ``{require, refs}``; another shape is one unusable reference."""
    if spec_gates is None:
        return [], None
    if isinstance(spec_gates, list):
        return spec_gates, None
    if isinstance(spec_gates, dict) and isinstance(spec_gates.get("refs") or [], list):
        return spec_gates.get("refs") or [], spec_gates.get("require")
    return [GateRef(namespace, "spec.gates", "spec.gates must be a list or {require, refs: [...]}")], None


def _form(entry: object) -> object:
    """What tells an entry from another before it is read (None: read it in any case)."""
    if isinstance(entry, str):
        return entry.strip()
    if isinstance(entry, dict):
        name, ns = entry.get("name"), entry.get("namespace")
        if isinstance(name, str) and (ns is None or isinstance(ns, str)):
            return name, ns
    return None


def _add(unique: dict[str, GateRef], entries: Iterable[object], namespace: str) -> bool:
    """Add each distinct reference among ``entries`` to ``unique``, repeats dropped first;
    False as soon as there are more than MAX_REFS (the rest is not read)."""
    seen: set[object] = set()
    for entry in entries:
        form = _form(entry)
        if form is not None:
            if form in seen:
                continue
            seen.add(form)
        ref = entry if isinstance(entry, GateRef) else _ref(entry, namespace)
        unique.setdefault(ref.key, ref)
        if len(unique) > MAX_REFS:
            return False
    return True


def _annotation_refs(raw: str, namespace: str) -> tuple[GateRef, ...]:
    """The distinct references the annotation names, in order; MAX_REFS + 1 of them when it
    names more than MAX_REFS. (Read once per annotation: ``_annotations_policy`` keeps it.)"""
    unique: dict[str, GateRef] = {}
    parts = dict.fromkeys(map(str.strip, raw.split(",")))
    parts.pop("", None)  # "a,, b" and a trailing comma name nothing
    _add(unique, parts, namespace)
    return tuple(unique.values())


def _too_long(raw: object, entries: list[object]) -> str | None:
    if isinstance(raw, str) and len(raw) > MAX_ANNOTATION_LENGTH:
        return (
            f"the {names.GATES_ANNOTATION} annotation is {len(raw)} characters long, "
            f"more than the {MAX_ANNOTATION_LENGTH} allowed"
        )
    if len(entries) > MAX_LISTED:
        return f"spec.gates lists {len(entries)} entries, more than the {MAX_LISTED} allowed"
    return None


_NO_POLICY = Policy((), names.REQUIRE_ALL)
# A policy read from annotations alone is kept, for the same annotations in the same namespace:
# every request reads two (old and new), mostly alike across objects and requests, and most
# objects carry one of a few short annotations. Kept only for short values, so what is kept
# stays small (at most _KEPT of at most _KEPT_LENGTH each); a long one is rare and read each time.
_KEPT, _KEPT_LENGTH = 2048, 1024


def policy_of(obj: dict[str, Any] | None) -> Policy:
    """The gate policy of a Flux object: union of the annotation and ``spec.gates``."""
    if not isinstance(obj, dict):
        return _NO_POLICY
    ann = annotations_of(obj)
    raw, require = ann.get(names.GATES_ANNOTATION), ann.get(names.REQUIRE_ANNOTATION)
    spec = obj.get("spec")
    spec_gates = spec.get("gates") if isinstance(spec, dict) else None
    if spec_gates is None and _short(raw) and _short(require):
        return _annotations_policy(namespace_of(obj), raw, require)
    return _policy(namespace_of(obj), raw, require, spec_gates)


def _short(value: object) -> bool:
    return value is None or (isinstance(value, str) and len(value) <= _KEPT_LENGTH)


@functools.lru_cache(maxsize=_KEPT)
def _annotations_policy(namespace: str, raw: str | None, require: str | None) -> Policy:
    return _policy(namespace, raw, require, None)


def _policy(namespace: str, raw: object, require: object, spec_gates: object) -> Policy:
    entries, spec_require = _spec_gates(spec_gates, namespace)
    # Repeats go first, then the distinct references are counted: naming a gate many times
    # never pushes another out. Too many is held, not cut: judged closed, and says why.
    unique: dict[str, GateRef] = {}
    too_many = _too_long(raw, entries)
    if too_many is None:
        refs = _annotation_refs(raw, namespace) if isinstance(raw, str) else ()
        if not (_add(unique, refs, namespace) and _add(unique, entries, namespace)):
            too_many = f"more than the {MAX_REFS} distinct gate references allowed"
    if too_many is not None:
        unique = {"": GateRef(namespace, "gates", too_many)}

    # When in doubt, the stricter mode: an unknown value or a disagreement means all.
    asked = [v for v in (require, spec_require) if v is not None]
    notes = [
        f"require {v!r} is not {names.REQUIRE_ALL!r} or {names.REQUIRE_ONE_OF!r}, using {names.REQUIRE_ALL}"
        for v in asked
        if v not in (names.REQUIRE_ALL, names.REQUIRE_ONE_OF)
    ]
    if names.REQUIRE_ALL in asked and names.REQUIRE_ONE_OF in asked:  # not set(): a value may be a list
        notes.append("the require annotation and spec.gates.require disagree, using all")
    one_of = bool(asked) and all(v == names.REQUIRE_ONE_OF for v in asked)
    return Policy(tuple(unique.values()), names.REQUIRE_ONE_OF if one_of else names.REQUIRE_ALL, tuple(notes))


def _quoted(keys: list[str]) -> str:
    return ", ".join(f"'{key}'" for key in keys)


def loosens(old: Policy, new: Policy) -> str | None:
    """Why going from ``old`` to ``new`` asks less of the gates, as written, or None. (Whether
    it would release a held object, however written, is ``decision.releases()``.)"""
    old_keys, new_keys = {r.key for r in old.refs}, {r.key for r in new.refs}
    removed = [ref.key for ref in old.refs if ref.key not in new_keys]
    if removed:
        return "removes gate references " + _quoted(removed)
    if not old.refs:
        return None  # nothing held it: gating an object anew asks more, whatever the mode
    if old.require == names.REQUIRE_ALL and new.require == names.REQUIRE_ONE_OF and len(new.refs) > 1:
        return "loosens require from all to oneOf"
    # Under oneOf each reference is one more gate whose opening alone releases the object.
    added = [ref.key for ref in new.refs if ref.key not in old_keys]
    if new.require == names.REQUIRE_ONE_OF and added:
        return f"adds gate references {_quoted(added)} under require oneOf"
    return None


_HOLDING_ANNOTATIONS = (
    names.GATES_ANNOTATION,
    names.SUSPENDED_ANNOTATION,
    names.SUSPEND_DURING_ANNOTATION,
    names.SUSPENDED_DURING_ANNOTATION,
)


def may_be_held(obj: dict[str, Any] | None) -> bool:
    """Whether the object names a gate or a suspension at all: most Flux objects do not, and
    their status writes (every reconcile) need no further look."""
    ann = annotations_of(obj)
    if any(key in ann for key in _HOLDING_ANNOTATIONS):
        return True
    spec = obj.get("spec") if isinstance(obj, dict) else None
    return isinstance(spec, dict) and spec.get("gates") is not None


def same_gating(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two versions of an object name the same gates and suspensions: ``policy_of``
    and ``suspension_of`` read nothing else, so at one instant they judge both alike (a status
    write's old and new object, whose metadata and spec the API server keeps)."""
    return _gating(a) == _gating(b)


def _gating(obj: dict[str, Any]) -> tuple[object, ...]:
    spec = obj.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    return namespace_of(obj), annotations_of(obj), spec.get("gates"), spec.get("suspend")


def suspension_of(obj: dict[str, Any] | None, now: datetime) -> Suspension:
    """``spec.suspend`` OR the suspended annotation OR an active suspendDuring cron."""
    if not isinstance(obj, dict):
        return Suspension(False)
    ann = annotations_of(obj)
    spec = obj.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    holds: list[str] = []
    until: datetime | None = None
    if names.SUSPENDED_ANNOTATION in ann:
        reason = ann.get(names.SUSPENDED_ANNOTATION)
        holds.append(f"suspended by {names.SUSPENDED_ANNOTATION}" + (f" ({reason!r})" if reason else ""))
    for key in (names.SUSPEND_DURING_ANNOTATION, names.SUSPENDED_DURING_ANNOTATION):
        expr = ann.get(key)
        if expr is None:
            continue
        try:
            spec_cron = parse_cron(expr)  # UTC unless CRON_TZ= says otherwise
        except ScheduleError as err:
            holds.append(f"{key} cannot be evaluated, so it counts as active: {err}")
            continue
        if spec_cron.matches(now):
            ends = spec_cron.next_flip(now)
            until = ends if until is None or (ends is not None and ends > until) else until
            holds.append(f"suspended by {key} '{expr}'" + (f" until {format_time(ends)}" if ends else ""))
    hold = "; ".join(holds) if holds else None
    return Suspension(bool(spec.get("suspend") is True or hold), hold, until)


MAX_SUSPEND_WINDOWS = 500  # windows listed per annotation and range: a cron active every other minute is cut


@dataclass(frozen=True)
class SuspendWindow:
    """A span of ``[start, end)`` when a suspendDuring annotation suspends its object;
    ``error`` instead when the annotation cannot be read (then it counts as active throughout)."""

    annotation: str
    expression: str
    start: datetime
    end: datetime
    error: str | None = None


def suspend_windows(obj: dict[str, Any] | None, start: datetime, end: datetime) -> list[SuspendWindow]:
    """When the object's suspendDuring crons suspend it within ``[start, end)``: the spans
    ``suspension_of`` finds active, from the same cron matching (the board's timeline)."""
    ann = annotations_of(obj)
    out: list[SuspendWindow] = []
    for key in (names.SUSPEND_DURING_ANNOTATION, names.SUSPENDED_DURING_ANNOTATION):
        expr = ann.get(key)
        if expr is None:
            continue
        try:
            spans = _cron_windows(expr, start, end)
        except ScheduleError as err:
            out.append(SuspendWindow(key, expr, start, end, str(err)))
            continue
        out += [SuspendWindow(key, expr, begins, ends) for begins, ends in spans]
    return out


@functools.lru_cache(maxsize=256)  # objects of a fleet share a handful of expressions
def _cron_windows(expr: object, start: datetime, end: datetime) -> tuple[tuple[datetime, datetime], ...]:
    """The spans of ``[start, end)`` where the cron ``expr`` matches, at most MAX_SUSPEND_WINDOWS;
    ScheduleError when it cannot be read."""
    spec_cron = parse_cron(expr)
    cur, found = start, list[tuple[datetime, datetime]]()
    while cur < end and len(found) < MAX_SUSPEND_WINDOWS:
        active = spec_cron.matches(cur)
        flip = spec_cron.next_flip(cur, until=end)
        nxt = min(flip, end) if flip is not None else end
        if active:
            found.append((cur, nxt))
        cur = nxt
    return tuple(found)
