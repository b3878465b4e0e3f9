"""The helm CLI the chart's tests run."""

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
