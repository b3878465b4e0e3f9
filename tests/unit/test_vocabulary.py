"""One vocabulary: Flux and gating strings only in core.names, timestamps only in core.timefmt."""

from __future__ import annotations

import ast
from pathlib import Path

from admission.core import names

PACKAGE = Path(names.__file__).resolve().parents[1]
NAMES = Path(names.__file__).resolve()
TIMEFMT = PACKAGE / "core" / "timefmt.py"
# Log lines name an object by its kind, as kopf does ({"Gate": {"namespace": ..., "name": ...}}).
LOG_KEYS = {names.GATE_KIND, names.GATEKEEPER_KIND}
VOCABULARY = {value for key, value in vars(names).items()
              if key.isupper() and isinstance(value, str) and value not in LOG_KEYS
              and (any(c in value for c in "./:") or value[:1].isupper())}


def modules():
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def test_flux_and_gating_strings_are_written_only_in_names():
    found = []
    for path in modules():
        if path == NAMES:
            continue
        tree = ast.parse(path.read_text())
        skip = docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
                if node.value in VOCABULARY or "fluxcd.io" in node.value:
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {node.value!r}")
    assert not found, "use admission.core.names:\n" + "\n".join(found)


def test_instants_are_formatted_only_in_timefmt():
    found = []
    for path in modules():
        if path == TIMEFMT:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("strftime", "isoformat"):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: .{node.attr}")
    assert not found, "use admission.core.timefmt:\n" + "\n".join(found)
