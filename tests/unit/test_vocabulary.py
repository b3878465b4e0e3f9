"""One vocabulary: Flux and gating strings only in core.base.names, timestamps only in core.base.timefmt."""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import get_args

from admission.core.base import names

PACKAGE = Path(names.__file__).resolve().parents[2]
NAMES = Path(names.__file__).resolve()
TIMEFMT = PACKAGE / "core" / "base" / "timefmt.py"
OBJECTS = PACKAGE / "core" / "base" / "objects.py"
CLOCK = PACKAGE / "clock.py"
# Log lines name an object by its kind, as kopf does ({"Gate": {"namespace": ..., "name": ...}}).
LOG_KEYS = {names.GATE_KIND, names.GATEKEEPER_KIND}
VOCABULARY = {
    value
    for key, value in vars(names).items()
    if key.isupper()
    and isinstance(value, str)
    and value not in LOG_KEYS
    and (any(c in value for c in "./:") or value[:1].isupper())
}


def modules():
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


@functools.cache
def _tree(path: Path) -> ast.AST:
    return ast.parse(path.read_text())


def nodes_outside(home: Path) -> Iterator[tuple[str, ast.AST]]:
    """Each syntax node of every module but ``home``, with where it is (``path:line``)."""
    for path in modules():
        if path != home:
            for node in ast.walk(_tree(path)):
                yield f"{path.relative_to(PACKAGE.parent)}:{getattr(node, 'lineno', 0)}", node


def docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def strings_outside(home: Path, spelt: Callable[[str], bool]) -> list[str]:
    """The string constants (docstrings aside) of every module but ``home`` that ``spelt`` finds."""
    skip = set().union(*(docstrings(_tree(path)) for path in modules()))
    return [
        f"{where}: {node.value!r}"
        for where, node in nodes_outside(home)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in skip
        and spelt(node.value)
    ]


def test_flux_and_gating_strings_are_written_only_in_names():
    found = strings_outside(NAMES, lambda value: value in VOCABULARY or "fluxcd.io" in value)
    assert not found, "use admission.core.base.names:\n" + "\n".join(found)


def test_instants_are_formatted_only_in_timefmt():
    found = [
        f"{where}: .{node.attr}"
        for where, node in nodes_outside(TIMEFMT)
        if isinstance(node, ast.Attribute) and node.attr in ("strftime", "isoformat")
    ]
    assert not found, "use admission.core.base.timefmt:\n" + "\n".join(found)


def _reads_metadata(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and bool(node.args)
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value == "metadata"
    )


def test_metadata_is_read_only_through_the_one_accessor():
    # obj.get("metadata") or {} by hand is where a null or a list in a review's metadata becomes
    # a crash (code that checks isinstance before it writes is fine).
    found = [
        where
        for where, node in nodes_outside(OBJECTS)
        if (_reads_metadata(node) and len(node.args) == 2)
        or (isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and _reads_metadata(node.values[0]))
    ]
    assert not found, "use admission.core.base.objects.metadata:\n" + "\n".join(found)


def test_the_time_is_read_only_through_the_one_clock():
    found = [
        f"{where}: {node.value.id}.{node.attr}"
        for where, node in nodes_outside(CLOCK)
        if isinstance(node, ast.Attribute)
        and node.attr in ("now", "utcnow", "today")
        and isinstance(node.value, ast.Name)
        and node.value.id in ("datetime", "date")
    ]
    assert not found, "use admission.clock.utcnow:\n" + "\n".join(found)


# The closed sets names.py types (Literal): each value spelt there only, even quoted in a message.
# (What a hold held, edit or content, is typed too; both are also plain words, a JSON field's name.)
CLOSED_SETS = {value for closed in (names.Mode, names.Require) for value in get_args(closed)}
QUOTED = re.compile("|".join(rf"['\"]{re.escape(value)}['\"]" for value in sorted(CLOSED_SETS)))


def test_modes_and_other_closed_sets_are_spelled_only_in_names():
    found = strings_outside(NAMES, lambda value: value in CLOSED_SETS or bool(QUOTED.search(value)))
    assert not found, (
        "use admission.core.base.names (ENFORCE, AUDIT, MODES, REQUIRE_ALL, ...):\n" + "\n".join(found)
    )


# f"{kind}/{namespace}/{name}" by hand (a webhook entry, Kind/configuration/entry, is not an object's)
OBJECT_LABEL = re.compile(r"""f["'][^"']*\{[^}]*kind[^}]*\}/\{[^}]*namespace""")


def test_objects_are_labelled_kind_namespace_name_by_one_builder():
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{number}"
        for path in modules()
        if path != OBJECTS
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if OBJECT_LABEL.search(line)
    ]
    assert not found, "use admission.core.base.objects.label:\n" + "\n".join(found)
