"""`kubectl gate`'s flags as kubectl users use them, in process (and `--watch` as its own
process): usage errors found before any connection, a deadline on every API call, `check -f DIR`,
`-R`, `-k`, `--no-headers`, `--watch`. The cluster here is a TCP port that counts connections
or holds them unanswered; tests/e2e/test_operators.py runs the flags against a real API server."""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from admission.cli import cluster, kubectl_gate
from tests import ROOT
from tests.builders import flux, gate
from tests.conftest import write_gates
from tests.doubles.apiserver import ApiServerDouble
from tests.polling import until
from tests.processes import BIN, SilentPort

HELD = flux(name="podinfo", gates="flux-system/freeze")
GATES = [gate("freeze", default="closed")]


@pytest.fixture
def port():
    counted = SilentPort()
    yield counted
    counted.close()


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        code = kubectl_gate.main(argv)
    except SystemExit as exited:  # argparse's usage errors
        code = exited.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def files(tmp_path) -> Path:
    """A manifest, an empty directory and a gates directory, by name."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "held.yaml").write_text(yaml.safe_dump(HELD))
    (tmp_path / "gates").mkdir()
    write_gates(tmp_path / "gates", GATES)
    return tmp_path


@pytest.mark.parametrize(
    "command",
    [
        ["calendar", "--days", "0"],
        ["check", "-f", "{tmp}/missing.yaml"],
        ["check", "-f", "{tmp}/empty"],
        ["check", "-f", "-", "-f", "-"],
        ["check", "-k", "{tmp}/missing"],
        ["check", "-k", "{tmp}/empty", "-R"],
        ["check", "-f", "{tmp}/held.yaml", "--as-group", "sre"],
        ["check", "-f", "{tmp}/held.yaml", "--judge-as-group", "sre"],
        ["check", "-f", "{tmp}/held.yaml", "--exempt-users", "bob"],  # the server's, not a cluster's check's
        ["open", "freeze", "--for", "2days"],
        ["approve", "freeze", "--for", "not-a-target"],
        ["list", "--request-timeout", "soon"],
        ["get", "freeze", "--bogus"],
        ["pending", "--watch=yes"],
        ["board", "--port", "70000"],
    ],
)
def test_usage_errors_are_found_before_the_cluster_is_asked(port, files, capsys, command):
    argv = [word.replace("{tmp}", str(files)) for word in command]
    code, _, err = run([*argv, "--kubeconfig", port.kubeconfig(files / "kubeconfig")], capsys)
    assert code == cluster.EXIT_USAGE, err
    assert port.connections == 0, f"asked the cluster before saying: {err}"
    assert "Traceback" not in err and err.count("\n") <= 6, err  # one line, or argparse's usage and a line


@pytest.mark.parametrize(
    "command",
    [
        ["list"],
        ["get", "freeze"],
        ["open", "freeze"],
        ["close", "freeze"],
        ["check", "-f", "{tmp}/held.yaml"],
        ["approve", "freeze", "-m", "CHG-1"],
        ["pending"],
        ["calendar"],
    ],
)
def test_every_call_to_the_cluster_has_a_deadline(files, capsys, command):
    unanswered = SilentPort(hold=15)  # the answer never comes; the connection ends after 15 s
    try:
        argv = [word.replace("{tmp}", str(files)) for word in command]
        started = time.monotonic()
        code, _, err = run(
            [*argv, "--kubeconfig", unanswered.kubeconfig(files / "kubeconfig"), "--request-timeout", "0.5s"],
            capsys,
        )
        took = time.monotonic() - started
    finally:
        unanswered.close()
    assert code == cluster.EXIT_NO_CLUSTER and "did not answer in time (--request-timeout)" in err, err
    assert took < 8, f"{took:.1f}s for a 0.5 s timeout"


def test_the_default_deadline_holds_without_the_flag(files, capsys, monkeypatch):
    monkeypatch.setattr(kubectl_gate, "DEFAULT_REQUEST_TIMEOUT", 0.5)  # 30 s, shortened to test it
    unanswered = SilentPort(hold=15)
    try:
        code, _, err = run(["list", "--kubeconfig", unanswered.kubeconfig(files / "kubeconfig")], capsys)
    finally:
        unanswered.close()
    assert code == cluster.EXIT_NO_CLUSTER and "--request-timeout" in err, err


def checked(argv: list[str], files: Path, capsys) -> tuple[int, list[tuple[str, str]]]:
    code, out, err = run(
        [
            "check",
            *argv,
            "--gates-dir",
            str(files / "gates"),
            "--kubeconfig",
            str(files / "none"),
            "-o",
            "json",
        ],
        capsys,
    )
    assert code in (cluster.EXIT_OK, cluster.EXIT_DENIED), err
    return code, [(row["namespace"], row["name"]) for row in json.loads(out)]


def test_check_reads_a_directory_as_kubectl_does(files, capsys):
    manifests = files / "manifests"
    (manifests / "nested").mkdir(parents=True)
    for name, filename in (("a", "a.yaml"), ("b", "b.yml"), ("c", "c.json")):
        (manifests / filename).write_text(json.dumps(flux(name=name, gates="flux-system/freeze")))
    (manifests / "notes.txt").write_text("{not: [yaml")  # not a manifest's extension: never read
    (manifests / "nested" / "d.yaml").write_text(yaml.safe_dump(flux(name="d", gates="flux-system/freeze")))
    code, seen = checked(["-f", str(manifests)], files, capsys)
    assert (code, seen) == (cluster.EXIT_DENIED, [("apps", "a"), ("apps", "b"), ("apps", "c")])
    _, seen = checked(["-f", str(manifests), "-R"], files, capsys)
    assert seen == [("apps", "a"), ("apps", "b"), ("apps", "c"), ("apps", "d")]
    _, seen = checked(["-f", str(manifests / "nested"), "-f", str(files / "held.yaml")], files, capsys)
    assert seen == [("apps", "d"), ("apps", "podinfo")]


def kubectl() -> str:
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    found = (
        str(Path(assets) / "kubectl")
        if assets and (Path(assets) / "kubectl").exists()
        else shutil.which("kubectl")
    )
    if not found:
        pytest.skip("no kubectl for -k: set KUBEBUILDER_ASSETS or put kubectl on PATH")
    return found


def test_check_k_judges_what_kubectl_kustomize_renders(files, capsys, monkeypatch):
    monkeypatch.setenv("PATH", f"{Path(kubectl()).parent}{os.pathsep}{os.environ['PATH']}")
    base = files / "base"
    base.mkdir()
    (base / "held.yaml").write_text(yaml.safe_dump(HELD))
    (base / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": ["held.yaml"], "namespace": "rendered", "namePrefix": "prod-"})
    )
    code, seen = checked(["-k", str(base)], files, capsys)
    assert (code, seen) == (cluster.EXIT_DENIED, [("rendered", "prod-podinfo")])
    (base / "kustomization.yaml").write_text(yaml.safe_dump({"resources": ["missing.yaml"]}))
    code, _, err = run(["check", "-k", str(base), "--gates-dir", str(files / "gates")], capsys)
    assert (
        code == cluster.EXIT_USAGE
        and err.startswith(f"error: -k {base}: kustomize failed: ")
        and "missing.yaml" in err
    )
    assert err.count("\n") == 1, err


def test_no_headers(files, capsys):
    offline = ["--gates-dir", str(files / "gates"), "--kubeconfig", str(files / "none"), "-n", "flux-system"]
    _, out, _ = run(["list", *offline], capsys)
    assert out.splitlines()[0].startswith("NAME ") and len(out.splitlines()) == 2
    _, out, _ = run(["list", *offline, "--no-headers"], capsys)
    assert [line.split()[:2] for line in out.splitlines()] == [["freeze", "Closed"]]
    _, out, _ = run(["check", "-f", str(files / "held.yaml"), *offline, "--no-headers"], capsys)
    assert out.splitlines()[0].split()[:3] == ["Kustomization", "apps", "podinfo"]
    _, out, _ = run(["list", *offline[:-1], "empty-namespace", "--no-headers"], capsys)
    assert out == ""  # nothing found, and nothing printed for a script to mistake for a row


def test_watch_prints_the_answer_again_when_it_changes_until_interrupted(files):
    gates = files / "gates"
    write_gates(gates, [gate("freeze", default="opened")])
    watching = subprocess.Popen(
        [str(BIN / "kubectl-gate"), "list", "--gates-dir", str(gates), "-n", "flux-system", "--watch"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "KUBECONFIG": str(files / "none")},
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in watching.stdout], daemon=True).start()
    seen: list[str] = []

    def read() -> list[str]:
        while not lines.empty():
            seen.append(lines.get())
        return seen

    try:
        assert any("Opened" in line for line in until(read, lambda s: any("Opened" in x for x in s))), seen
        write_gates(gates, [gate("freeze", default="closed")])
        until(read, lambda s: any("Closed" in x for x in s))
        assert [line.split()[:2] for line in seen if line.strip()] == [
            ["NAME", "STATE"],
            ["freeze", "Opened"],
            ["NAME", "STATE"],
            ["freeze", "Closed"],
        ], seen
    finally:
        watching.send_signal(signal.SIGINT)
        _, err = watching.communicate(timeout=30)
    assert watching.returncode == 0 and "Traceback" not in err, err


def test_watch_outlasts_a_failing_api_server(tmp_path):
    """After its first answer, --watch says a failed look on stderr (once while it repeats) and
    goes on: the answer after the API server recovers is printed as any other."""
    with ApiServerDouble([gate("freeze", default="opened")]) as api:
        config = api.kubeconfig(tmp_path / "kubeconfig", namespace="flux-system")
        watching = subprocess.Popen(
            [str(BIN / "kubectl-gate"), "list", "--watch", "--no-headers", "--kubeconfig", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        out, err = Lines(watching.stdout), Lines(watching.stderr)
        try:
            assert until(out.read, lambda s: s, timeout=30)[0].split()[:2] == ["freeze", "Opened"]
            api.failing = (503, "ServiceUnavailable")
            until(err.read, lambda s: len(s) >= 1, timeout=30)
            api.failing = None
            api.gates[("flux-system", "freeze")]["spec"]["default"] = "closed"
            until(out.read, lambda s: any("Closed" in line for line in s), timeout=30)
        finally:
            watching.send_signal(signal.SIGINT)
            watching.wait(timeout=30)
        assert [line.split()[:2] for line in out.seen if line.strip()] == [
            ["freeze", "Opened"],
            ["freeze", "Closed"],
        ]
        assert (
            err.read()[0].startswith("error: the API server answered 503: ")
            and "(--watch goes on)" in err.seen[0]
        )
        assert len(err.read()) == 1 and watching.returncode == 0, err.seen  # said once; no traceback


class Lines:
    """What a process writes to one of its pipes, line by line, read as it comes."""

    def __init__(self, pipe):
        self.seen: list[str] = []
        self.queue: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [self.queue.put(line) for line in pipe], daemon=True).start()

    def read(self) -> list[str]:
        while not self.queue.empty():
            self.seen.append(self.queue.get())
        return self.seen


def test_a_reader_that_goes_away_ends_the_command_quietly():
    # `kubectl gate list | head -1`: the pipe closes before the answer is written.
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [str(BIN / "kubectl-gate"), "list", "--gates-dir", str(ROOT / "examples" / "gates"), "-A"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            env={**os.environ, "KUBECONFIG": "/nonexistent"},
        )
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (0, "")
