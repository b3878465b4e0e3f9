"""Where the tests find the real flux CLI: in $FLUX_BINARIES (hack/test.sh sets it), else where
hack/go-binaries.sh caches it (${XDG_CACHE_HOME:-~/.cache}/flux-gate-admission/flux/VERSION)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

FLUX_VERSION = "v2.9.4"  # the first flux CLI with plugins is 2.9


def flux_binary() -> Path:
    """The flux CLI to run, found or not."""
    if os.environ.get("FLUX_BINARIES"):
        return Path(os.environ["FLUX_BINARIES"]) / "flux"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "flux-gate-admission" / "flux" / FLUX_VERSION / "flux"


def require_flux() -> Path:
    """The flux CLI, or skip the test saying where it was looked for."""
    path = flux_binary()
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.skip(
            f"no flux CLI binary at {path}: set FLUX_BINARIES, or build the flux CLI there (hack/go-binaries.sh flux)"
        )
    return path
