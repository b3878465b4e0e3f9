"""`gate-admission serve`'s configuration (admission.cli.config): every GATE_ADMISSION_* variable
read once into one frozen value, and what cannot be served refused before anything starts."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from admission.cli.config import ServeConfig, UsageError, serve_config
from admission.cli.gate_admission import build_parser
from admission.core.admission.decision import Settings
from tests import ROOT


@pytest.fixture(autouse=True)
def _no_variables(monkeypatch):
    for name in [n for n in os.environ if n.startswith("GATE_ADMISSION_")]:
        monkeypatch.delenv(name)


def parsed(*argv: str) -> ServeConfig:
    return serve_config(build_parser().parse_args(["serve", *argv]))


def test_every_documented_variable_is_read_into_the_frozen_config(monkeypatch):
    variables = {
        "PORT": "8443",
        "ADDRESS": "127.0.0.1",
        "CERT_DIR": "/run/certs",
        "GENERATE_CERTS": "true",
        "SERVICE": "gates",
        "NAMESPACE": "ops",
        "EXTRA_SANS": "b.example, a.example",
        "CLIENT_CA_FILE": "/run/ca.crt",
        "MODE": "audit",
        "EXEMPT_USERS": "alice,bob",
        "EXEMPT_GROUPS": "admins",
        "APPROVAL_RELAYS": "system:serviceaccount:ops:receiver",
        "KUBECONFIG": "/run/kubeconfig",
        "RECEIVER_TOKEN_FILE": "/run/receiver",
        "APPROVAL_KEY_FILE": "/run/approval.key",
        "EVENT_PERIOD": "60",
        "STALE_AFTER": "2.5",
        "CALENDAR": "false",
        "CALENDAR_WAIT": "0",
        "CALENDAR_TOKEN_FILE": "/run/calendar",
        "BOARD": "yes",
        "WORKERS": "3",
        "THREADS": "8",
        "SHUTDOWN_DELAY": "1",
        "MAX_CLIENT_CONNECTIONS": "64",
        "LOG_LEVEL": "DEBUG",
    }
    for name, value in variables.items():
        monkeypatch.setenv("GATE_ADMISSION_" + name, value)
    config = parsed()
    assert config == ServeConfig(
        address="127.0.0.1",
        port=8443,
        cert_dir=Path("/run/certs"),
        generate_certs=True,
        cert_names=(
            "gates",
            "gates.ops",
            "gates.ops.svc",
            "gates.ops.svc.cluster.local",
            "localhost",
            "127.0.0.1",
            "a.example",
            "b.example",
        ),
        client_ca_file="/run/ca.crt",
        settings=Settings(
            "audit",
            frozenset({"alice", "bob"}),
            frozenset({"admins"}),
            frozenset({"system:serviceaccount:ops:receiver"}),
        ),
        gates_dir=None,
        kubeconfig="/run/kubeconfig",
        receiver_token_file="/run/receiver",
        approval_key_file="/run/approval.key",
        event_period=60.0,
        stale_after=2.5,
        calendar=False,
        calendar_wait=0.0,
        calendar_token_file="/run/calendar",
        board=True,
        workers=3,
        threads=8,
        shutdown_delay=1.0,
        max_client_connections=64,
        log_level="debug",
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.port = 1
    # A flag still wins over its variable.
    assert parsed("--mode", "enforce", "--workers", "1").settings.mode == "enforce"


def test_the_defaults_without_variables():
    config = parsed()
    assert (config.port, config.address, config.cert_dir, config.generate_certs, config.settings) == (
        9443,
        "0.0.0.0",
        Path("certs"),
        False,
        Settings(),
    )
    assert (config.event_period, config.stale_after, config.calendar, config.calendar_wait, config.board) == (
        300.0,
        10.0,
        True,
        5.0,
        False,
    )
    assert (config.workers, config.threads, config.shutdown_delay, config.max_client_connections) == (
        2,
        4,
        5.0,
        None,
    )
    assert config.log_level == "info" and config.limits_dir is None


NUMBERS = {  # each number a variable can give, and the command that reads it
    "EVENT_PERIOD": "serve",
    "STALE_AFTER": "serve",
    "CALENDAR_WAIT": "serve",
    "SHUTDOWN_DELAY": "serve",
    "WORKERS": "serve",
    "THREADS": "serve",
    "MAX_CLIENT_CONNECTIONS": "serve",
    "PORT": "serve",
    "HEALTH_PORT": "controller",
    "NOTIFY_PERIOD": "controller",
    "CALENDAR_MAX_BYTES": "controller",
    "CALENDAR_TIMEOUT": "controller",
}


@pytest.mark.parametrize("variable", sorted(NUMBERS))
def test_a_variable_that_is_not_a_number_is_a_usage_error(monkeypatch, capsys, variable):
    monkeypatch.setenv("GATE_ADMISSION_" + variable, "soon")
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args([NUMBERS[variable]])
    assert exited.value.code == 2
    flag = "--" + variable.lower().replace("_", "-")
    assert f"argument {flag}: 'soon' is not a" in capsys.readouterr().err


def test_a_mode_from_the_environment_must_be_a_mode(monkeypatch):
    # Any mode but enforce lets held changes through: a misspelt one must not serve as one.
    monkeypatch.setenv("GATE_ADMISSION_MODE", "Enforce")
    with pytest.raises(UsageError, match="GATE_ADMISSION_MODE 'Enforce' is not a mode"):
        parsed()


def test_what_cannot_be_served_is_refused_before_anything_starts(tmp_path):
    """The receiver beside --gates-dir, or a misspelt mode: exit 2 with one line that says why,
    and no certificate written, no worker started."""
    gates, cert_dir = tmp_path / "gates", tmp_path / "certs"
    gates.mkdir()
    token = tmp_path / "token"
    token.write_text("a-token-of-enough-length-0123456789\n")
    serve = [sys.executable, "-m", "admission.cli.gate_admission", "serve", "--port", "1", "--generate-certs"]
    serve += ["--cert-dir", str(cert_dir), "--gates-dir", str(gates)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATE_ADMISSION_")}
    cases = [
        ([*serve, "--receiver-token-file", str(token)], {}, "it cannot be used with --gates-dir"),
        (serve, {"GATE_ADMISSION_MODE": "enforcing"}, "GATE_ADMISSION_MODE 'enforcing' is not a mode"),
    ]
    for argv, variables, why in cases:
        done = subprocess.run(
            argv, env={**env, **variables}, cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 2 and why in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
        assert not cert_dir.exists()


def test_the_controllers_bad_flags_are_refused_before_it_asks_the_cluster(tmp_path):
    """A calendar network or duration that cannot be read, or a limit that is not positive: exit 2
    with one line that says why, as `serve` says its own, before any cluster is asked (the
    kubeconfig named here does not exist: reaching it would be another error)."""
    controller = [sys.executable, "-m", "admission.cli.gate_admission", "controller", "--health-port", "0"]
    controller += ["--kubeconfig", str(tmp_path / "missing-kubeconfig")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATE_ADMISSION_")}
    cases = [
        (["--calendar-allow-networks", "intranet"], "does not appear to be an IPv4 or IPv6 network"),
        (["--calendar-min-interval", "soon"], "soon"),
        (["--calendar-timeout", "0"], "--calendar-max-bytes and --calendar-timeout must be positive"),
    ]
    for flags, why in cases:
        done = subprocess.run(
            [*controller, *flags], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 2 and why in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and "missing-kubeconfig" not in done.stderr
