"""Prometheus's promtool, which hack/test.sh builds for this tier (hack/go-binaries.sh promtool)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml


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


def run_expression_tests(promtool: Path, tmp_path: Path, input_series: list[dict], tests: list[dict]) -> None:
    """promtool's tests of PromQL expressions (``promql_expr_test``) over ``input_series``, samples
    one minute apart, as Prometheus evaluates them; fails the test with promtool's own words."""
    (tmp_path / "expressions_test.yaml").write_text(
        yaml.safe_dump(
            {
                "rule_files": [],
                "evaluation_interval": "1m",
                "tests": [{"interval": "1m", "input_series": input_series, "promql_expr_test": tests}],
            },
            width=1000,
        )
    )
    run_promtool(promtool, "test", "rules", "expressions_test.yaml", cwd=tmp_path)
