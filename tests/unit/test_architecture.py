"""The layers' import direction (pyproject.toml's import-linter contracts) holds."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests import ROOT


def test_import_contracts_hold():
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint), "--no-cache", "--config", str(ROOT / "pyproject.toml")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BROKEN" not in result.stdout and "KEPT" in result.stdout


# Parts of the standard library that are a clock, a file, a socket, a process or a thread:
# the core takes ``now`` and plain dicts, and the import-linter contract only lists packages.
IMPURE_STDLIB = {
    "time",
    "os",
    "sys",
    "io",
    "pathlib",
    "shutil",
    "tempfile",
    "glob",
    "socket",
    "ssl",
    "select",
    "selectors",
    "http",
    "urllib",
    "subprocess",
    "signal",
    "threading",
    "multiprocessing",
    "concurrent",
    "asyncio",
    "random",
    "secrets",
    "logging",
    "sched",
}
PURE_PARTS = {
    "urllib.parse"
}  # string handling (a calendar entry's URL is checked); the rest of urllib is the network


def test_the_core_imports_only_the_standard_library_cronsim_and_itself():
    outside = []
    for path in sorted((ROOT / "admission" / "core").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                pure_stdlib = top in sys.stdlib_module_names and (
                    top not in IMPURE_STDLIB or module in PURE_PARTS
                )
                if not (
                    pure_stdlib or top in ("__future__", "cronsim") or module.startswith("admission.core")
                ):
                    outside.append(f"{path.name}: {module}")
    assert not outside, outside


def test_every_layer_says_what_it_may_import():
    for init in sorted((ROOT / "admission").glob("*/__init__.py")):
        doc = init.read_text().strip()
        assert doc.startswith('"""'), f"{init.parent.name} has no docstring"
        assert "import" in doc.lower(), f"{init.parent.name}'s docstring does not say what it may import"


def test_no_unused_imports_or_undefined_names():
    # A name imported and never used is a layer dependency nobody needs (and the import-linter
    # contracts count it); an undefined one fails only on the path that reaches it.
    result = subprocess.run(
        [sys.executable, "-m", "pyflakes", "admission", "tests", "bench"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_benchmark_still_starts():
    # Benchmarks run by hand, not in CI: a module moved by a refactoring must not leave one
    # that fails on import (bench/decisions.py did once).
    scripts = [
        path
        for path in sorted((ROOT / "bench").glob("*.py"))  # bench/load needs wrk before it parses arguments
        if 'if __name__ == "__main__":' in path.read_text()
    ]  # not the modules they share
    running = {
        path: subprocess.Popen(
            [sys.executable, str(path), "--help"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for path in scripts
    }
    failed = {}
    for path, proc in running.items():
        out, err = proc.communicate(timeout=120)
        if proc.returncode != 0 or "usage:" not in out:
            failed[str(path.relative_to(ROOT))] = (err or out)[-300:]
    assert scripts and not failed, failed


def _modules():
    return sorted((ROOT / "admission").rglob("*.py"))


def test_no_module_is_over_500_lines():
    # A module a reader takes in one sitting: past this, it holds more than one idea.
    long = {str(p.relative_to(ROOT)): n for p in _modules() if (n := len(p.read_text().splitlines())) > 500}
    assert not long, long


def test_verdicts_are_built_in_the_core_only():
    """The webhook adapts HTTP to the core's verdicts: no Decision is made outside admission.core."""
    built = []
    for path in _modules():
        if "core" in path.relative_to(ROOT).parts[:2]:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", getattr(node.func, "attr", None)) == "Decision"
            ):
                built.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not built, built


def test_the_hold_message_has_one_writer_and_one_reader():
    """kubectl gate, the notifications and the Events read the held objects' conditions back:
    the words that join what waits to what is served are written down in one module only."""
    where = [str(p.relative_to(ROOT)) for p in _modules() if "waits, serving" in p.read_text()]
    assert where == ["admission/core/flux/holdmessage.py"], where


def test_each_name_in_core_names_is_written_once():
    tree = ast.parse((ROOT / "admission" / "core" / "base" / "names.py").read_text())
    assigned = [
        t.id
        for node in tree.body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name)
    ]
    assert sorted(n for n in set(assigned) if assigned.count(n) > 1) == []


def test_create_app_only_wires():
    """create_app builds the app from its parts; routes, parsers and answers live in their own modules."""
    tree = ast.parse((ROOT / "admission" / "webhook" / "app.py").read_text())
    create_app = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "create_app")
    inner = [
        n.lineno
        for n in ast.walk(create_app)
        if isinstance(n, (ast.FunctionDef, ast.Lambda)) and n is not create_app
    ]
    assert not inner, f"routes and callbacks belong in their own modules, not create_app (lines {inner})"
    lines = create_app.end_lineno - create_app.lineno + 1
    assert lines < 50, f"create_app is {lines} lines"
