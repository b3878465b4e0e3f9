"""One format and one lint rule set for the Python of the tree: ``ruff format`` and ``ruff check``
(pyproject.toml's [tool.ruff]) would change nothing."""

from __future__ import annotations

import subprocess
import sys

from tests import ROOT

FORMATTED = ["admission", "tests", "bench", "hack"]


def test_the_python_of_the_tree_is_formatted():
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "--diff", *FORMATTED],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "No module named ruff" not in done.stderr, "ruff is a test extra: pip install -e '.[test]'"
    assert done.returncode == 0, (
        f"run `ruff format {' '.join(FORMATTED)}`:\n" + done.stdout[-4000:] + done.stderr[-2000:]
    )


def test_the_python_of_the_tree_passes_the_lint_rules():
    # pyproject.toml's [tool.ruff.lint]: pyflakes, import order, bugbear, pyupgrade, blind except.
    # A blind except stays only at a boundary that must outlive anything (a thread's loop, a
    # child's answer, a third-party parser), marked `noqa: BLE001` with the reason beside it.
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--output-format", "concise", *FORMATTED],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"`ruff check {' '.join(FORMATTED)}` finds:\n" + done.stdout[-4000:]
