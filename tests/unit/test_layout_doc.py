"""docs/design.md's layout table names every module of every layer, and nothing else."""

from __future__ import annotations

import re
from pathlib import Path

from tests import ROOT

PACKAGE = ROOT / "admission"


def table() -> dict[str, set[str]]:
    rows = {}
    text = (ROOT / "docs" / "design.md").read_text()
    for line in text.split("## Layout", 1)[1].split("\n## ", 1)[0].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and re.fullmatch(r"`\w+(?:\.\w+)*`", cells[0]):
            outside = re.sub(r"\([^()]*\)", "", cells[1])  # what a module holds is said in brackets
            rows[cells[0].strip("`")] = set(re.findall(r"`([a-z_]+)`", outside))
    return rows


def packages(under: Path = PACKAGE, prefix: str = "") -> dict[str, Path]:
    """Every package under ``under``, subpackages too (``core.base``), by dotted name."""
    found = {}
    for path in sorted(under.iterdir()):
        if (path / "__init__.py").exists():
            found[prefix + path.name] = path
            found.update(packages(path, f"{prefix}{path.name}."))
    return found


def test_the_layout_table_matches_the_tree():
    rows = table()
    tree_packages = packages()
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    assert set(rows) == set(tree_packages) | modules
    for package, path in tree_packages.items():
        # a package's row names its modules and its subpackages
        tree = {p.stem for p in path.glob("*.py") if p.stem != "__init__"} | {
            p.name for p in path.iterdir() if (p / "__init__.py").exists()
        }
        assert rows[package] == tree, (
            f"admission.{package}: table {sorted(rows[package])}, tree {sorted(tree)}"
        )
