"""The README's worked example, as a reader runs it: the server on a copy of examples/gates, the
README's own curl command, and the answer the README shows compared with the one it prints; then
the gate opened the way the README says, and the same review allowed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from datetime import UTC, datetime

import pytest
import yaml

from admission.core.base.names import OPEN_ANNOTATION
from admission.core.base.timefmt import format_time
from tests import ROOT
from tests.polling import until
from tests.processes import BIN, GateServer

EXAMPLE = ROOT / "README.md"


def worked_example() -> tuple[str, dict]:
    """The README's curl command of the worked example and the answer it shows."""
    section = EXAMPLE.read_text().split("## A worked example", 1)[1]
    command = re.search(r"```sh\n(curl .*?)```", section, flags=re.S)
    answer = re.search(r"```json\n(.*?)```", section, flags=re.S)
    assert command and answer, "README.md's worked example lost its curl command or its answer"
    return command.group(1).replace("\\\n", " ").strip(), json.loads(answer.group(1))


@pytest.fixture()
def server(tmp_path):
    gates = tmp_path / "gates"
    shutil.copytree(ROOT / "examples" / "gates", gates)
    srv = GateServer(tmp_path, "--gates-dir", str(gates), "--workers", "1")
    try:
        srv.wait_ready()
        yield srv, gates
    finally:
        srv.stop()


def run(command: str, srv: GateServer) -> dict:
    """The README's command with this server's port and CA, run by bash in the repository."""
    command = command.replace("certs/ca.crt", str(srv.cert_dir / "ca.crt")).replace(":9443", f":{srv.port}")
    done = subprocess.run(["bash", "-c", command], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_worked_example_prints_what_the_readme_shows(server):
    srv, _ = server
    command, shown = worked_example()
    assert run(command, srv) == shown


def test_opening_the_gate_as_the_readme_says_allows_the_same_review(server):
    srv, gates = server
    command, _ = worked_example()
    approvals = gates / "approvals.yaml"
    documents = list(yaml.safe_load_all(approvals.read_text()))
    sre = next(d for d in documents if d and d["metadata"]["name"] == "sre-approval")
    sre["metadata"].setdefault("annotations", {})[OPEN_ANNOTATION] = format_time(datetime.now(UTC))
    approvals.write_text(yaml.safe_dump_all(documents))
    answer = until(
        lambda: run(command, srv), lambda out: out["response"]["allowed"], timeout=10, interval=0.2
    )
    assert answer["response"]["allowed"] is True, answer


# Offline, check judges as this machine's user: the README's example was made as alice.
README_USER = {"LOGNAME": "alice", "USER": "alice", "LNAME": "alice", "USERNAME": "alice"}


def kubectl_gate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "kubectl-gate"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **README_USER},
    )


def test_kubectl_gate_check_prints_what_the_readme_shows():
    text = EXAMPLE.read_text()
    shown = re.search(
        r"\$ kubectl gate check (-f examples/podinfo.yaml --gates-dir examples/gates)\n(.*?)\n\s*```",
        text,
        flags=re.S,
    )
    assert shown, "README.md lost its `kubectl gate check` example"
    done = kubectl_gate("check", *shown.group(1).split())
    assert done.returncode == 1  # held: "exit 1 when held", as the README says
    assert [line.strip() for line in done.stdout.splitlines()] == [
        line.strip() for line in shown.group(2).splitlines()
    ]
    as_json = re.search(r"`verdictText`.*?```json\n(.*?)```", text, flags=re.S)
    assert as_json, "README.md lost its `kubectl gate check -o json` example"
    done = kubectl_gate("check", *shown.group(1).split(), "-o", "json")
    assert json.loads(done.stdout) == json.loads(as_json.group(1))
