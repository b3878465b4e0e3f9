"""The freeze calendar: `kubectl gate calendar` (text, json, ics) and GET /calendar.ics (issue 15)."""

from __future__ import annotations

import subprocess
from datetime import datetime, timezone

import pytest
from icalendar import Calendar

from admission.core import names
from admission.webhook.app import create_app
from admission.core.decision import Settings
from admission.store.files import FileStore
from tests.builders import at, gate, keeper
from tests.conftest import write_gates
from tests.processes import BIN

NOW = at("2026-12-20T10:00")
GATES = [
    gate("change-freeze", default="opened"),
    keeper("freeze", "change-freeze", closed=["* * 24-26 12 *", {"cron": "0 18 * * 5", "duration": "62h"}],
           timeZone="Europe/Berlin"),
    gate("sre-approval", default="closed", annotations={
        names.OPEN_ANNOTATION: "2026-12-22T09:00:00Z", names.CLOSE_ANNOTATION: "2026-12-22T11:00:00Z",
        names.REQUESTED_BY_ANNOTATION: "bob"}),
    gate("nightly", "apps"),
    keeper("n", "nightly", closed=[{"cron": "0 1 * * *", "duration": "2h"}], namespace="apps", timeZone="America/New_York"),
]


def events(ics: bytes) -> list[tuple[str, datetime, datetime]]:
    """The events a calendar client reads: summary, start and end (aware datetimes)."""
    return [(str(e["SUMMARY"]), e.decoded("DTSTART"), e.decoded("DTEND")) for e in Calendar.from_ical(ics).walk("VEVENT")]


@pytest.fixture
def client(gates_dir):
    write_gates(gates_dir, GATES)
    app = create_app(FileStore(gates_dir), Settings(), clock=lambda: NOW)
    app.testing = True
    return app.test_client()


def test_the_feed_has_one_event_per_closed_interval_in_the_gates_time_zone(client):
    response = client.get("/calendar.ics?namespace=flux-system")
    assert response.status_code == 200 and response.content_type == "text/calendar; charset=utf-8"
    got = events(response.data)
    assert [(s, a.astimezone(timezone.utc), b.astimezone(timezone.utc)) for s, a, b in got] == [
        ("Gate flux-system/change-freeze closed", at("2026-12-19T23:00"), at("2026-12-21T07:00")),  # clipped at today
        ("Gate flux-system/change-freeze closed", at("2026-12-23T23:00"), at("2026-12-28T07:00")),  # Christmas + weekend
        ("Gate flux-system/change-freeze closed", at("2027-01-01T17:00"), at("2027-01-02T23:00")),  # New Year's Friday
        ("Gate flux-system/sre-approval closed", at("2026-12-20T00:00"), at("2026-12-22T09:00")),
        ("Gate flux-system/sre-approval closed", at("2026-12-22T11:00"), at("2027-01-03T00:00")),
    ]
    assert str(got[0][1].tzinfo) == "Europe/Berlin"  # DTSTART;TZID=Europe/Berlin, with its VTIMEZONE
    assert b"BEGIN:VTIMEZONE\r\nTZID:Europe/Berlin" in response.data
    again = client.get("/calendar.ics?namespace=flux-system").data
    uids = [str(e["UID"]) for e in Calendar.from_ical(again).walk("VEVENT")]
    assert uids == [str(e["UID"]) for e in Calendar.from_ical(response.data).walk("VEVENT")]  # stable for subscribers


def test_the_feed_covers_every_namespace_unless_asked_and_checks_days(client):
    summaries = {s for s, _, _ in events(client.get("/calendar.ics").data)}
    assert summaries == {"Gate flux-system/change-freeze closed", "Gate flux-system/sre-approval closed",
                         "Gate apps/nightly closed"}
    assert len(events(client.get("/calendar.ics?namespace=apps&days=3").data)) == 3
    for bad in ("0", "367", "soon"):
        response = client.get(f"/calendar.ics?days={bad}")
        assert response.status_code == 400 and "days must be" in response.json["error"]
    assert client.post("/calendar.ics").status_code == 405  # read-only


def test_no_feed_when_the_server_is_told_not_to(gates_dir):
    write_gates(gates_dir, GATES)
    app = create_app(FileStore(gates_dir), Settings(), clock=lambda: NOW, calendar=False)
    assert app.test_client().get("/calendar.ics").status_code == 404


def kubectl_gate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "kubectl-gate"), *args], capture_output=True, text=True, timeout=60)


def test_kubectl_gate_calendar_prints_a_timeline_that_fits_100_columns(gates_dir):
    write_gates(gates_dir, GATES)
    result = kubectl_gate("calendar", "-A", "--gates-dir", str(gates_dir))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100
    assert lines[0].startswith("14 days from today, in each gate's time zone. One character: 4h")
    assert any(line.startswith("flux-system/change-freeze  (Europe/Berlin;") for line in lines)
    assert "apps/nightly  (America/New_York;" in result.stdout


def test_kubectl_gate_calendar_writes_ics_and_json(gates_dir):
    write_gates(gates_dir, GATES)
    ics = subprocess.run([str(BIN / "kubectl-gate"), "calendar", "-n", "apps", "--days", "2", "-o", "ics",
                          "--gates-dir", str(gates_dir)], capture_output=True, timeout=60)
    assert ics.returncode == 0 and {s for s, _, _ in events(ics.stdout)} <= {"Gate apps/nightly closed"}
    as_json = kubectl_gate("calendar", "-n", "apps", "--days", "2", "-o", "json", "--gates-dir", str(gates_dir))
    assert '"timeZone": "America/New_York"' in as_json.stdout and '"state": "Closed"' in as_json.stdout
    bad = kubectl_gate("calendar", "--days", "0", "--gates-dir", str(gates_dir))
    assert bad.returncode == 2 and "--days must be between 1 and 366" in bad.stderr
    assert kubectl_gate("list", "-o", "ics", "--gates-dir", str(gates_dir)).returncode == 2  # ics is calendar's only


def test_a_gate_that_flips_every_two_minutes_keeps_the_feed_bounded(gates_dir):
    write_gates(gates_dir, [gate("flappy", default="opened"), keeper("k", "flappy", closed=["*/2 * * * *"])])
    app = create_app(FileStore(gates_dir), Settings(), clock=lambda: NOW)
    response = app.test_client().get("/calendar.ics?days=14")
    vevents = Calendar.from_ical(response.data).walk("VEVENT")
    assert response.status_code == 200 and len(vevents) == 500
    assert "later closed intervals of this gate are not listed" in str(vevents[-1]["DESCRIPTION"])
