"""docs/design.md's layout table names every module of every layer, and nothing else."""

from __future__ import annotations

import re

from tests import ROOT

PACKAGE = ROOT / "admission"


def table() -> dict[str, set[str]]:
    rows = {}
    text = (ROOT / "docs" / "design.md").read_text()
    for line in text.split("## Layout", 1)[1].split("\n## ", 1)[0].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and re.fullmatch(r"`\w+`", cells[0]):
            outside = re.sub(r"\([^()]*\)", "", cells[1])  # what a module holds is said in brackets
            rows[cells[0].strip("`")] = set(re.findall(r"`([a-z_]+)`", outside))
    return rows


def test_the_layout_table_matches_the_tree():
    rows = table()
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    assert set(rows) == packages | modules
    for package in packages:
        tree = {p.stem for p in (PACKAGE / package).glob("*.py") if p.stem != "__init__"}
        assert rows[package] == tree, (
            f"admission.{package}: table {sorted(rows[package])}, tree {sorted(tree)}"
        )
