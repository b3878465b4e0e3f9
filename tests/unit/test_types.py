"""The package type-checks: mypy, configured by pyproject.toml's [tool.mypy] (strict on the core)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_package_type_checks():
    # A process of its own: mypy raises the interpreter's recursion limit, which other tests rely on.
    # The cache beside the sources (gitignored) keeps a run after a small change to seconds.
    result = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                             "--cache-dir", str(ROOT / ".mypy_cache"), str(ROOT / "admission")],
                            cwd=ROOT, capture_output=True, text=True, timeout=240)
    if result.returncode != 0:
        pytest.fail(f"mypy (pyproject.toml [tool.mypy]) finds the package not clean:\n{result.stdout}{result.stderr}",
                    pytrace=False)
