"""Text from gates and objects reaches a terminal only with its control characters escaped, and
`kubectl gate open`/`close` and the receiver refuse to write them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from admission.cli import cluster, flux_gate, kubectl_gate
from admission.core.base.names import CLOSE_ANNOTATION, MESSAGE_ANNOTATION, REQUESTED_BY_ANNOTATION
from tests.builders import flux, gate
from tests.conftest import write_gates

# What was seen: an OSC title, a carriage return and "erase line" repainting the line, colours,
# a C1 CSI, DEL, a right-to-left override and a line break that starts a forged line.
FORGED = "\x1b]0;pwned\x07\r\x1b[2K\x1b[32mFAKE: gate freeze is OPEN\x1b[0m \x9b2J\x7f\u202e\nState: Opened"
CONTROLS = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


@pytest.fixture
def forged_gates(gates_dir):
    write_gates(
        gates_dir,
        [
            gate(
                "freeze",
                default="opened",
                annotations={
                    CLOSE_ANNOTATION: "2026-01-01T00:00:00Z",
                    MESSAGE_ANNOTATION: FORGED,
                    REQUESTED_BY_ANNOTATION: FORGED,
                },
            )
        ],
    )
    return str(gates_dir)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = kubectl_gate.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def shows_no_controls(text: str) -> None:
    assert not CONTROLS.search(text), repr(text)
    assert not any(line.startswith("State: Opened") for line in text.splitlines()), text


@pytest.mark.parametrize("output", ["table", "json", "yaml"])
def test_get_escapes_a_gates_message_and_requester(capsys, forged_gates, output):
    code, out, _ = run(
        capsys, "get", "freeze", "-n", "flux-system", "--gates-dir", forged_gates, "-o", output
    )
    assert code == 0
    shows_no_controls(out)
    if output == "table":
        assert "\\u001b]0;pwned\\u0007\\u000d\\u001b[2K" in out  # shown, escaped, not swallowed
    else:  # still the data it was: a script reading it gets the message back
        info = json.loads(out) if output == "json" else yaml.safe_load(out)
        assert info["requestedBy"] == FORGED and info["requestMessage"] == FORGED


@pytest.mark.parametrize("output", ["table", "json"])
def test_list_and_calendar_escape_gate_text(capsys, forged_gates, output):
    for command in ("list", "calendar"):
        code, out, _ = run(capsys, command, "-A", "--gates-dir", forged_gates, "-o", output)
        assert code == 0
        shows_no_controls(out)


def test_check_escapes_object_names_and_the_decision_message(capsys, forged_gates, tmp_path):
    manifest = tmp_path / "m.yaml"
    manifest.write_text(yaml.safe_dump(flux(name="podinfo\r\x1b[2KFAKE", gates="flux-system/freeze")))
    write_gates(
        Path(forged_gates), [gate("freeze", default="closed", annotations={MESSAGE_ANNOTATION: FORGED})]
    )
    code, out, _ = run(capsys, "check", "-f", str(manifest), "--gates-dir", forged_gates)
    assert code == 1 and "would be denied" in out
    shows_no_controls(out)


def test_errors_escape_what_they_quote(capsys, forged_gates, tmp_path):
    bad = tmp_path / "gates" / "broken\x1b[2K.yaml"
    bad.write_text("kind: Gate\nmetadata: [\x1b\n")
    _, out, err = run(capsys, "list", "--gates-dir", forged_gates)
    shows_no_controls(out + err)
    assert "error: --gates-dir" in err


@pytest.mark.parametrize("flag", ["-m", "--requested-by"])
def test_open_refuses_a_message_or_requester_with_control_characters(capsys, flag):
    code, out, err = run(
        capsys,
        "open",
        "freeze",
        "-n",
        "flux-system",
        flag,
        "ok\x1b[2K\rFAKE",
        "--kubeconfig",
        "/nonexistent/kubeconfig",
    )
    assert code == cluster.EXIT_USAGE, (code, err)
    assert "control character" in err
    shows_no_controls(out + err)


def test_completion_offers_no_name_a_gate_cannot_have(capsys, gates_dir):
    write_gates(gates_dir, [gate("freeze"), gate("evil\x1b]0;pwned\x07")])
    code = flux_gate.main(["__complete", "get", "--gates-dir", str(gates_dir), "-n", "flux-system", ""])
    out = capsys.readouterr().out
    assert code == 0 and out.splitlines() == ["freeze", ":4"]


def test_the_ics_feed_carries_no_control_characters(capsysbinary, forged_gates):
    # RFC 5545 allows none in a text value; printed to a terminal, they would act on it.
    code = kubectl_gate.main(["calendar", "-A", "--gates-dir", forged_gates, "-o", "ics"])
    ics = capsysbinary.readouterr().out.decode()
    assert code == 0 and "BEGIN:VEVENT" in ics
    shows_no_controls(ics.replace("\r\n", "\n"))
