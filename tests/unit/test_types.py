"""The package type-checks: mypy, configured by pyproject.toml's [tool.mypy] (strict on the whole package)."""

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


# every package: the decisions, the layers that serve them, and the command line that wires them
STRICT = ("core", "store", "observability", "pki", "webhook", "transport", "ical", "kube", "board", "cli")
STRICT_FLAGS = ("disallow_untyped_defs", "disallow_untyped_calls", "disallow_any_generics", "warn_return_any")
LENIENT = ["admission.transport.gthread_seam", "admission.transport.worker"]  # gunicorn's untyped internals


def test_strict_mypy_covers_the_whole_package():
    mypy = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert all(mypy.get(flag) is True for flag in STRICT_FLAGS), "strict for every module, in [tool.mypy]"
    packages = {p.parent.name for p in (ROOT / "admission").glob("*/__init__.py")}
    assert packages == set(STRICT), f"packages: {sorted(packages)}"
    loosened = [
        m for o in mypy["overrides"] if any(o.get(f) is False for f in STRICT_FLAGS) for m in o["module"]
    ]
    assert loosened == LENIENT, "only the gunicorn seam and the worker are checked leniently"
