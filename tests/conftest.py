"""Shared fixtures: a gates directory, the Flask app around it, a fixed clock."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from admission.core.admission.decision import Settings
from admission.store.files import FileStore
from admission.webhook.app import create_app
from tests.builders import at

# The team's shared material (captured reviews, real Flux CRDs), next to the repository unless
# GATE_ADMISSION_SHARED says where; tests that need it skip, or fall back, when it is absent.
SHARED = Path(
    os.environ.get("GATE_ADMISSION_SHARED") or Path(__file__).resolve().parents[1].parent / "shared"
)
FIXTURES = SHARED / "fixtures" / "admission-reviews-k8s-1.20"
FIXED_NOW = at("2026-06-10T12:00")


# Hypothesis profiles (docs/decisions/0055-deterministic-property-tests-in-ci.md). CI (CI set,
# as .ci/run is run) draws the same examples on every run, so a fresh clone cannot fail by
# chance; a local run draws new ones, to find what CI would not. An example a run finds is
# pinned with @example at the test, so CI checks it from then on; print_blob says how to
# reproduce it. HYPOTHESIS_PROFILE picks one by name. Neither times an example: a per-example
# deadline and the "too slow to generate" check are wall-clock assertions, which a loaded machine
# fails with nothing wrong (tests never assert wall-clock times; bench/ measures speed).
UNTIMED = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
hypothesis_settings.register_profile("ci", derandomize=True, print_blob=True, database=None, **UNTIMED)
hypothesis_settings.register_profile("random", print_blob=True, **UNTIMED)
hypothesis_settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "random")
)

# Ctrl-C as a terminal sends it: a run started from a shell's background job (``cmd &`` without
# job control, as a CI script may be) inherits SIGINT ignored, and every command a test starts
# would keep ignoring it, so a test interrupting `kubectl gate list --watch` would wait forever.
# Handled here, SIGINT is back to its default in each command a test execs.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# Figures tests measure and CI should show (fault tests: writes attempted and failed).
REPORT: dict[str, str] = {}


def pytest_terminal_summary(terminalreporter):
    if REPORT:
        terminalreporter.section("figures measured by the tests")
        for name, value in REPORT.items():
            terminalreporter.write_line(f"{name}: {value}")


def write_gates(directory: Path, objects: list[dict], filename: str = "gates.yaml") -> Path:
    path = directory / filename
    path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    return path


@pytest.fixture
def gates_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "gates"
    directory.mkdir()
    return directory


@pytest.fixture
def make_client(gates_dir: Path):
    """Build a test client over ``objects`` written to the gates directory."""

    made = []

    def make(objects: list[dict] = (), settings: Settings | None = None, now=FIXED_NOW):
        write_gates(gates_dir, list(objects))
        store = FileStore(gates_dir)
        app = create_app(store, settings or Settings(), clock=lambda: now)
        app.testing = True
        made.append(app)
        return app.test_client()

    yield make
    # The calendar builder thread holds its app, and so the store and its inotify instance (of a
    # per-user 128): closed, they go with the test.
    for app in made:
        app.extensions["calendar_feeds"].close()
