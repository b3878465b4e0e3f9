"""The package type-checks: mypy, configured by pyproject.toml's [tool.mypy] (strict on the core)."""

from __future__ import annotations

import subprocess
import sys
import tomllib

import pytest

from tests import ROOT


def test_the_package_type_checks():
    # A process of its own: mypy raises the interpreter's recursion limit, which other tests rely on.
    # The cache beside the sources (gitignored) keeps a run after a small change to seconds.
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            str(ROOT / "admission"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    if result.returncode != 0:
        pytest.fail(
            f"mypy (pyproject.toml [tool.mypy]) finds the package not clean:\n{result.stdout}{result.stderr}",
            pytrace=False,
        )


# the decisions and the layers that serve them
STRICT = ("core", "store", "observability", "pki", "webhook", "transport", "ical", "kube")
LENIENT = ["admission.transport.gthread_seam", "admission.transport.worker"]  # gunicorn's untyped internals


def test_strict_mypy_covers_the_core_and_the_serving_layers():
    overrides = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["overrides"]
    strict = [o for o in overrides if o.get("disallow_untyped_defs") is True]
    assert len(strict) == 1 and all(
        {f"admission.{p}", f"admission.{p}.*"} <= set(strict[0]["module"]) for p in STRICT
    ), strict
    loosened = [m for o in overrides if o.get("disallow_untyped_defs") is False for m in o["module"]]
    assert loosened == LENIENT, "only the gunicorn seam and the worker are checked leniently"
