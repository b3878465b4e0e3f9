"""One format and one lint rule set for the Python of the tree: ``ruff format`` and ``ruff check``
(pyproject.toml's [tool.ruff]) would change nothing."""

from __future__ import annotations

import subprocess
import sys

from tests import ROOT

FORMATTED = ["admission", "tests", "bench", "hack"]


def _ruff(*args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", "ruff", *args, *FORMATTED],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "No module named ruff" not in done.stderr, "ruff is a test extra: pip install -e '.[test]'"
    return done


def test_the_python_of_the_tree_is_formatted():
    done = _ruff("format", "--check", "--diff")
    assert done.returncode == 0, (
        f"run `ruff format {' '.join(FORMATTED)}`:\n" + done.stdout[-4000:] + done.stderr[-2000:]
    )


def test_the_python_of_the_tree_passes_the_lint_rules():
    # pyproject.toml's [tool.ruff.lint]: pyflakes, import order, bugbear, pyupgrade, blind except.
    # A blind except stays only at a boundary that must outlive anything (a thread's loop, a
    # child's answer, a third-party parser), marked `noqa: BLE001` with the reason beside it.
    done = _ruff("check", "--output-format", "concise")
    assert done.returncode == 0, f"`ruff check {' '.join(FORMATTED)}` finds:\n" + done.stdout[-4000:]
