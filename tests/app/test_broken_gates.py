"""Bad gates fail loudly and safely: one broken gate is closed and says why, every other gate is
still served by /metrics, /calendar.ics and `kubectl gate`; a typo closes its gate, never opens it."""

from __future__ import annotations

import subprocess

import orjson
import pytest

from admission.core.admission.decision import Settings
from admission.core.base import names
from admission.core.time.subscriptions import parse_calendar
from admission.store.files import FileStore
from admission.webhook.app import create_app
from tests.app.test_calendar import NOW, events, fetch
from tests.builders import changed, flux, gate, keeper, request, review
from tests.conftest import write_gates
from tests.processes import BIN

LATE = "9999-12-31T23:59:59Z"
FEED = {"url": "https://feeds.example/a.ics"}

# Each a tenant's own gate that once made evaluation overflow, for every gate of the pod.
BROKEN = [
    gate("late-toggle", "tenant", annotations={names.CLOSE_ANNOTATION: LATE}, window="1h"),
    gate("late-open", "tenant", annotations={names.OPEN_ANNOTATION: LATE}, window="876000h"),
    gate("late-calendar", "tenant"),
    {
        **keeper("feed", "late-calendar", namespace="tenant"),
        "spec": {"gate": "late-calendar", "calendars": [FEED]},
        "status": {
            "calendars": [
                {
                    "url": FEED["url"],
                    "specDigest": parse_calendar(FEED).digest,
                    "lastSuccessTime": LATE,
                    "completeUntil": LATE,
                    "intervals": [{"start": "2026-12-20T00:00:00Z", "end": LATE}],
                }
            ]
        },
    },
]
HEALTHY = [gate("sre-approval", default="closed"), gate("qa-approval")]


@pytest.fixture
def served(gates_dir, request):
    """The app over ``request.param`` in the gates directory; its calendar builder (a child
    process) closed after."""
    write_gates(gates_dir, request.param)
    app = create_app(FileStore(gates_dir), Settings(), clock=lambda: NOW)
    app.testing = True
    yield app.test_client()
    app.extensions["calendar_feeds"].close()


def kubectl_gate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "kubectl-gate"), *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("served", [BROKEN + HEALTHY], indirect=True)
def test_a_gate_dated_near_year_9999_breaks_no_shared_surface(gates_dir, served):
    client = served

    metrics = client.get("/metrics")
    assert metrics.status_code == 200
    text = metrics.get_data(as_text=True)
    assert (
        'gate_admission_gate_open{gate="qa-approval",gate_namespace="flux-system",reason="Default"} 1.0'
        in text
    )
    assert 'gate="late-toggle",gate_namespace="tenant"' in text

    feed = events(fetch(client, "/calendar.ics").data)
    assert {summary for summary, _, _ in feed} >= {"Gate flux-system/sre-approval closed"}

    # A review that names the broken gates is answered (closed: never opened by a bad value).
    obj = flux(gates="tenant/late-calendar")
    answer = client.post(
        "/validate",
        data=orjson.dumps(review(request("UPDATE", changed(obj, path="./b"), obj))),
        content_type="application/json",
    ).get_json()["response"]
    assert answer["allowed"] is False

    listed = kubectl_gate("list", "-A", "-o", "json", "--gates-dir", str(gates_dir))
    assert "Traceback" not in listed.stderr, listed.stderr
    rows = {f"{r['namespace']}/{r['name']}": r for r in orjson.loads(listed.stdout)}
    assert rows["flux-system/qa-approval"]["state"] == names.STATE_OPENED
    # The late toggles are ignored (they are not in effect before year 3000 anyway), and said so.
    assert rows["tenant/late-toggle"]["state"] == names.STATE_OPENED
    got = kubectl_gate("get", "late-toggle", "-n", "tenant", "-o", "json", "--gates-dir", str(gates_dir))
    assert any("too late" in p for p in orjson.loads(got.stdout)["problems"]), got.stdout
    # A calendar whose status cannot be read closes its gate, and says why.
    assert rows["tenant/late-calendar"]["state"] == names.STATE_CLOSED
    assert "malformed status" in rows["tenant/late-calendar"]["message"]

    calendar = kubectl_gate("calendar", "-A", "--gates-dir", str(gates_dir))
    assert "Traceback" not in calendar.stderr, calendar.stderr
    # Written wrong, and said so for CI: the late toggle ignored, each problem on stderr, exit 6.
    assert calendar.returncode == listed.returncode == 6
    assert "gate tenant/late-toggle in gates.yaml has input that is ignored" in listed.stderr
    assert "flux-system/sre-approval" in calendar.stdout


TYPOS = [
    (gate("typo", defualt="closed"), "spec.defualt is not a known field"),
    ({**gate("typo"), "spce": {"default": "closed"}}, "spce is not a known field"),
    (gate("typo", approvals={"requird": 2}), "spec.approvals.requird is not a known field"),
]


@pytest.mark.parametrize("typo, said", TYPOS, ids=["spec", "top-level", "approvals"])
def test_a_typo_in_a_gate_closes_it_and_check_says_so(gates_dir, tmp_path, typo, said):
    write_gates(gates_dir, [typo])
    manifest = tmp_path / "apps.yaml"
    manifest.write_text(orjson.dumps(flux(gates="flux-system/typo")).decode())
    checked = kubectl_gate("check", "-f", str(manifest), "--gates-dir", str(gates_dir), "-o", "json")
    assert checked.returncode == 1, (checked.stdout, checked.stderr)  # denied: the gate is closed
    assert orjson.loads(checked.stdout)[0]["verdict"] == "denied"
    assert said in checked.stderr
    listed = kubectl_gate("list", "--gates-dir", str(gates_dir), "-n", "flux-system")
    assert listed.returncode == 6 and said in listed.stderr, (listed.stdout, listed.stderr)
    assert "Closed" in listed.stdout and names.REASON_INVALID in listed.stdout


def test_a_typo_in_a_gatekeeper_closes_its_gate(gates_dir):
    write_gates(
        gates_dir,
        [
            gate("freeze", default="opened"),
            keeper("k", "freeze", closed=["* * 24-26 12 *"], tmeZone="Europe/Berlin"),
            keeper("j", "freeze", closed=[{"cron": "0 18 * * 5", "duraton": "62h"}]),
        ],
    )
    listed = kubectl_gate("list", "--gates-dir", str(gates_dir), "-n", "flux-system", "-o", "json")
    assert listed.returncode == 6, listed.stderr
    row = orjson.loads(listed.stdout)[0]
    assert (row["state"], row["reason"]) == (names.STATE_CLOSED, names.REASON_INVALID)
    assert "spec.tmeZone is not a known field" in listed.stderr
    assert "unknown fields ['duraton']" in listed.stderr


def test_every_problem_of_a_file_and_every_invalid_gate_is_reported_at_once(gates_dir):
    (gates_dir / "gates.yaml").write_text(
        "apiVersion: gating.toolkit.fluxcd.io/v1beta9\nkind: Gate\nmetadata: {name: a}\n---\n"
        "kind: GateKeeper\nmetadata: {name: k}\nspec: {}\n"
    )
    write_gates(
        gates_dir,
        [
            gate("zone"),
            keeper("z", "zone", closed=["* * * * *"], timeZone="Mars/Olympus"),
            gate("cron"),
            keeper("c", "cron", closed=["* * 32 13 *"]),
            gate("duration", window="62hours"),
        ],
        "semantics.yaml",
    )
    listed = kubectl_gate("list", "--gates-dir", str(gates_dir), "-n", "flux-system")
    assert listed.returncode == 6, listed.stderr
    for said in ("apiVersion 'gating.toolkit.fluxcd.io/v1beta9'", "names no gate", "Mars/Olympus", "32"):
        assert said in listed.stderr, (said, listed.stderr)
    assert "62hours" in listed.stderr
    assert "Traceback" not in listed.stderr
