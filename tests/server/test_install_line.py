"""The README's one line that installs the commands, run as a reader runs it: read from README.md
(so the two cannot drift), in the checkout, with pipx making a clean virtualenv of its own in a
temporary directory. Then `kubectl gate` through a real kubectl's plugin lookup and `flux gate`
through the real flux CLI, with PATH holding only the system's directories and pipx's. Needs
pipx (Debian's `pipx`, which hack/test.sh installs), pip's configured index, and kubectl
(`KUBEBUILDER_ASSETS`, else PATH's); each skips without."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from admission import __version__
from tests import ROOT
from tests.fluxcli import require_flux

GATES = ROOT / "examples" / "gates"
COMMANDS = ("kubectl-gate", "kubectl_complete-gate", "flux-gate", "gate-admission")


def install_line() -> str:
    """The README's line, its comment left out: the one line of a shell block that runs pipx."""
    lines = [
        line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("pipx install ")
    ]
    assert len(lines) == 1, f"README.md should have one line that installs the commands, not {lines}"
    return lines[0].split(" #")[0].strip()


def kubectl_binary() -> str:
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets and (Path(assets) / "kubectl").exists():
        return str(Path(assets) / "kubectl")
    found = shutil.which("kubectl")
    if not found:
        pytest.skip("no kubectl: set KUBEBUILDER_ASSETS (hack/control-plane-binaries.sh) or put one on PATH")
    return found


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """The environment after the README's line: pipx's home, its bin directory first on PATH (as
    `pipx ensurepath` puts ~/.local/bin), flux's plugin directory; nothing of the test's venv."""
    line = install_line()  # before any skip: a README without the line fails here
    if not shutil.which("pipx"):
        pytest.skip("no pipx (Debian: apt-get install pipx)")
    root = tmp_path_factory.mktemp("installed")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "FLUXCD_PLUGINS")}
    env.update(
        PIPX_HOME=str(root / "pipx"),
        PIPX_BIN_DIR=str(root / "bin"),
        FLUXCD_PLUGINS=str(root / "plugins"),
        PATH=os.pathsep.join([str(root / "bin"), "/usr/local/bin", "/usr/bin", "/bin"]),
        KUBECONFIG=str(root / "no-kubeconfig"),
    )
    done = subprocess.run(
        ["bash", "-c", line], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200
    )
    assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
    env["root"] = str(root)
    return env


def run(env: dict, *argv: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in env.items() if k != "root"}
    return subprocess.run(list(argv), env=clean, capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_the_line_installs_every_command_in_a_virtualenv_of_its_own(installed):
    root = Path(installed["root"])
    for command in COMMANDS:
        found = shutil.which(command, path=installed["PATH"])
        assert found == str(root / "bin" / command), command
        assert Path(found).resolve().is_relative_to(root / "pipx"), command  # pipx's venv, not ours
    assert (root / "plugins" / "flux-gate").resolve() == (root / "bin" / "flux-gate").resolve()


def test_kubectl_runs_it_as_a_plugin(installed):
    kubectl = kubectl_binary()
    for asked in (["--version"], ["version"]):
        done = run(installed, kubectl, "gate", *asked)
        assert (done.returncode, done.stdout) == (0, f"kubectl-gate {__version__}\n"), done.stderr
    done = run(installed, kubectl, "gate", "list", "--gates-dir", str(GATES), "-n", "flux-system")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].split() == [
        "NAME",
        "STATE",
        "REASON",
        "UNTIL",
        "REFERENCED",
        "BY",
        "HELD",
    ]
    assert "sre-approval" in done.stdout
    listed = run(installed, kubectl, "plugin", "list")
    assert str(Path(installed["root"]) / "bin" / "kubectl-gate") in listed.stdout, listed.stderr
    # kubectl's own completion of the plugin (1.26+) runs kubectl_complete-gate from the same PATH.
    completed = run(installed, kubectl, "__complete", "gate", "cal")
    assert completed.stdout.splitlines()[0].split("\t")[0] == "calendar", completed.stderr


def test_flux_runs_it_as_a_plugin(installed):
    flux = require_flux()
    done = run(installed, str(flux), "gate", "--version")
    assert (done.returncode, done.stdout) == (0, f"flux-gate {__version__}\n"), done.stderr
    done = run(installed, str(flux), "gate", "list", "--gates-dir", str(GATES))  # flux-system by default
    assert done.returncode == 0 and "sre-approval" in done.stdout, done.stderr
