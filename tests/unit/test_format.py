"""One format for the Python of the tree: ``ruff format`` (pyproject.toml's [tool.ruff]) would change nothing."""

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
