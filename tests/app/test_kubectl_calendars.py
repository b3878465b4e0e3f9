"""`kubectl gate get` and `kubectl gate calendar` show the calendars a gate follows: the feed
(its URL without the query), its last fetch and success, why it is unknown, its next events.
(The GateKeeper's status is read from a gates directory here, as from the cluster.)"""

from __future__ import annotations

import json
from datetime import timedelta

from admission.clock import utcnow
from admission.core.time.subscriptions import FeedEvent, parse_calendar, status_entry
from tests.app.test_calendar import kubectl_gate
from tests.builders import calendar_keeper, gate
from tests.conftest import write_gates

FEED = {
    "url": "https://calendar.example.com/team/freeze.ics?private=s3cret",
    "name": "team-freeze",
    "staleAfter": "48h",
}
BROKEN = {"url": "https://hub.example.com/calendar.ics", "name": "hub"}


def gates(now) -> list[dict]:
    hour = now.replace(minute=0, second=0, microsecond=0)
    events = [
        FeedEvent(hour + timedelta(days=d), hour + timedelta(days=d, hours=2), f"u{d}", f"Release freeze {d}")
        for d in (1, 2)
    ]
    fetched = status_entry(
        parse_calendar(FEED),
        None,
        now - timedelta(minutes=5),
        events=events,
        complete_until=now + timedelta(days=35),
    )
    failed = status_entry(
        parse_calendar(BROKEN), None, now - timedelta(minutes=1), error="HTTP 401 UNAUTHORIZED"
    )
    return [
        gate("release", default="opened"),
        calendar_keeper("follows", "release", [FEED, BROKEN], [fetched, failed]),
    ]


def test_get_shows_each_calendar_its_fetch_and_next_events(gates_dir):
    now = utcnow()
    write_gates(gates_dir, gates(now))
    result = kubectl_gate("get", "release", "-n", "flux-system", "--gates-dir", str(gates_dir), "-o", "json")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["state"] == "Closed" and info["reason"] == "Unknown"  # the hub's calendar was never fetched
    first, second = info["calendars"]
    assert first["url"] == "https://calendar.example.com/team/freeze.ics?…"  # the query may hold a secret
    assert first["unknown"] is None and [e["summary"] for e in first["next"]] == [
        "Release freeze 1",
        "Release freeze 2",
    ]
    assert second["unknown"] == "calendar 'hub' has not been fetched yet: HTTP 401 UNAUTHORIZED"
    table = kubectl_gate("get", "release", "-n", "flux-system", "--gates-dir", str(gates_dir)).stdout
    assert "Calendars:" in table and "team-freeze (closed during its events; GateKeeper follows)" in table
    assert (
        "Release freeze 1" in table
        and "State:        unknown: calendar 'hub' has not been fetched yet" in table
    )
    assert "s3cret" not in table


def test_calendar_lists_each_gates_calendars_within_100_columns(gates_dir):
    write_gates(gates_dir, gates(utcnow()))
    result = kubectl_gate("calendar", "-n", "flux-system", "--gates-dir", str(gates_dir))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100
    team = next(
        i
        for i, line in enumerate(lines)
        if line.startswith("  calendar 'team-freeze' (closed, GateKeeper follows): fetched ")
    )
    assert lines[team + 1].startswith("    next ") and lines[team + 1].endswith("  Release freeze 1")
    assert any(line.startswith("  calendar 'hub' (closed, GateKeeper follows): unknown: ") for line in lines)
    rows = json.loads(
        kubectl_gate("calendar", "-n", "flux-system", "-o", "json", "--gates-dir", str(gates_dir)).stdout
    )
    assert [c["name"] for c in rows[0]["calendars"]] == ["team-freeze", "hub"]


def test_list_and_get_say_when_the_next_change_is_unknown_rather_than_none(gates_dir, monkeypatch, capsys):
    from admission.cli import gate_commands
    from admission.cli import kubectl_gate as cli
    from tests.builders import at, keeper

    nights = keeper(
        "nights",
        "d",
        closed=["*/15 * * * *"],
        opened=["* 0-4 * * *", "0,15,30,45 * * * *"],
        timeZone="Europe/Berlin",
    )
    write_gates(gates_dir, [gate("d", default="closed"), nights, gate("shut", default="closed")])
    monkeypatch.setattr(gate_commands, "utcnow", lambda: at("2026-11-15T04:00"))
    assert cli.main(["list", "-n", "flux-system", "--gates-dir", str(gates_dir)]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert "unknown after 2026-11-15T" in rows["d"]  # it opens at 23:01, beyond what was searched
    assert "unknown" not in rows["shut"]  # nothing will change: no time at all
    assert cli.main(["get", "d", "-n", "flux-system", "--gates-dir", str(gates_dir), "-o", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["until"] is None and shown["unknownAfter"].startswith("2026-11-15T")
