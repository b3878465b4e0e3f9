"""The package type-checks: mypy, configured by pyproject.toml's [tool.mypy] (strict on the core)."""

from __future__ import annotations

from pathlib import Path

from mypy import api

ROOT = Path(__file__).resolve().parents[2]


def test_the_package_type_checks():
    # The cache beside the sources (gitignored) keeps a run after a small change to seconds.
    report, errors, status = api.run(["--config-file", str(ROOT / "pyproject.toml"),
                                      "--cache-dir", str(ROOT / ".mypy_cache"), str(ROOT / "admission")])
    assert status == 0, f"mypy (pyproject.toml [tool.mypy]) finds the package not clean:\n{report}{errors}"
