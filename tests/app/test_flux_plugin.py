"""`flux gate`: kubectl-gate's commands as a flux CLI plugin (admission.cli.flux_gate), in process.

What the flux binary does with the plugin (discovery, exec, the `__complete` delegation) is in
tests/server/test_flux_cli.py, run through the real flux CLI; here is what the plugin answers."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from admission.cli import cluster, flux_gate, kubectl_gate
from admission.core.base import names
from tests.builders import gate
from tests.conftest import write_gates
from tests.doubles.apiserver import ApiServerDouble
from tests.processes import BIN

GATES = [
    gate("bypass-signoff", default="closed"),
    gate("change-freeze", default="opened"),
    gate("nightly", "team-a", default="opened"),
]
SUBCOMMANDS = ["list", "get", "open", "close", "check", "approve", "pending", "board", "calendar", "version"]
RFC_MESSAGE = "Patching a CVE: Signed off by Bob the builder"  # the gating RFC's example


@pytest.fixture
def gates(gates_dir: Path) -> str:
    write_gates(gates_dir, GATES)
    return str(gates_dir)


@pytest.fixture
def no_flux_env(monkeypatch):
    for name in (flux_gate.NAMESPACE_ENV, flux_gate.FOLLOW_CONTEXT_ENV):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def api(tmp_path):
    with ApiServerDouble(GATES) as double:
        double.config = str(double.kubeconfig(tmp_path / "kubeconfig", namespace="team-a"))
        yield double


def run(main, argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def listed(main, argv: list[str], capsys) -> list[str]:
    code, out, err = run(main, [*argv, "-o", "json"], capsys)
    assert code == 0, err
    return [f"{row['namespace']}/{row['name']}" for row in json.loads(out)]


def completions(argv: list[str], capsys, main=flux_gate.main) -> tuple[list[str], str]:
    code, out, _ = run(main, argv, capsys)
    assert code == 0  # flux (and kubectl) drop everything a failing completion printed
    *lines, directive = out.splitlines()
    return lines, directive


# -- the commands, with flux's namespace conventions ------------------------------------------


def test_without_n_flux_gate_works_in_fluxs_namespace_as_flux_commands_do(gates, capsys, no_flux_env):
    assert listed(flux_gate.main, ["list", "--gates-dir", gates], capsys) == [
        "flux-system/bypass-signoff",
        "flux-system/change-freeze",
    ]
    assert listed(flux_gate.main, ["list", "--gates-dir", gates, "-n", "team-a"], capsys) == [
        "team-a/nightly"
    ]
    # kubectl gate keeps kubectl's: the context's namespace (offline too, as `get`), -A every gate
    assert len(listed(kubectl_gate.main, ["list", "--gates-dir", gates, "-A"], capsys)) == 3


def test_fluxs_namespace_variables_and_flag(gates, capsys, monkeypatch, no_flux_env, api):
    monkeypatch.setenv(flux_gate.NAMESPACE_ENV, "team-a")
    assert listed(flux_gate.main, ["list", "--gates-dir", gates], capsys) == ["team-a/nightly"]
    monkeypatch.setenv(flux_gate.NAMESPACE_ENV, "Not_A_Namespace")  # flux ignores it too
    assert listed(flux_gate.main, ["list", "--gates-dir", gates], capsys) == [
        "flux-system/bypass-signoff",
        "flux-system/change-freeze",
    ]
    monkeypatch.delenv(flux_gate.NAMESPACE_ENV)
    # Following the kubeconfig context: its namespace (team-a), by flag or variable.
    follow = ["list", "--gates-dir", gates, "--kubeconfig", api.config]
    assert listed(flux_gate.main, [*follow, "--ns-follows-kube-context"], capsys) == ["team-a/nightly"]
    monkeypatch.setenv(flux_gate.FOLLOW_CONTEXT_ENV, "true")
    assert listed(flux_gate.main, follow, capsys) == ["team-a/nightly"]
    # A context without a namespace leaves flux's default, as flux does.
    bare = api.kubeconfig(Path(api.config).with_name("bare"))
    assert listed(flux_gate.main, ["list", "--gates-dir", gates, "--kubeconfig", str(bare)], capsys) == [
        "flux-system/bypass-signoff",
        "flux-system/change-freeze",
    ]


@pytest.mark.parametrize(
    "leading", [["-n", "team-a"], ["--namespace=team-a"], ["-nteam-a"], ["--namespace", "team-a"]]
)
def test_common_flags_may_come_before_the_subcommand(gates, capsys, leading, no_flux_env):
    # `flux -n team-a gate list` execs `flux-gate -n team-a list`: flux passes its arguments on verbatim.
    assert listed(flux_gate.main, [*leading, "list", "--gates-dir", gates], capsys) == ["team-a/nightly"]
    assert listed(kubectl_gate.main, [*leading, "list", "--gates-dir", gates], capsys) == ["team-a/nightly"]


def test_open_takes_the_rfcs_positional_message(api, capsys, no_flux_env):
    code, out, err = run(
        flux_gate.main, ["open", "bypass-signoff", RFC_MESSAGE, "--kubeconfig", api.config], capsys
    )
    assert code == 0, err
    assert out == f"gate flux-system/bypass-signoff opened: {RFC_MESSAGE}\n"
    namespace, name, content_type, patch = api.patches[-1]
    assert (namespace, name, content_type) == (
        "flux-system",
        "bypass-signoff",
        "application/merge-patch+json",
    )
    annotations = patch["metadata"]["annotations"]
    assert annotations[names.MESSAGE_ANNOTATION] == RFC_MESSAGE
    assert annotations[names.REQUESTED_BY_ANNOTATION] == "alice"  # the kubeconfig's user
    assert names.OPEN_ANNOTATION in annotations

    code, out, _ = run(flux_gate.main, ["close", "bypass-signoff", "--kubeconfig", api.config], capsys)
    assert code == 0 and out == "gate flux-system/bypass-signoff closed\n"
    assert names.CLOSE_ANNOTATION in api.patches[-1][3]["metadata"]["annotations"]
    # The same with kubectl gate, which keeps -m too.
    code, _, _ = run(
        kubectl_gate.main,
        ["open", "nightly", "-n", "team-a", "-m", "why", "--kubeconfig", api.config],
        capsys,
    )
    assert code == 0 and api.patches[-1][3]["metadata"]["annotations"][names.MESSAGE_ANNOTATION] == "why"


def test_a_message_given_twice_must_agree_and_a_missing_gate_is_not_found(api, capsys, no_flux_env):
    before = len(api.patches)
    code, _, err = run(
        flux_gate.main, ["open", "bypass-signoff", "one", "-m", "two", "--kubeconfig", api.config], capsys
    )
    assert code == cluster.EXIT_USAGE and "two messages" in err and len(api.patches) == before
    assert (
        run(
            flux_gate.main,
            ["open", "bypass-signoff", "same", "-m", "same", "--kubeconfig", api.config],
            capsys,
        )[0]
        == 0
    )
    code, _, err = run(flux_gate.main, ["open", "no-such-gate", "--kubeconfig", api.config], capsys)
    assert code == cluster.EXIT_NOT_FOUND, err
    # Words after the message are a mistake, not more message.
    with pytest.raises(SystemExit) as usage:
        flux_gate.main(["open", "bypass-signoff", "Patching", "a", "CVE", "--kubeconfig", api.config])
    assert usage.value.code == cluster.EXIT_USAGE


# -- Cobra's __complete, as flux asks it ------------------------------------------------------


def test_complete_offers_subcommands_with_descriptions_then_the_directive(capsys):
    lines, directive = completions(["__complete", ""], capsys)
    assert [line.split("\t")[0] for line in lines] == SUBCOMMANDS
    assert "calendar\topen and closed intervals of each gate over the coming days" in lines
    assert directive == ":4"  # ShellCompDirectiveNoFileComp
    assert completions(["__completeNoDesc", "c"], capsys) == (["close", "check", "calendar"], ":4")


def test_complete_offers_gate_names_from_the_gates_dir_in_fluxs_namespace(gates, capsys, no_flux_env):
    assert completions(["__complete", "get", "--gates-dir", gates, ""], capsys) == (
        ["bypass-signoff", "change-freeze"],
        ":4",
    )
    assert completions(["__complete", "get", "--gates-dir", gates, "-n", "team-a", ""], capsys) == (
        ["nightly"],
        ":4",
    )
    # Common flags before the subcommand count, as they do when the command runs.
    assert completions(["__complete", "-n", "team-a", "get", "--gates-dir", gates, "n"], capsys) == (
        ["nightly"],
        ":4",
    )


def test_complete_asks_the_cluster_for_gate_names_and_namespaces(api, capsys, no_flux_env):
    assert completions(["__complete", "open", "--kubeconfig", api.config, ""], capsys) == (
        ["bypass-signoff", "change-freeze"],
        ":4",
    )
    assert completions(["__complete", "close", "--kubeconfig", api.config, "-n", ""], capsys) == (
        ["flux-system", "team-a"],
        ":4",
    )
    assert completions(["__complete", "--kubeconfig", api.config, "-n", ""], capsys) == (
        ["flux-system", "team-a"],
        ":4",
    )  # before the subcommand
    # The message after the name: free text, nothing to offer (not file names).
    assert completions(["__complete", "open", "--kubeconfig", api.config, "bypass-signoff", ""], capsys) == (
        [],
        ":4",
    )


def test_complete_offers_flags_once_a_dash_is_typed(capsys):
    lines, directive = completions(["__complete", "open", "x", "--f"], capsys)
    assert lines == ["--for\tclose again after this long (Go duration, e.g. 2h)"] and directive == ":4"
    names_only, _ = completions(["__completeNoDesc", "list", "--"], capsys)
    assert {"--gates-dir", "--all-namespaces", "--output"} <= set(names_only)
    # flux offers its global flags itself (Cobra completes a plugin command's inherited flags):
    # those flux gate takes as well are not offered twice.
    assert not set(names_only) & flux_gate.FLUX_OFFERS
    kubectl_offers = {
        line.split("\t")[0] for line in completions(["list", "--"], capsys, kubectl_gate.complete_main)[0]
    }
    assert {"--namespace", "--context", "--kubeconfig"} <= kubectl_offers  # kubectl offers none of its own
    assert completions(["__completeNoDesc", "calendar", "-o", ""], capsys) == (
        ["table", "json", "yaml", "ics"],
        ":4",
    )


def test_paths_are_left_to_the_shell(capsys):
    # ShellCompDirectiveDefault: the shell completes file names; FilterDirs: directories only.
    assert completions(["__complete", "check", "-f", ""], capsys) == ([], ":0")
    assert completions(["__complete", "list", "--kubeconfig", "/tm"], capsys) == ([], ":0")
    assert completions(["__complete", "list", "--gates-dir", ""], capsys) == ([], ":16")


def test_completion_never_fails_even_without_a_cluster(tmp_path, capsys):
    broken = tmp_path / "kubeconfig"
    broken.write_text("{not yaml: [")
    assert completions(["__complete", "get", "--kubeconfig", str(broken), ""], capsys) == ([], ":4")
    assert completions(["__complete", "no-such-command", ""], capsys)[1] == ":4"


def test_kubectl_and_flux_completion_share_their_candidates(gates, capsys):
    for words in (
        ["get", "--gates-dir", gates, "-n", "flux-system", ""],
        ["calendar", "--d"],
        [""],
        ["check", "-f", ""],
    ):
        flux_lines = completions(["__complete", *words], capsys)
        assert completions(words, capsys, main=kubectl_gate.complete_main) == flux_lines


# -- registering the plugin -------------------------------------------------------------------


def test_the_plugin_directory_is_fluxs(tmp_path):
    assert flux_gate.plugin_dir({"FLUXCD_PLUGINS": str(tmp_path)}) == tmp_path
    assert flux_gate.plugin_dir({}) == Path.home() / ".fluxcd" / "plugins"


def test_install_links_flux_gate_and_replaces_only_links(tmp_path):
    directory, command = tmp_path / "plugins" / "nested", BIN / "flux-gate"
    assert flux_gate.install(directory, command) == f"linked {directory / 'flux-gate'} -> {command}"
    link = directory / "flux-gate"
    assert link.is_symlink() and link.resolve() == command.resolve() and os.access(link, os.X_OK)
    assert flux_gate.install(directory, command) == f"{link} already links to {command}"
    elsewhere = tmp_path / "old-flux-gate"
    link.unlink()
    link.symlink_to(elsewhere)  # an earlier install, e.g. from another virtualenv: replaced
    assert flux_gate.install(directory, command).startswith("linked")
    assert Path(os.readlink(link)) == command
    link.unlink()
    link.write_text("#!/bin/sh\n")
    with pytest.raises(flux_gate.InstallError, match="not a link"):
        flux_gate.install(directory, command)
    assert flux_gate.install(directory, command, force=True).startswith("linked")
    assert sorted(p.name for p in directory.iterdir()) == ["flux-gate"]  # no staging file left


def test_gate_admission_install_flux_plugin_links_the_installed_command(tmp_path, gates):
    plugins = tmp_path / "plugins"
    env = {**os.environ, "FLUXCD_PLUGINS": str(plugins), "KUBECONFIG": "/nonexistent"}
    result = subprocess.run(
        [str(BIN / "gate-admission"), "install-flux-plugin"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"linked {plugins / 'flux-gate'} -> {BIN / 'flux-gate'}\n"
    # What flux execs: the link, with the arguments after `flux gate`.
    ran = subprocess.run(
        [str(plugins / "flux-gate"), "get", "bypass-signoff", "--gates-dir", gates],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert ran.returncode == 0, ran.stderr
    assert "Namespace:     flux-system" in ran.stdout and "State:         Closed" in ran.stdout
    other = tmp_path / "other"
    result = subprocess.run(
        [str(BIN / "gate-admission"), "install-flux-plugin", "--dir", str(other)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert result.returncode == 0 and (other / "flux-gate").is_symlink()
