"""The fast loop: ``hack/test.sh`` naming only tiers that need nothing but ``.venv`` builds no Go
binary, starts no Docker engine and builds no image; naming an end-to-end tier still asks for them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests import ROOT

# What the fast loop must never run: the go command (hack/go-binaries.sh), Docker (hack/dockerd.sh,
# hack/image.sh) and the package manager. Each stand-in records its name and fails.
HEAVY = ["go", "docker", "dockerd", "apt-get"]


@pytest.fixture
def spies(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A PATH whose heavy commands are spies, and the environment that uses it."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    for name in HEAVY:
        spy = bin_dir / name
        spy.write_text(f'#!/bin/sh\necho {name} "$@" >> {calls}\nexit 97\n')
        spy.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in _BINARY_VARIABLES}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    return calls, env


_BINARY_VARIABLES = {
    "KUBEBUILDER_ASSETS",
    "FLUX_BINARIES",
    "TEST_TOOLS",
    "HELM_BINARIES",
    "FGA_NODE_BINARIES",
    "GATE_IMAGE",
    "FGA_CLUSTER",
}


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    if not (ROOT / ".venv" / ".installed").exists():
        pytest.skip("no .venv installed by hack/test.sh here: run hack/test.sh once first")
    return subprocess.run(
        ["bash", "hack/test.sh", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )


def test_the_unit_tier_alone_builds_and_starts_nothing(spies):
    calls, env = spies
    done = _run(env, "tests/unit/test_timefmt.py", "-q", "-p", "no:cacheprovider")
    assert not calls.exists(), f"the fast loop ran: {calls.read_text()}"
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " passed" in done.stdout


def test_an_end_to_end_tier_still_asks_for_its_binaries(spies):
    calls, env = spies
    env["XDG_CACHE_HOME"] = str(calls.parent / "empty-cache")  # nothing cached: the go command is asked
    done = _run(env, "tests/e2e/test_apply.py", "-q", "-p", "no:cacheprovider")
    assert done.returncode != 0
    assert calls.exists() and "go " in calls.read_text(), done.stderr[-3000:]
