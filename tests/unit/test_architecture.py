"""The layers' import direction (pyproject.toml's import-linter contracts) holds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_hold():
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint), "--no-cache", "--config", str(ROOT / "pyproject.toml")],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BROKEN" not in result.stdout and "KEPT" in result.stdout


def test_every_layer_says_what_it_may_import():
    for init in sorted((ROOT / "admission").glob("*/__init__.py")):
        doc = init.read_text().strip()
        assert doc.startswith('"""'), f"{init.parent.name} has no docstring"
        assert "import" in doc.lower(), f"{init.parent.name}'s docstring does not say what it may import"


def test_no_unused_imports_or_undefined_names():
    # A name imported and never used is a layer dependency nobody needs (and the import-linter
    # contracts count it); an undefined one fails only on the path that reaches it.
    result = subprocess.run([sys.executable, "-m", "pyflakes", "admission", "tests", "bench"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_benchmark_still_starts():
    # Benchmarks run by hand, not in CI: a module moved by a refactoring must not leave one
    # that fails on import (bench/decisions.py did once).
    scripts = [path for path in sorted((ROOT / "bench").glob("*.py"))  # bench/load needs wrk before it parses arguments
               if 'if __name__ == "__main__":' in path.read_text()]  # not the modules they share
    running = {path: subprocess.Popen([sys.executable, str(path), "--help"], cwd=ROOT, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True) for path in scripts}
    failed = {}
    for path, proc in running.items():
        out, err = proc.communicate(timeout=120)
        if proc.returncode != 0 or "usage:" not in out:
            failed[str(path.relative_to(ROOT))] = (err or out)[-300:]
    assert scripts and not failed, failed
