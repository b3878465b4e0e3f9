"""The helm CLI the chart's tests run: its binary, and `helm` with no cluster (template, lint)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests import ROOT


@pytest.fixture(scope="session")
def helm_binary() -> Path:
    """$HELM_BINARIES/helm (hack/test.sh sets it), else hack/go-binaries.sh builds it once."""
    if os.environ.get("HELM_BINARIES"):
        return Path(os.environ["HELM_BINARIES"]) / "helm"
    built = subprocess.run([str(ROOT / "hack" / "go-binaries.sh"), "helm"], capture_output=True, text=True)
    if built.returncode != 0:
        pytest.skip(
            f"the helm CLI could not be built (hack/go-binaries.sh helm): {built.stderr.strip()[-500:]}"
        )
    return Path(built.stdout.strip()) / "helm"


@pytest.fixture(scope="module")
def helm(helm_binary, tmp_path_factory):
    home = tmp_path_factory.mktemp("helm-home")  # no user configuration, no cache outside the test
    env = {
        **os.environ,
        **{f"HELM_{kind}_HOME": str(home / kind.lower()) for kind in ("CONFIG", "CACHE", "DATA")},
    }

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run([str(helm_binary), *args], capture_output=True, text=True, env=env, cwd=ROOT)
        if check:
            assert result.returncode == 0, result.stderr
        return result

    return run
