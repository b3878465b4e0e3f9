"""`kubectl gate` fails with one line and the exit code its help documents: flags checked before
the cluster is asked, API errors told apart from "no cluster", one default namespace for every
command. In process, against the API server double (tests/doubles/apiserver.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from admission.cli import cluster, kubectl_gate
from tests.builders import gate
from tests.conftest import write_gates
from tests.doubles.apiserver import ApiServerDouble
from tests.processes import free_port

GATES = [gate("freeze", "team-a", default="closed"), gate("freeze", "default"), gate("other", "team-b")]


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = kubectl_gate.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def api(tmp_path):
    with ApiServerDouble(GATES) as double:
        double.config = str(double.kubeconfig(tmp_path / "kubeconfig", namespace="team-a"))
        yield double


@pytest.mark.parametrize(
    "command",
    [
        ["open", "freeze", "--for", "2days"],
        ["open", "freeze", "--for=-1h"],
        ["open", "freeze", "-m", "two\nlines"],
        ["open", "freeze", "--for", "9000000h"],  # a close past year 3000 would be ignored
        ["approve", "freeze", "-m", "CHG-1", "--expires", "100000000h"],  # past datetime's last year
    ],
)
def test_a_bad_flag_is_a_usage_error_with_or_without_a_cluster(tmp_path, capsys, command):
    unreachable = tmp_path / "kubeconfig"
    unreachable.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{free_port()}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    for kubeconfig in (tmp_path / "none", unreachable):
        code, _, err = run([*command, "--kubeconfig", str(kubeconfig)], capsys)
        assert code == cluster.EXIT_USAGE, err
        assert err.startswith("error: ") and "Traceback" not in err


@pytest.mark.parametrize(
    "code, reason, exit_code, said",
    [
        (409, "Conflict", cluster.EXIT_CONFLICT, "conflict: "),
        (422, "Invalid", cluster.EXIT_REFUSED, "refused by the API server as invalid: "),
        (500, "InternalError", cluster.EXIT_API_ERROR, "the API server answered 500: "),
        (503, "ServiceUnavailable", cluster.EXIT_API_ERROR, "the API server answered 503: "),
    ],
)
def test_an_api_error_is_not_no_cluster(api, capsys, code, reason, exit_code, said):
    api.refuse[("team-a", "freeze")] = (code, reason)
    got, _, err = run(["open", "freeze", "--kubeconfig", api.config], capsys)
    assert got == exit_code != cluster.EXIT_NO_CLUSTER, err
    assert err.startswith(f"error: {said}") and reason in err and "no cluster" not in err
    assert f"\n  {exit_code}  " in kubectl_gate.__doc__  # documented in --help


def test_list_get_and_calendar_default_to_the_contexts_namespace_offline_too(api, gates_dir, capsys):
    write_gates(gates_dir, GATES)
    source = ["--gates-dir", str(gates_dir), "--kubeconfig", api.config]  # its context: team-a
    code, out, err = run(["list", *source, "-o", "json"], capsys)
    assert code == 0, err
    assert [(r["namespace"], r["name"]) for r in json.loads(out)] == [("team-a", "freeze")]
    code, out, err = run(["get", "freeze", *source, "-o", "json"], capsys)
    assert code == 0 and json.loads(out)["namespace"] == "team-a", err
    code, out, err = run(["calendar", *source, "-o", "json"], capsys)
    assert code == 0 and "team-b" not in out and "team-a" in out, err
    # Without a kubeconfig, both mean `default`.
    offline = ["--gates-dir", str(gates_dir), "--kubeconfig", str(Path(api.config).with_name("none"))]
    code, out, _ = run(["list", *offline, "-o", "json"], capsys)
    assert [(r["namespace"], r["name"]) for r in json.loads(out)] == [("default", "freeze")]
    code, out, _ = run(["get", "freeze", *offline, "-o", "json"], capsys)
    assert json.loads(out)["namespace"] == "default"
    code, out, _ = run(["list", *offline, "-A", "-o", "json"], capsys)
    assert len(json.loads(out)) == 3
