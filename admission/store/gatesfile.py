"""What one gates file holds: its Gates and GateKeepers, or why it cannot be used and what it may define."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from admission.core.base import names
from admission.core.base.objects import Key, object_key
from admission.store.yamldocs import describe_error, documents, is_list


@dataclass
class Scope:
    """The gates a file that cannot be used may define or schedule: every gate, the gates of
    some namespaces, some gates. Derived from what it holds, widened where a part is unreadable."""

    everything: bool = False
    namespaces: set[str] = field(default_factory=set)
    gates: set[Key] = field(default_factory=set)

    def text(self, text: str) -> None:
        """A part that was not read as objects: it may hold any Gate or GateKeeper, unless it
        cannot spell one (a kind is ``Gate``/``GateKeeper``; escapes could spell it otherwise)."""
        if "gate" in text.lower() or "\\" in text:
            self.everything = True

    def object(self, doc: dict[str, Any]) -> None:
        """A Gate or GateKeeper document, as far as its fields can be read."""
        meta = doc.get("metadata")
        namespace = meta.get("namespace") if isinstance(meta, dict) else None
        if not isinstance(meta, dict) or not (namespace is None or isinstance(namespace, str)):
            self.everything = True  # no telling which namespace
            return
        namespace = namespace or names.DEFAULT_NAMESPACE
        if doc.get("kind") == names.GATE_KIND:
            name = meta.get("name")
        else:
            spec = doc.get("spec")
            name = spec.get("gate") if isinstance(spec, dict) else None
        if isinstance(name, str) and name:
            self.gates.add((namespace, name))
        else:
            self.namespaces.add(namespace)


def _check(doc: dict[str, Any]) -> list[str]:
    """Why a Gate or GateKeeper document cannot be used (none: it can). Values inside ``spec``
    are the gate's to judge (a gate that cannot be evaluated is Invalid), but a GateKeeper must
    say which gate it schedules, or it would be dropped and that gate left open."""
    kind = doc["kind"]
    problems = []
    api = doc.get("apiVersion")
    if api is not None and api != names.GATING_API_VERSION:
        problems.append(f"{kind} has apiVersion {api!r}, want {names.GATING_API_VERSION}")
    meta = doc.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        return problems + [f"a {kind} has no metadata.name"]
    what = f"{kind} {meta['name']!r}"
    namespace = meta.get("namespace")
    if namespace is not None and not (isinstance(namespace, str) and namespace):
        problems.append(f"{what} has a metadata.namespace that is not a name")
    for part in ("labels", "annotations"):
        values = meta.get(part)
        if values is not None and not (
            isinstance(values, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in values.items())
        ):
            problems.append(f"{what} has metadata.{part} that are not a mapping of strings")
    spec = doc.get("spec")
    if spec is not None and not isinstance(spec, dict):
        problems.append(f"{what} has a spec that is not a mapping")
    elif kind == names.GATEKEEPER_KIND and not (
        isinstance(spec, dict) and isinstance(spec.get("gate"), str) and spec["gate"]
    ):
        problems.append(f"{what} names no gate (spec.gate)")
    return problems


@dataclass
class Parsed:
    docs: list[dict[str, Any]]  # the Gates and GateKeepers; used only when there is no problem
    problem: str | None
    scope: Scope  # what the file may define or schedule, for when it cannot be used


def _describe(err: BaseException) -> str:
    if isinstance(err, yaml.YAMLError):
        return describe_error(err)
    if isinstance(err, RecursionError):
        return "nested too deeply"
    return " ".join(str(err).split()) or type(err).__name__


def parse(text: str) -> Parsed:
    """The Gates and GateKeepers of a gates file, every reason it cannot be used (in one line),
    and what it may define. Any shape of YAML is an answer, never an exception."""
    found: list[dict[str, Any]] = []
    problems: list[str] = []
    scope = Scope()
    start = 0
    try:
        for number, (doc, end) in enumerate(documents(text), 1):
            span, start = text[start:end], end
            items = [doc]
            if is_list(doc):
                items = doc.get("items") or []
                if not isinstance(items, list):
                    problems.append(f"document {number} is a {doc['kind']} whose items are not a list")
                    scope.text(span)
                    continue
            for item in items:
                if item is None:
                    continue
                if not isinstance(item, dict):
                    problems.append(f"document {number} is a {type(item).__name__}, not a mapping")
                    scope.text(span)
                    continue
                if item.get("kind") not in (names.GATE_KIND, names.GATEKEEPER_KIND):
                    continue  # other objects may share the directory
                scope.object(item)
                problems += _check(item)
                found.append(item)
    except (yaml.YAMLError, RecursionError, ValueError, TypeError) as err:
        problems.append(_describe(err))
        scope.text(text[start:])  # from the end of the last document read
    return Parsed(found, "; ".join(problems) if problems else None, scope)


def gates_of(doc: dict[str, Any]) -> Key | None:
    """The gate a Gate document defines or a GateKeeper document schedules."""
    if doc["kind"] == names.GATE_KIND:
        return object_key(doc)
    return object_key(doc)[0], doc["spec"]["gate"]
