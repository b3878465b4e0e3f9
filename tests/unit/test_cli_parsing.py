"""How the three commands read their command lines (admission.cli.parsing): --help as plain
text, an unknown flag answered with its own subcommand's usage, --request-timeout's values, the
flags kubectl users reach for. Parsing only: nothing here runs a command."""

from __future__ import annotations

import argparse

import pytest

from admission import __version__
from admission.cli import flux_gate, gate_admission, kubectl_gate, parsing, shellcomplete
from admission.cli.cluster import DEFAULT_REQUEST_TIMEOUT

PARSERS = {
    "kubectl gate": kubectl_gate.build_parser,
    "flux gate": flux_gate.build_parser,
    "gate-admission": gate_admission.build_parser,
}


def every_parser(parser: argparse.ArgumentParser):
    yield parser
    for sub in parsing.subcommands(parser).values():
        yield from every_parser(sub)


@pytest.mark.parametrize("name", PARSERS)
def test_every_help_is_plain_text(name):
    for parser in every_parser(PARSERS[name]()):
        text = parser.format_help()
        assert "`" not in text, f"{parser.prog}:\n{text}"
    assert "check" in PARSERS["kubectl gate"]().format_help()  # the words stay, the marks go


def test_plain_removes_literal_marks_only():
    assert parsing.plain("for ``check``, see `get` and 'x'") == "for check, see get and 'x'"


@pytest.mark.parametrize(
    "argv, unknown, usage",
    [
        (["list", "--bogus"], "--bogus", "usage: kubectl gate list "),
        (["check", "-f", "a.yaml", "--as-user", "bob"], "--as-user bob", "usage: kubectl gate check "),
        (["open", "freeze", "--forr", "1h"], "--forr 1h", "usage: kubectl gate open "),
        (["get", "freeze", "--no-headers"], "--no-headers", "usage: kubectl gate get "),  # no rows to head
    ],
)
def test_an_unknown_flag_prints_the_subcommands_usage(capsys, argv, unknown, usage):
    with pytest.raises(SystemExit) as exited:
        parsing.parse(kubectl_gate.build_parser(), argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(usage) and f"error: unrecognized arguments: {unknown}\n" in err, err


def test_gate_admission_reports_an_unknown_flag_with_its_subcommand_too(capsys):
    with pytest.raises(SystemExit):
        parsing.parse(gate_admission.build_parser(), ["certs", "--bogus"])
    assert capsys.readouterr().err.startswith("usage: gate-admission certs ")


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("30s", 30.0),
        ("2m", 120.0),
        ("1h", 3600.0),
        ("5", 5.0),
        ("0.5", 0.5),
        ("1m30s", 90.0),
        ("0", None),
        ("0s", None),
    ],
)
def test_request_timeout_reads_what_kubectl_reads(text, seconds):
    assert parsing.request_timeout(text) == seconds
    args = parsing.parse(kubectl_gate.build_parser(), ["list", "--request-timeout", text])
    assert args.request_timeout == seconds


@pytest.mark.parametrize("text", ["-1s", "soon", "1 h", "", "nan", "1e3"])
def test_a_bad_request_timeout_is_a_usage_error(capsys, text):
    with pytest.raises(SystemExit) as exited:
        parsing.parse(kubectl_gate.build_parser(), ["pending", f"--request-timeout={text}"])
    assert exited.value.code == 2
    assert "usage: kubectl gate pending" in capsys.readouterr().err


# The least each subcommand takes; every one but `version` may ask the cluster.
SMALLEST = {"get": ["x"], "open": ["x"], "close": ["x"], "approve": ["x"], "check": ["-f", "x"]}


@pytest.mark.parametrize("name", ["kubectl gate", "flux gate"])
def test_every_command_that_asks_the_cluster_has_a_request_timeout(name):
    for command, parser in parsing.subcommands(PARSERS[name]()).items():
        if command != "version":
            args = parser.parse_args(SMALLEST.get(command, []))
            assert args.request_timeout == DEFAULT_REQUEST_TIMEOUT, command


def test_check_reads_files_directories_or_a_kustomization(capsys):
    parser = kubectl_gate.build_parser()
    args = parsing.parse(parser, ["check", "-f", "a.yaml", "-f", "dir", "-R", "--no-headers"])
    assert (args.filename, args.recursive, args.kustomize, args.no_headers) == (
        ["a.yaml", "dir"],
        True,
        None,
        True,
    )
    assert parsing.parse(parser, ["check", "-k", "overlays/prod"]).kustomize == "overlays/prod"
    for argv in (["check", "-f", "a.yaml", "-k", "dir"], ["check"]):  # one of them, and only one
        with pytest.raises(SystemExit) as exited:
            parsing.parse(parser, argv)
        assert exited.value.code == 2
        assert capsys.readouterr().err.startswith("usage: kubectl gate check ")


@pytest.mark.parametrize("command", ["list", "pending"])
def test_list_and_pending_watch_and_drop_their_headers(command):
    args = parsing.parse(kubectl_gate.build_parser(), [command, "-w", "--no-headers"])
    assert (args.watch, args.no_headers) == (True, True)
    assert parsing.parse(flux_gate.build_parser(), [command, "--watch"]).watch


@pytest.mark.parametrize("name, command", [("kubectl gate", "kubectl-gate"), ("flux gate", "flux-gate")])
def test_version_and_dash_dash_version(capsys, name, command):
    with pytest.raises(SystemExit) as exited:
        parsing.parse(PARSERS[name](), ["--version"])
    assert exited.value.code == 0 and capsys.readouterr().out == f"{command} {__version__}\n"
    assert parsing.parse(PARSERS[name](), ["version"]).version == f"{command} {__version__}"


def test_fish_is_a_completion_shell():
    assert parsing.parse(gate_admission.build_parser(), ["completion", "fish"]).shell == "fish"


def test_request_timeout_may_come_before_the_subcommand_as_flux_passes_it():
    # `flux --request-timeout 5s gate list` is not flux's flag, but `flux gate --request-timeout 5s list` is ours.
    parsed = parsing.parse(flux_gate.build_parser(), shellcomplete.hoist(["--request-timeout", "5s", "list"]))
    assert (parsed.command, parsed.request_timeout) == ("list", 5.0)
