"""`gate-admission` started wrong says so in one line and exits non-zero, never a traceback and
never a server that runs without doing its job: a port another server or program holds, a bad
flag, no cluster and no gates directory, a directory that cannot be written."""

from __future__ import annotations

import socket
import subprocess

import orjson
import pytest

from tests.builders import changed, flux, gate, request, review
from tests.conftest import write_gates
from tests.processes import BIN, GateServer, free_port, serving_gates_dir


def gate_admission(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "gate-admission"), *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode != 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines, "nothing said"
    return lines[-1]


def test_a_second_server_on_the_port_exits_and_the_first_answers_every_review(tmp_path):
    closed = [gate("sre-approval", default="closed")]
    (tmp_path / "first").mkdir()
    with serving_gates_dir(tmp_path / "first", closed, "--workers", "2") as first:
        listening = [line for line in first.log().splitlines() if "Listening at" in line]
        assert listening and orjson.loads(listening[0])["msg"].startswith(
            f"Listening at: https://127.0.0.1:{first.port} ("
        ), listening
        # Another server, gates open, on the same port: refused, naming the port.
        other = tmp_path / "other"
        other.mkdir()
        write_gates(other, [gate("sre-approval")])
        second = gate_admission(
            "serve", "--address", "127.0.0.1", "--port", str(first.port), "--gates-dir", str(other),
            "--cert-dir", str(first.cert_dir), "--workers", "2",
        )  # fmt: skip
        line = one_error_line(second)
        assert f"port {first.port}" in line, line
        ks = flux(gates="flux-system/sre-approval")
        body = orjson.dumps(review(request("UPDATE", changed(ks, path="./b"), ks)))
        answers = [first.request("POST", "/validate", body)[1]["response"]["allowed"] for _ in range(12)]
        assert answers == [False] * 12


def test_a_port_another_program_listens_on_is_an_error_that_names_it(tmp_path):
    (tmp_path / "gates").mkdir()
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        server = GateServer(tmp_path, "--gates-dir", str(tmp_path / "gates"), port=port)
        try:
            code = server.proc.wait(timeout=30)  # not a worker replaced for ever
        except subprocess.TimeoutExpired:
            server.stop()
            pytest.fail(f"serve kept running on a port in use: {server.log()[-1500:]}")
        server.stop()
        assert code != 0
        assert f"cannot listen on 127.0.0.1:{port}: address already in use" in server.log()


@pytest.mark.parametrize(
    "args, said",
    [
        (["serve", "--log-level", "foo"], "'foo' is not a log level"),
        (["controller", "--log-level", "foo"], "'foo' is not a log level"),
        (["serve", "--workers", "0"], "--workers: must be at least 1, not 0"),
        (["serve", "--threads", "0"], "--threads: must be at least 1, not 0"),
        (["serve", "--gates-dir", "/nonexistent/gates"], "--gates-dir /nonexistent/gates: not a directory"),
        (["serve"], "no cluster: "),
        (["controller"], "no cluster: "),
        (["certs", "--out", "/dev/null/certs"], "cannot write /dev/null/certs: Not a directory"),
        (["certs", "--secret", "s"], "no cluster: "),
        (["serve", "--generate-certs", "--cert-dir", "/dev/null/certs"], "cannot write certificates"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else "",
)
def test_started_wrong_it_says_why_in_one_line(tmp_path, args, said):
    # No cluster: no kubeconfig, not in a Pod.
    env = {"PATH": str(BIN), "HOME": str(tmp_path), "KUBECONFIG": str(tmp_path / "none")}
    extra = ["--port", str(free_port()), "--address", "127.0.0.1"] if args[0] == "serve" else []
    if args[0] == "serve" and "--gates-dir" not in args and args != ["serve"]:
        (tmp_path / "gates").mkdir()
        extra += ["--gates-dir", str(tmp_path / "gates")]
    result = gate_admission(*args, *extra, env=env)
    line = one_error_line(result)
    assert said in line, result.stderr
