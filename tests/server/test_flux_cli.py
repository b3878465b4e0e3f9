"""`flux gate` through the real flux CLI (2.9+ runs plugins): discovery of the flux-gate link in
$FLUXCD_PLUGINS, arguments passed verbatim, exit codes, and Cobra's `__complete` delegated to
the plugin. Gates come from --gates-dir, and open/close go to a loopback stand-in for the API
server (tests/doubles/apiserver.py); the e2e suite has the real one. Skips without the binary
(tests/fluxcli.py says where it looks)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from admission.core.base import names
from tests.builders import flux as flux_object
from tests.builders import gate
from tests.conftest import write_gates
from tests.doubles.apiserver import ApiServerDouble
from tests.fluxcli import require_flux
from tests.processes import BIN

GATES = [
    gate("bypass-signoff", default="closed"),
    gate("change-freeze", default="opened"),
    gate("nightly", "team-a", default="opened"),
]
RFC_MESSAGE = "Patching a CVE: Signed off by Bob the builder"  # the gating RFC's `flux gate open` example
SUBCOMMANDS = ["list", "get", "open", "close", "check", "approve", "pending", "board", "calendar", "version"]


@pytest.fixture(scope="module")
def flux() -> Path:
    return require_flux()


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    with ApiServerDouble(GATES) as double:
        double.config = double.kubeconfig(tmp_path_factory.mktemp("kube") / "config")
        yield double


@pytest.fixture(scope="module")
def env(flux, api, tmp_path_factory) -> dict:
    """flux's environment: the plugin registered the documented way, in a directory of its own."""
    plugins = tmp_path_factory.mktemp("plugins")
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("FLUX_SYSTEM_NAMESPACE", "FLUX_NS_FOLLOWS_KUBE_CONTEXT")
    }
    env.update(
        FLUXCD_PLUGINS=str(plugins), KUBECONFIG=str(api.config), HOME=str(tmp_path_factory.mktemp("home"))
    )
    installed = subprocess.run(
        [str(BIN / "gate-admission"), "install-flux-plugin"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert installed.returncode == 0, installed.stderr
    return env


@pytest.fixture(scope="module")
def gates(tmp_path_factory) -> str:
    directory = tmp_path_factory.mktemp("gates")
    write_gates(directory, GATES)
    return str(directory)


def run(flux: Path, env: dict, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(flux), *args], capture_output=True, text=True, timeout=60, env=env, input=stdin
    )


def completion(flux: Path, env: dict, *words: str) -> tuple[list[str], str]:
    """What the shell script gets for `flux WORDS<TAB>`: candidates, and the directive line."""
    result = run(flux, env, "__complete", *words)
    assert result.returncode == 0, result.stderr
    *lines, directive = result.stdout.splitlines()
    return lines, directive


def test_flux_finds_the_plugin_it_was_given(flux, env):
    listed = run(flux, env, "plugin", "list")
    assert listed.returncode == 0, listed.stderr
    row = next(line.split() for line in listed.stdout.splitlines() if line.split()[:1] == ["gate"])
    assert row[1:] == ["manual", str(Path(env["FLUXCD_PLUGINS"]) / "flux-gate")]  # the link, not a copy
    helped = run(flux, env, "--help")
    assert "Plugin Commands:" in helped.stdout and "Runs the gate plugin" in helped.stdout


def test_flux_gate_lists_and_gets_in_fluxs_namespace(flux, env, gates):
    listed = run(flux, env, "gate", "list", "--gates-dir", gates)
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[:2] for line in listed.stdout.splitlines()[1:]] == [
        ["bypass-signoff", "Closed"],
        ["change-freeze", "Opened"],
    ]  # flux-system: flux's default
    # flux's own global flags before `gate` reach the plugin too, verbatim.
    other = run(flux, env, "-n", "team-a", "gate", "list", "--gates-dir", gates, "-o", "yaml")
    assert other.returncode == 0, other.stderr
    assert [(g["namespace"], g["name"]) for g in yaml.safe_load(other.stdout)] == [("team-a", "nightly")]
    got = run(flux, env, "gate", "get", "bypass-signoff", "--gates-dir", gates)
    assert got.returncode == 0 and "Reason:        Default" in got.stdout
    missing = run(flux, env, "gate", "get", "no-such-gate", "--gates-dir", gates)
    assert missing.returncode == 3 and "not found" in missing.stderr  # our exit code, through flux


def test_flux_gate_check_exits_1_when_an_apply_would_be_denied(flux, env, gates):
    held = yaml.safe_dump(flux_object(name="apps", namespace="flux-system", gates="bypass-signoff"))
    denied = run(flux, env, "gate", "check", "-f", "-", "--gates-dir", gates, stdin=held)
    assert denied.returncode == 1, denied.stderr
    assert (
        "would be denied" in denied.stdout and "gate 'flux-system/bypass-signoff' is closed" in denied.stdout
    )
    free = yaml.safe_dump(flux_object(name="apps", namespace="flux-system", gates="change-freeze"))
    assert run(flux, env, "gate", "check", "-f", "-", "--gates-dir", gates, stdin=free).returncode == 0


def test_flux_gate_open_and_close_as_the_rfc_writes_them(flux, env, api):
    opened = run(flux, env, "gate", "open", "bypass-signoff", RFC_MESSAGE)
    assert opened.returncode == 0, opened.stderr
    assert opened.stdout == f"gate flux-system/bypass-signoff opened: {RFC_MESSAGE}\n"
    namespace, name, _, patch = api.patches[-1]
    assert (namespace, name) == ("flux-system", "bypass-signoff")
    assert patch["metadata"]["annotations"][names.MESSAGE_ANNOTATION] == RFC_MESSAGE
    closed = run(flux, env, "gate", "close", "bypass-signoff")
    assert closed.returncode == 0 and closed.stdout == "gate flux-system/bypass-signoff closed\n"
    assert names.CLOSE_ANNOTATION in api.patches[-1][3]["metadata"]["annotations"]
    with_flags = run(flux, env, "gate", "open", "nightly", "-n", "team-a", "--for", "2h", "-m", "release")
    assert with_flags.returncode == 0 and with_flags.stdout.startswith("gate team-a/nightly opened until ")


def test_flags_go_to_the_plugin_not_to_flux(flux, env):
    helped = run(flux, env, "gate", "--help")
    assert helped.returncode == 0 and helped.stdout.startswith("usage: flux gate")
    bad = run(flux, env, "gate", "list", "--no-such-flag")
    assert bad.returncode == 2 and "unrecognized arguments: --no-such-flag" in bad.stderr


def test_flux_completes_the_command_then_asks_the_plugin(flux, env, gates):
    assert completion(flux, env, "gat") == (["gate\tRuns the gate plugin"], ":4")
    lines, directive = completion(flux, env, "gate", "")
    assert [line.split("\t")[0] for line in lines] == SUBCOMMANDS and directive == ":4"
    assert "calendar\topen and closed intervals of each gate over the coming days" in lines
    assert completion(flux, env, "gate", "get", "--gates-dir", gates, "") == (
        ["bypass-signoff", "change-freeze"],
        ":4",
    )
    assert completion(flux, env, "gate", "get", "--gates-dir", gates, "-n", "team-a", "n") == (
        ["nightly"],
        ":4",
    )
    assert completion(flux, env, "-n", "team-a", "gate", "get", "--gates-dir", gates, "") == (
        ["nightly"],
        ":4",
    )
    assert completion(flux, env, "gate", "check", "-f", "") == ([], ":0")  # the shell completes file names
    assert run(flux, env, "__completeNoDesc", "gate", "c").stdout.splitlines() == [
        "close",
        "check",
        "calendar",
        ":4",
    ]


def test_flux_completes_gate_names_and_namespaces_from_the_cluster(flux, env):
    assert completion(flux, env, "gate", "open", "") == (["bypass-signoff", "change-freeze"], ":4")
    assert completion(flux, env, "gate", "close", "-n", "team-a", "") == (["nightly"], ":4")
    assert completion(flux, env, "gate", "get", "-n", "") == (["flux-system", "team-a"], ":4")
    assert completion(flux, env, "gate", "open", "bypass-signoff", "") == ([], ":4")  # the message: free text


def test_flag_names_come_from_the_plugin_and_from_flux_once_each(flux, env):
    # Cobra adds flux's own global flags to a plugin's (completions.go): both reach the shell.
    lines, directive = completion(flux, env, "gate", "open", "x", "--f")
    assert "--for\tclose again after this long (Go duration, e.g. 2h)" in lines and directive == ":4"
    offered = run(flux, env, "__completeNoDesc", "gate", "list", "-").stdout.splitlines()
    assert {"--gates-dir", "--all-namespaces", "--timeout"} <= set(offered)  # ours, and flux's
    assert len(offered) == len(set(offered))  # --namespace, --context...: flux's, not twice


def test_flux_plugin_uninstall_removes_the_link_only(flux, env, tmp_path):
    plugins = tmp_path / "plugins"
    own = {**env, "FLUXCD_PLUGINS": str(plugins)}
    assert (
        subprocess.run([str(BIN / "gate-admission"), "install-flux-plugin"], env=own, timeout=60).returncode
        == 0
    )
    removed = run(flux, own, "plugin", "uninstall", "gate")
    assert removed.returncode == 0, removed.stderr
    assert not (plugins / "flux-gate").exists() and (BIN / "flux-gate").exists()
