"""The gate board's model (``admission.board.model``) at explicit times: what it shows is the
core's own evaluation (states as the webhook looks them up, spans from ``core.gates.timeline``,
suspensions from ``core.gates.references``, held rows from ``core.admission.pending``), read in the zone asked
for, filtered as asked; and a page's parameters, whatever they hold, always make a query."""

from __future__ import annotations

import functools
import itertools
import re
from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from admission.board import page
from admission.board import timeline as board_timeline
from admission.board.model import (
    GATE_ZONE,
    MAX_DAYS,
    MAX_QUERY,
    Query,
    Snapshot,
    build,
    query_of,
)
from admission.core.admission.pending import pending_rows
from admission.core.base import names
from admission.core.base.objects import object_key
from admission.core.gates.references import is_namespace, suspend_windows
from admission.core.gates.timeline import intervals, time_zone
from admission.core.time.cron import ScheduleError
from admission.core.time.cron import zone as zone_named
from admission.store.index import GateIndex
from tests.builders import at, flux, gate, keeper
from tests.unit.test_approvals import stamped
from tests.unit.test_content import GIT_A, GIT_B, art

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
NOW = at("2026-10-22T21:30")  # Berlin changes its clocks on the 25th, within the 14 days


def held(
    name: str = "podinfo", waits: str = GIT_B, gate_key: str = "flux-system/freeze", namespace: str = "apps"
) -> dict:
    """A GitRepository whose new revision ``waits`` behind ``gate_key``, as source-controller
    and our webhook leave it."""
    obj = flux(
        "GitRepository",
        name,
        namespace,
        gates=gate_key,
        spec={"interval": "1m"},
        status={"artifact": art(GIT_A)},
    )
    obj["status"]["conditions"] = [
        {
            "type": names.BLOCKED_CONDITION,
            "status": "True",
            "reason": names.GATE_CLOSED_REASON,
            "lastTransitionTime": "2026-06-10T11:00:00Z",
            "message": f"Reconciliation is blocked as gate '{gate_key}' is closed: {waits} waits, serving {GIT_A}",
        }
    ]
    return obj


def gates_and_keepers() -> tuple[list[dict], list[dict]]:
    gates = [
        gate("nightly", default="opened"),
        gate("weekend", default="opened"),
        gate(
            "freeze",
            default="closed",
            annotations={
                names.APPROVAL_ANNOTATION_PREFIX + "a1": stamped(
                    content=GIT_B, expires="2026-10-23T12:00:00Z"
                ),
                names.OPEN_ANNOTATION: "2026-10-23T08:00:00.000000Z",
                names.CLOSE_ANNOTATION: "2026-10-23T10:00:00.000000Z",
                names.MESSAGE_ANNOTATION: "release CHG-42",
            },
        ),
        gate("payments", namespace="team-a", default="opened"),
    ]
    keepers = [
        keeper("k", "nightly", closed=["* 22-23 * * *"], timeZone="Europe/Berlin"),
        keeper("w", "weekend", closed=["* * * * 6,0"]),
        keeper("p", "payments", namespace="team-a", closed=[{"cron": "0 9 * * 1-5", "duration": "90m"}]),
    ]
    return gates, keepers


def objects() -> list[dict]:
    suspended = flux(
        "Kustomization", "nightly-jobs", annotations={names.SUSPEND_DURING_ANNOTATION: "* 22-23 * * *"}
    )
    broken = flux(
        "HelmRelease",
        "api",
        namespace="team-a",
        annotations={names.SUSPENDED_DURING_ANNOTATION: "not a cron"},
    )
    return [
        held(),
        held("other", gate_key="team-a/payments", namespace="team-a"),
        held("second", gate_key="flux-system/freeze"),
        suspended,
        broken,
        flux("Kustomization", "idle", gates="flux-system/freeze"),
    ]


@functools.cache
def snapshot() -> Snapshot:
    """Built once: the board only reads it (its index caches states, as the webhook's does)."""
    index = GateIndex()
    index.replace_all(*gates_and_keepers())
    return Snapshot(index, objects())


def board(query: Query | None = None, viewer=UTC, now: datetime = NOW):
    return build(snapshot(), now, query or Query(), viewer, "here", True)


# -- one source of truth ----------------------------------------------------------------------


@pytest.mark.parametrize("days, offset", [(14, 0), (7, 0), (3, 2), (1, 0), (1, 13)])
@pytest.mark.parametrize("viewer", [UTC, BERLIN, NEW_YORK])
def test_each_gates_spans_are_the_cores_intervals_over_the_days_shown(days, offset, viewer):
    shown = board(Query(days=days, offset=offset), viewer)
    index = snapshot().gate_index
    assert [r.key for r in shown.gates] == [
        "flux-system/freeze",
        "flux-system/nightly",
        "flux-system/weekend",
        "team-a/payments",
    ]
    first_day = NOW.astimezone(viewer).date() + timedelta(days=offset)
    for row in shown.gates:
        line = row.timeline
        # From local midnight to local midnight, ``days`` later (23 or 25 hours a day where the clocks change).
        assert line.zone == viewer and line.start == datetime.combine(first_day, time(0), tzinfo=viewer)
        assert line.end == datetime.combine(first_day + timedelta(days=days), time(0), tzinfo=viewer)
        compiled = index.compiled(row.state.namespace, row.state.name)
        assert line.spans == intervals(compiled, line.start, line.end)
        assert line.spans[0].start == line.start and line.spans[-1].end == line.end
        assert all(a.end == b.start for a, b in itertools.pairwise(line.spans))
        assert row.state == index.lookup(row.state.namespace, row.state.name, NOW)


def test_the_spans_say_what_the_webhook_would_at_every_change():
    # At each span's start and just before its end the gate's state is the span's.
    index = snapshot().gate_index
    for row in board().gates:
        for span in row.timeline.spans:
            for t in (span.start, span.end - timedelta(seconds=1)):
                if row.timeline.start <= t:
                    assert index.lookup(row.state.namespace, row.state.name, t).open == span.open, (
                        row.key,
                        t,
                    )


def _page_of_a_new_index(gates: list[dict], keepers: list[dict], now: datetime, query: Query) -> str:
    # A new index each look, as the cluster source's snapshots have: what is remembered between
    # looks is found by what the gates are, not by which index compiled them.
    index = GateIndex()
    index.replace_all(gates, keepers)
    return page.page(build(Snapshot(index, objects()), now, query, BERLIN, "here", True), page.View("t"))


def test_a_page_drawn_with_what_earlier_looks_remembered_is_the_page_drawn_anew():
    gates, keepers = gates_and_keepers()
    closed = [
        gate(
            "nightly",
            default="opened",
            annotations={
                names.CLOSE_ANNOTATION: "2026-10-22T19:00:00.000000Z",  # open until 22:00 Berlin
                names.MESSAGE_ANNOTATION: "INC-7 payments degraded",
            },
        ),
        *gates[1:],
    ]
    moved = [keeper("k", "nightly", closed=["* 20-21 * * *"], timeZone="Europe/Berlin"), *keepers[1:]]
    worlds = {"as listed": (gates, keepers), "closed": (closed, keepers), "moved": (gates, moved)}
    # The now line moves; three hours on it is the next day in Berlin, and the days shown move.
    nows = [NOW, NOW + timedelta(minutes=25), NOW + timedelta(hours=3)]
    queries = [Query(), Query(days=1, offset=3), Query(tz=GATE_ZONE)]
    drawn = {}
    board_timeline.forget()
    for (world, (g, k)), now, query in itertools.product(
        [*worlds.items(), ("as listed", worlds["as listed"])], nows, queries
    ):
        remembered = _page_of_a_new_index(g, k, now, query)  # after another world, time or query
        board_timeline.forget()
        assert remembered == _page_of_a_new_index(g, k, now, query), (world, now, query)
        drawn[world, now, query] = remembered

    def nightly_row(world: str, now: datetime = NOW) -> str:
        [row] = re.findall(
            r'<div class="line"><span class="who" title="flux-system/nightly">.*?</div>',
            drawn[world, now, Query()],
        )
        return row

    # What changed is drawn, and the now line is where now is (14 days over 1,000 units: 25
    # minutes move it by one).
    assert "INC-7 payments degraded" in nightly_row("closed")
    assert "INC-7 payments degraded" not in nightly_row("as listed")
    assert nightly_row("moved") != nightly_row("as listed")
    now_x = [re.findall(r'<line class="now" x1="(\d+)"', nightly_row("as listed", t)) for t in nows[:2]]
    assert now_x == [["70"], ["71"]]


def test_nightly_in_berlin_is_closed_from_22_to_midnight_berlin_across_the_clock_change():
    [row] = [r for r in board(Query(tz=GATE_ZONE)).gates if r.key == "flux-system/nightly"]
    closed = [
        (s.start.astimezone(BERLIN), s.end.astimezone(BERLIN)) for s in row.timeline.spans if not s.open
    ]
    assert len(closed) == 14
    assert all((a.hour, b.hour, (b - a).total_seconds()) == (22, 0, 7200) for a, b in closed)


def test_tz_gate_reads_each_row_in_its_gates_own_zone_and_a_named_zone_reads_every_row_there():
    by_gate = board(Query(tz=GATE_ZONE), viewer=NEW_YORK)
    index = snapshot().gate_index
    for row in by_gate.gates:
        expected = time_zone(index.compiled(row.state.namespace, row.state.name))
        assert row.timeline.zone == expected
        local_now = NOW.astimezone(expected)
        assert row.timeline.start == datetime.combine(local_now.date(), time(0), tzinfo=expected)
    assert {r.key: str(r.timeline.zone) for r in by_gate.gates}["flux-system/nightly"] == "Europe/Berlin"
    assert {r.key: r.timeline.zone for r in by_gate.gates}["flux-system/weekend"] in (UTC, ZoneInfo("UTC"))
    tokyo = board(query_of({"tz": "Asia/Tokyo"}), viewer=NEW_YORK)
    assert str(tokyo.zone) == "Asia/Tokyo" and all(str(r.timeline.zone) == "Asia/Tokyo" for r in tokyo.gates)
    assert board(query_of({"tz": "Mars/Olympus"}), viewer=NEW_YORK).zone == NEW_YORK


def test_a_suspend_during_cron_gives_its_windows_and_a_bad_one_a_window_shown_as_unknown():
    shown = board(Query(days=3))
    rows = {s.target: s for s in shown.suspensions}
    assert set(rows) == {"Kustomization/apps/nightly-jobs", "HelmRelease/team-a/api"}
    nightly = rows["Kustomization/apps/nightly-jobs"]
    start = datetime(2026, 10, 22, tzinfo=UTC)
    assert [(w.start, w.end) for w in nightly.windows] == [
        (start + timedelta(days=d, hours=22), start + timedelta(days=d + 1)) for d in range(3)
    ]
    [obj] = [o for o in objects() if o["metadata"]["name"] == "nightly-jobs"]
    assert list(nightly.windows) == suspend_windows(obj, nightly.timeline.start, nightly.timeline.end)
    [bad] = rows["HelmRelease/team-a/api"].windows
    assert (bad.start, bad.end) == (start, start + timedelta(days=3)) and bad.error
    text = page.fragment(shown, page.View("token"))
    assert 'class="span unknown"' in text and "cannot be read" in text


def test_held_rows_are_what_kubectl_gate_pending_lists():
    shown = board()
    gates, _ = gates_and_keepers()
    gate_objects = {"/".join(object_key(g)): g for g in gates}
    expected = pending_rows(objects(), gate_objects, NOW)
    assert list(shown.held) == expected and len(expected) == 3
    assert {r.key: r.holding for r in shown.gates} == {
        "flux-system/freeze": 2,
        "flux-system/nightly": 0,
        "flux-system/weekend": 0,
        "team-a/payments": 1,
    }
    [team] = board(Query(namespace="team-a")).held
    assert team == pending_rows(objects(), gate_objects, NOW, namespace="team-a")[0]


# -- filters ------------------------------------------------------------------------------------


def test_a_namespace_shows_its_gates_held_objects_and_suspensions_only():
    shown = board(Query(namespace="team-a"))
    assert [r.key for r in shown.gates] == ["team-a/payments"]
    assert [(r["namespace"], r["name"]) for r in shown.held] == [("team-a", "other")]
    assert [s.target for s in shown.suspensions] == ["HelmRelease/team-a/api"]
    assert board(Query(namespace="nowhere")).gates == ()
    nothing = board(query_of({"namespace": "Not A Namespace"}))
    assert (nothing.gates, nothing.held, nothing.suspensions) == ((), (), ())
    assert board().namespaces == ("apps", "flux-system", "team-a")


@pytest.mark.parametrize(
    "search, gates, held_names",
    [
        ("freeze", ["flux-system/freeze"], ["podinfo", "second"]),
        ("FREEZE", ["flux-system/freeze"], ["podinfo", "second"]),
        ("chg-42", [], []),  # the message of a toggle no longer in effect is not the gate's now
        ("team-a", ["team-a/payments"], ["other"]),
        (GIT_B, [], ["podinfo", "other", "second"]),
        ("no such thing", [], []),
    ],
)
def test_search_finds_gates_and_held_objects_by_name_reason_message_and_content(search, gates, held_names):
    shown = board(query_of({"q": search}))
    assert [r.key for r in shown.gates] == gates
    assert [r["name"] for r in shown.held] == held_names


def test_search_finds_a_gate_by_its_message_and_who_asked():
    toggled = gate(
        "hotfix",
        default="closed",
        annotations={
            names.OPEN_ANNOTATION: "2026-10-22T21:00:00.000000Z",
            names.MESSAGE_ANNOTATION: "Patch CVE-2026-1",
            names.REQUESTED_BY_ANNOTATION: "carol",
        },
    )
    index = GateIndex()
    index.replace_all([toggled, gate("other")], [])
    for search in ("cve-2026", "Carol", "OpenRequested"):
        shown = build(Snapshot(index, []), NOW, query_of({"q": search}), UTC, "here", True)
        assert [r.key for r in shown.gates] == ["flux-system/hotfix"], search


# -- a query from anything ----------------------------------------------------------------------

KEYS = st.sampled_from(["namespace", "q", "days", "from", "tz", "other"])
VALUES = st.one_of(
    st.text(max_size=40),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.sampled_from(["gate", "UTC", "Europe/Berlin", "../etc/passwd", "\x00", "9" * 5000, "1e3", " 7 ", "٣"]),
)


@given(st.dictionaries(KEYS, VALUES))
@example({"days": "0", "from": "-1"})
@example({"days": "99", "from": "99"})
@example({"days": "9" * 5000})
@example({"tz": "\x00"})
@example({"tz": "/etc/passwd"})
@example({"tz": "Europe/../Europe/Berlin"})
@example({"tz": "\udc80"})
@example({"namespace": "a" * 64})
def test_any_parameters_make_a_query_within_bounds_and_a_board(args):
    query = query_of(args)
    assert 1 <= query.days <= MAX_DAYS and 0 <= query.offset <= MAX_DAYS - query.days
    assert len(query.search) <= MAX_QUERY
    assert query.namespace in ("", "-") or is_namespace(query.namespace)
    if query.tz and query.tz != GATE_ZONE:
        zone_named(query.tz)  # a zone the board can read in: it raised no ScheduleError
    build(snapshot(), NOW, query, UTC, "here", True)


def test_days_and_from_are_clamped_and_unreadable_ones_left_at_their_defaults():
    assert query_of({"days": "0"}).days == 1 and query_of({"days": "30"}).days == MAX_DAYS
    assert query_of({"days": "x"}).days == MAX_DAYS and query_of({}).days == MAX_DAYS
    assert query_of({"days": "7", "from": "10"}).offset == 7
    assert query_of({"days": "1", "from": "13"}).offset == 13 and query_of({"from": "-3"}).offset == 0
    assert query_of({"q": "x" * 1000}).search == "x" * MAX_QUERY
    assert query_of({"tz": "Nowhere/City"}).tz == "" and query_of({"tz": "gate"}).tz == GATE_ZONE


def test_a_zone_the_board_cannot_read_in_is_the_viewers():
    for tz in ("Nowhere/City", "\x00", "a" * 300):
        with pytest.raises(ScheduleError):
            zone_named(tz)
        assert board(query_of({"tz": tz}), viewer=BERLIN).zone == BERLIN
