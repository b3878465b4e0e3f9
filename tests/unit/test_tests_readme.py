"""tests/README.md is held to the tree, as docs/design.md is to the code.

- Every path and link it names exists, and every code name it writes resolves (the checks of
  tests/unit/test_docs_names.py).
- Every module (``*.py`` but ``__init__.py``) and every directory under tests/ is named in it,
  by its path from the repository's root (``tests/kube/test_leader.py``, ``tests/doubles/``).
- A file or directory inside a tier is named in that tier's section: the ``## `` section whose
  heading names the tier's directory in backticks (``## `tests/kube`: ...``).
"""

from __future__ import annotations

import re
from pathlib import Path

from tests import ROOT
from tests.unit.test_docs_names import names_in, paths_in

TESTS = ROOT / "tests"
README = TESTS / "README.md"
SKIP = {"__pycache__"}

_PATH = re.compile(r"(?<![\w./-])(tests/[\w./-]*[\w/])")
_SECTION_TIER = re.compile(r"^`(tests/[\w/]*\w)/?`")


def named(text: str) -> set[str]:
    """The tests/ paths ``text`` names, without a trailing slash."""
    return {path.rstrip("/") for path in _PATH.findall(text)}


def _holds_files(directory: Path) -> bool:
    return any(p.is_file() for p in directory.rglob("*") if not SKIP & set(p.relative_to(directory).parts))


def tree(top: Path = TESTS) -> set[str]:
    """Every module and directory under ``top``, by its path from ``top``'s parent (a directory
    left with only caches in it is none)."""
    found: set[str] = set()
    for path in top.rglob("*"):
        parts = path.relative_to(top).parts
        if any(part in SKIP or part.startswith(".") for part in parts):
            continue
        if path.is_dir() and _holds_files(path) or path.suffix == ".py" and path.name != "__init__.py":
            found.add(path.relative_to(top.parent).as_posix())
    return found


def sections(text: str) -> dict[str, str]:
    """A tier's directory -> the text of its ``## `` section."""
    found = {}
    for block in re.split(r"^## ", text, flags=re.M)[1:]:
        heading = block.split("\n", 1)[0]
        if (tier := _SECTION_TIER.match(heading)) is not None:
            found[tier.group(1)] = block
    return found


def unnamed(text: str, paths: set[str]) -> list[str]:
    return sorted(paths - named(text))


def misplaced(text: str, paths: set[str]) -> list[str]:
    """Paths inside a tier that has a section, named in the file but not in that section."""
    tiers, anywhere = sections(text), named(text)
    wrong = []
    for path in sorted(paths & anywhere):
        owners = [tier for tier in tiers if path.startswith(tier + "/")]
        if owners and path not in named(tiers[max(owners, key=len)]):
            wrong.append(f"{path} (not in the section of {max(owners, key=len)})")
    return wrong


# -- the checker can fail --------------------------------------------------------------------------

SAMPLE = """Intro names `tests/builders.py`.

## `tests/unit`: pure functions

| `tests/unit/test_a.py` | ... |

## `tests/e2e`: a real kube-apiserver

| `tests/e2e/crds/` | data |
| `tests/unit/test_b.py` | in the wrong section |
"""


def test_the_checker_finds_what_is_missing_and_what_is_misplaced():
    paths = {
        "tests/builders.py",
        "tests/unit",
        "tests/unit/test_a.py",
        "tests/unit/test_b.py",
        "tests/e2e",
        "tests/e2e/crds",
        "tests/kube/test_c.py",
    }
    assert named(SAMPLE) == {
        "tests/builders.py",
        "tests/unit",
        "tests/unit/test_a.py",
        "tests/e2e",
        "tests/e2e/crds",
        "tests/unit/test_b.py",
    }
    assert unnamed(SAMPLE, paths) == ["tests/kube/test_c.py"]
    assert misplaced(SAMPLE, paths) == ["tests/unit/test_b.py (not in the section of tests/unit)"]


def test_the_tree_holds_modules_and_directories_but_no_package_markers(tmp_path):
    top = tmp_path / "tests"
    (top / "kube").mkdir(parents=True)
    (top / "kube" / "__init__.py").write_text("")
    (top / "kube" / "test_x.py").write_text("")
    (top / "gone" / "__pycache__").mkdir(parents=True)
    (top / "gone" / "__pycache__" / "old.cpython-311.pyc").write_bytes(b"")
    assert tree(top) == {"tests/kube", "tests/kube/test_x.py"}


# -- the repository -------------------------------------------------------------------------------


def test_every_path_link_and_code_name_in_it_exists():
    text = README.read_text()
    wrong = [f"{written}: {why}" for written, why in [*paths_in(text, README), *names_in(text)]]
    assert not wrong, "tests/README.md names what the repository does not have:\n" + "\n".join(wrong)


def test_every_module_and_directory_under_tests_is_in_it():
    missing = unnamed(README.read_text(), tree())
    assert not missing, (
        "tests/README.md does not name these (add each to its tier's table, or to the doubles' "
        "or helpers' table):\n" + "\n".join(missing)
    )


def test_each_file_of_a_tier_is_in_its_tiers_section():
    wrong = misplaced(README.read_text(), tree())
    assert not wrong, "tests/README.md names these outside their tier's section:\n" + "\n".join(wrong)
