"""Prometheus's promtool, which hack/test.sh builds for this tier (hack/go-binaries.sh promtool)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest


def find_tool(name: str) -> Path | None:
    """``name`` in one of the directories $TEST_TOOLS lists (separated as PATH is), if there."""
    for directory in filter(None, os.environ.get("TEST_TOOLS", "").split(os.pathsep)):
        if (Path(directory) / name).is_file():
            return Path(directory) / name
    return None


@pytest.fixture(scope="session")
def promtool() -> Path:
    found = find_tool("promtool")
    if found is None:
        pytest.skip(
            f"no promtool in TEST_TOOLS ({os.environ.get('TEST_TOOLS') or 'unset'}): hack/test.sh builds "
            "it for this tier (hack/go-binaries.sh promtool) and adds its directory there"
        )
    return found


def run_promtool(promtool: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``promtool ARGS`` in ``cwd``; fails the test with promtool's own words when it fails."""
    done = subprocess.run([str(promtool), *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"promtool {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done
