"""docs/design.md's "Where to change what" names every file a new consuming Flux kind touches.

A consuming kind applies what a source serves and records its attempts (Kustomization,
HelmRelease: the table's rows whose content ``records_attempts``). What the table of kinds
carries, every module reads from it; a file that names a consuming kind itself (its kind or
plural as a string, its API group's names, its kind of content) is one a new consuming kind may
need to touch too. The doc's row lists exactly those files of the package, the manifests and
the chart: one missing, or one that names no consuming kind any more, fails here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from admission.core.base import names
from admission.core.flux import contentkinds, kinds
from tests import ROOT

PACKAGES = tuple(p.name for p in (ROOT / "admission").iterdir() if (p / "__init__.py").exists())
SHIPPED = ("manifests", "charts")
ROW = "a new consuming Flux kind"

CONSUMERS = [k for k in kinds.FLUX_KINDS if k.records_attempts]
STRINGS = {k.kind for k in CONSUMERS} | {k.plural for k in CONSUMERS}
GROUPS = {k.group for k in CONSUMERS}
# The names that stand for a consuming kind: names.py's strings of its API group (the group, the
# labels its controller writes), its kind of content and that value's class.
IDENTIFIERS = (
    {n for n, v in vars(names).items() if isinstance(v, str) and any(g in v for g in GROUPS)}
    | {n for n, v in vars(contentkinds).items() if any(v is k.content for k in CONSUMERS)}
    | {type(k.content).__name__ for k in CONSUMERS}
)


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _names_a_consumer(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    prose = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and id(node) not in prose and node.value in STRINGS:
            return True
        if (
            (isinstance(node, ast.Name) and node.id in IDENTIFIERS)
            or (isinstance(node, ast.Attribute) and node.attr in IDENTIFIERS)
            or (isinstance(node, ast.alias) and node.name in IDENTIFIERS)
        ):
            return True
    return False


def in_the_code() -> set[str]:
    """Every module, manifest and chart file that names a consuming kind, from the repository root."""
    found = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "admission").rglob("*.py")
        if "__pycache__" not in path.parts and _names_a_consumer(path)
    }
    plurals = re.compile(r"\b(?:" + "|".join(k.plural for k in CONSUMERS) + r")\b")
    for top in SHIPPED:
        for path in (ROOT / top).rglob("*"):
            if path.is_file() and plurals.search(path.read_text(errors="replace")):
                found.add(str(path.relative_to(ROOT)))
    return found


def in_the_doc() -> set[str]:
    """The files the row names, from the repository root (``core/...`` is under admission/)."""
    text = (ROOT / "docs" / "design.md").read_text().split("## Where to change what", 1)[1]
    row = next(line for line in text.splitlines() if line.startswith(f"| {ROW}"))
    listed = set()
    for span in re.findall(r"`([^`]+)`", row):
        top = span.split("/", 1)[0]
        if "." in span.rsplit("/", 1)[-1] and top in PACKAGES:
            listed.add(f"admission/{span}")
        elif top in SHIPPED:
            listed.add(span)
    return listed


def test_the_consuming_kinds_are_the_ones_the_doc_says():
    # The row's words name them; a third consuming kind means rereading the row.
    assert sorted(k.kind for k in CONSUMERS) == ["HelmRelease", "Kustomization"]


def test_the_table_names_every_file_a_new_consuming_kind_touches():
    code, doc = in_the_code(), in_the_doc()
    assert code == doc, (
        f"named in the code, not in the row: {sorted(code - doc)}; in the row, naming none: {sorted(doc - code)}"
    )


def test_the_check_finds_what_it_should():
    # The table and the content kinds name consumers; a module that only reads the table does not.
    assert _names_a_consumer(ROOT / "admission" / "core" / "flux" / "kinds.py")
    assert _names_a_consumer(ROOT / "admission" / "core" / "flux" / "contentkinds.py")
    assert not _names_a_consumer(ROOT / "admission" / "core" / "admission" / "decision.py")
