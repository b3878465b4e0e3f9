"""SPEC §2 (Gate) and §3 (GateKeeper), evaluated at explicit times."""

from datetime import UTC, timedelta
from pathlib import Path

import pytest
import yaml

from admission.core.base import names
from admission.core.base.names import (
    CLOSE_ANNOTATION,
    MESSAGE_ANNOTATION,
    OPEN_ANNOTATION,
    REQUESTED_BY_ANNOTATION,
)
from admission.core.gates import gates as g
from admission.core.gates import gatespec
from admission.core.gates.gates import evaluate, evaluate_gate, next_transition
from admission.core.gates.gatespec import compile_gate
from admission.core.time.cron import MAX_CRON_LENGTH
from tests.builders import at, gate, keeper

NOW = at("2026-06-10T12:00")  # a Wednesday, outside every freeze below


def state(obj, keepers=(), now=NOW):
    return evaluate_gate(obj, keepers, now)


# --- default, the closed shorthand, contradictions -------------------------------------


@pytest.mark.parametrize(
    "spec, is_open, message",
    [
        ({}, True, "Gate opened by default"),
        ({"default": "opened"}, True, "Gate opened by default"),
        ({"default": "closed"}, False, "Gate closed by default"),
        ({"closed": True}, False, "Gate closed by default"),  # working-examples shorthand
        ({"closed": False}, True, "Gate opened by default"),
        ({"default": "closed", "closed": True}, False, "Gate closed by default"),
    ],
)
def test_default_state(spec, is_open, message):
    s = state(gate("g", **spec))
    assert (s.open, s.reason, s.message) == (is_open, names.REASON_DEFAULT, message)


@pytest.mark.parametrize(
    "spec, why",
    [
        ({"default": "opened", "closed": True}, "spec.default 'opened' contradicts spec.closed: true"),
        ({"default": "closed", "closed": False}, "spec.default 'closed' contradicts spec.closed: false"),
        ({"default": "open"}, "spec.default 'open' must be 'opened' or 'closed'"),
        ({"closed": "yes"}, "spec.closed 'yes' must be true or false"),
        ({"window": "1 hour"}, "spec.window: invalid duration"),
        ({"window": "0s"}, "spec.window '0s' must be positive"),
        ({"interval": "soon"}, "spec.interval: invalid duration"),
        ({"mode": "warn"}, "spec.mode 'warn' must be 'enforce' or 'audit'"),
    ],
)
def test_a_gate_that_cannot_be_evaluated_is_invalid_and_closed_and_says_why(spec, why):
    s = state(gate("g", **spec))
    assert not s.open and s.reason == names.REASON_INVALID
    assert s.message.startswith("Gate is invalid: ") and why in s.message


def test_a_spec_that_is_not_a_mapping_is_invalid():
    obj = gate("g")
    obj["spec"] = ["closed"]
    assert state(obj).reason == names.REASON_INVALID


def test_mode_override_is_carried():
    assert state(gate("g", mode="audit")).mode == "audit"
    assert state(gate("g")).mode is None


# --- manual toggles ----------------------------------------------------------------


def toggled(open_at=None, close_at=None, **spec):
    ann = {}
    if open_at:
        ann[OPEN_ANNOTATION] = open_at
    if close_at:
        ann[CLOSE_ANNOTATION] = close_at
    return gate("sre-approval", annotations=ann, **spec)


def test_rfc_story_1_open_for_a_window_then_closed_by_default():
    obj = toggled(open_at="2021-03-26T10:00:00Z", default="closed", window="1h", interval="30s")
    s = state(obj, now=at("2021-03-26T10:30"))
    assert (s.open, s.reason, s.message) == (
        True,
        names.REASON_OPEN_REQUESTED,
        "Gate scheduled for closing at 2021-03-26T11:00:00Z",
    )
    assert s.requested_at == at("2021-03-26T10:00") and s.reset_to_default_at == at("2021-03-26T11:00")
    assert s.next_transition == at("2021-03-26T11:00")
    after = state(obj, now=at("2021-03-26T11:00"))
    assert (after.open, after.reason, after.message) == (
        False,
        names.REASON_DEFAULT,
        "Gate closed by default",
    )


def test_rfc_story_1_close_ahead_of_schedule():
    obj = toggled(
        open_at="2021-03-26T10:00:00Z", close_at="2021-03-26T10:10:00Z", default="closed", window="1h"
    )
    s = state(obj, now=at("2021-03-26T10:10"))
    assert (s.open, s.reason, s.message) == (False, names.REASON_CLOSE_REQUESTED, "Gate close requested")
    assert s.requested_at == at("2021-03-26T10:10")


def test_rfc_maintenance_window_closed_for_24h_then_opens():
    obj = gate(
        "maintenance", annotations={CLOSE_ANNOTATION: "2021-03-26T10:00:00Z"}, default="opened", window="24h"
    )
    s = state(obj, now=at("2021-03-26T10:00"))
    assert (s.open, s.reason) == (False, names.REASON_CLOSE_REQUESTED)
    assert s.message == "Gate scheduled for opening at 2021-03-27T10:00:00Z"
    assert s.next_transition == at("2021-03-27T10:00")
    assert state(obj, now=at("2021-03-27T10:00")).open


def test_without_a_window_a_toggle_holds_until_the_next_toggle():
    obj = toggled(open_at="2021-03-26T10:00:00Z", default="closed")
    s = state(obj, now=at("2031-03-26T10:00"))
    assert (s.open, s.message, s.next_transition) == (True, "Gate open requested", None)


def test_the_latest_toggle_wins():
    assert not state(toggled(open_at="2026-06-10T09:00:00Z", close_at="2026-06-10T10:00:00Z")).open
    assert state(
        toggled(open_at="2026-06-10T11:00:00Z", close_at="2026-06-10T10:00:00Z", default="closed")
    ).open


def test_equal_timestamps_close_wins():
    s = state(toggled(open_at="2026-06-10T10:00:00Z", close_at="2026-06-10T10:00:00Z"))
    assert (s.open, s.reason) == (False, names.REASON_CLOSE_REQUESTED)


def test_a_future_toggle_takes_effect_when_it_comes_planned_release():
    obj = toggled(open_at="2026-06-12T09:00:00Z", default="closed", window="2h")
    before = state(obj)
    assert (before.open, before.reason) == (False, names.REASON_DEFAULT)
    assert before.next_transition == at("2026-06-12T09:00")
    during = state(obj, now=at("2026-06-12T10:00"))
    assert (during.open, during.reason) == (True, names.REASON_OPEN_REQUESTED)
    assert not state(obj, now=at("2026-06-12T11:00")).open


def test_a_future_toggle_does_not_hide_the_past_one():
    obj = toggled(open_at="2026-06-10T09:00:00Z", close_at="2026-06-11T09:00:00Z", default="closed")
    s = state(obj)
    assert s.open and s.next_transition == at("2026-06-11T09:00")


def test_an_expired_newer_toggle_does_not_revive_an_older_one():
    obj = toggled(
        open_at="2026-06-10T08:00:00Z", close_at="2026-06-10T10:00:00Z", default="opened", window="1h"
    )
    assert state(obj, now=at("2026-06-10T10:30")).reason == names.REASON_CLOSE_REQUESTED
    s = state(obj, now=at("2026-06-10T11:30"))
    assert (s.open, s.reason) == (True, names.REASON_DEFAULT)


def test_unparseable_toggles_are_ignored_and_reported():
    s = state(toggled(open_at="yesterday", default="closed"))
    assert (s.open, s.reason) == (False, names.REASON_DEFAULT)
    assert len(s.problems) == 1 and OPEN_ANNOTATION in s.problems[0] and "invalid timestamp" in s.problems[0]


def test_toggle_requester_and_message_are_carried():
    obj = gate(
        "bypass-signoff",
        closed=True,
        annotations={
            OPEN_ANNOTATION: "2026-06-10T11:00:00Z",
            MESSAGE_ANNOTATION: "Patching a CVE: Signed off by Bob the builder",
            REQUESTED_BY_ANNOTATION: "bob",
        },
    )
    s = state(obj)
    assert s.open and s.requested_by == "bob" and s.request_message.startswith("Patching a CVE")


# --- GateKeepers ---------------------------------------------------------------------

FREEZE = ["* * 20-30 11 *", "* * 15-31 12 *"]


def test_working_examples_gatekeeper_closes_during_black_friday_and_xmas():
    cf = gate("change-freeze")
    k = keeper("change-freeze-gatekeeper", "change-freeze", closed=FREEZE, type="cronexpression")
    black_friday = state(cf, [k], at("2026-11-21T20:00"))
    assert (black_friday.open, black_friday.reason) == (False, names.REASON_SCHEDULED)
    assert (
        black_friday.message
        == "Gate closed by GateKeeper 'change-freeze-gatekeeper' schedule '* * 20-30 11 *'"
    )
    assert black_friday.next_transition == at("2026-12-01T00:00")
    assert state(cf, [k], at("2026-12-24T12:00")).reason == names.REASON_SCHEDULED
    assert state(cf, [k], at("2026-12-05T12:00")).reason == names.REASON_DEFAULT


def test_a_scheduled_state_replaces_the_default():
    opener = keeper("office-hours", "g", opened=["* 9-16 * * MON-FRI"])
    assert state(gate("g", default="closed"), [opener]).open  # Wednesday 12:00
    s = state(gate("g", default="closed"), [opener], at("2026-06-10T17:00"))
    assert (s.open, s.reason) == (False, names.REASON_DEFAULT)


def test_closed_beats_opened_within_and_across_keepers():
    both = keeper("k1", "g", closed=["* 12 * * *"], opened=["* * * * *"])
    assert not state(gate("g"), [both]).open
    opener, closer = keeper("a", "g", opened=["@always"]), keeper("b", "g", closed=["* 12 * * *"])
    assert not state(gate("g", default="closed"), [opener, closer]).open
    assert state(gate("g", default="closed"), [opener, closer], at("2026-06-10T13:00")).open


def test_a_toggle_overrides_the_schedule_while_it_holds():
    obj = gate("change-freeze", window="2h", annotations={OPEN_ANNOTATION: "2026-11-21T19:00:00Z"})
    k = keeper("freeze", "change-freeze", closed=FREEZE)
    s = state(obj, [k], at("2026-11-21T20:00"))
    assert (s.open, s.reason) == (True, names.REASON_OPEN_REQUESTED)
    assert s.message == "Gate scheduled for closing at 2026-11-21T21:00:00Z"
    assert not state(obj, [k], at("2026-11-21T21:00")).open


def test_window_entries_with_duration():
    k = keeper("no-deploy-friday", "g", closed=[{"cron": "0 18 * * 5", "duration": "62h"}])
    assert not state(gate("g"), [k], at("2026-06-13T12:00")).open  # Saturday
    monday = state(gate("g"), [k], at("2026-06-15T08:00"))
    assert monday.open


def test_keepers_of_other_gates_or_namespaces_do_not_apply():
    other_gate = keeper("k", "other", closed=["@always"])
    other_ns = keeper("k", "g", closed=["@always"], namespace="elsewhere")
    assert state(gate("g"), [other_gate, other_ns]).open


def test_time_zone_of_a_keeper():
    k = keeper("berlin-nights", "g", closed=["* 0-5 * * *"], timeZone="Europe/Berlin")
    assert not state(gate("g"), [k], at("2026-06-10T03:30")).open  # 05:30 CEST
    assert state(gate("g"), [k], at("2026-06-10T04:00")).open  # 06:00 CEST


@pytest.mark.parametrize(
    "spec, why",
    [
        ({"type": "cronjob"}, "type 'cronjob' is not supported"),
        ({"timeZone": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
        ({"cronjob": {"closed": ["61 * * * *"]}}, "invalid cron expression '61 * * * *'"),
        ({"cronjob": {"closed": "* * * * *"}}, "cronjob.closed must be a list"),
    ],
)
def test_a_keeper_that_cannot_be_evaluated_closes_its_gate(spec, why):
    bad = keeper("broken", "g")
    bad["spec"].update(spec)
    s = state(gate("g"), [bad])
    assert (s.open, s.reason) == (False, names.REASON_INVALID)
    assert "GateKeeper 'broken' cannot be evaluated" in s.message and why in s.message


def test_next_transition_skips_changes_that_do_not_flip_the_state():
    # Closed by default; the opener flips at 09:00 Monday; the closer at 12:00 changes nothing.
    k = keeper("k", "g", opened=["* 9-16 * * MON-FRI"], closed=["* 12 * * SAT"])
    cg = compile_gate(gate("g", default="closed"), [k])
    assert next_transition(cg, at("2026-06-13T10:00")) == at("2026-06-15T09:00")


def test_a_gate_that_never_changes_has_no_next_transition():
    assert state(gate("g", closed=True)).next_transition is None
    assert state(gate("g", default="opened", closed=True)).next_transition is None


def test_valid_until_is_the_first_time_anything_may_change():
    k = keeper("k", "g", closed=["* * 20-30 11 *"])
    s = evaluate(compile_gate(gate("g"), [k]), at("2026-11-21T20:00"))
    assert s.valid_until == at("2026-12-01T00:00")


def test_not_found_and_unknown_are_closed():
    assert g.not_found("ns", "x").open is False and g.not_found("ns", "x").reason == names.REASON_NOT_FOUND
    u = g.unknown("ns", "x", "gate cache not synced")
    assert (u.open, u.reason, u.message) == (
        False,
        names.REASON_UNKNOWN,
        "gate state unknown: gate cache not synced",
    )


# -- bounded evaluation cost -----------------------------------------------------------------
ALTERNATING = ["*/2 * * * *", "1-59/2 * * * *"]  # together: every minute, so the gate never opens


def test_more_schedule_entries_than_the_bounds_make_the_gate_invalid_and_closed():
    too_long = keeper("k", "g", closed=["0 0 29 2 *"] * (gatespec.MAX_ENTRIES_PER_LIST + 1))
    result = state(gate("g"), [too_long])
    assert (result.open, result.reason) == (False, names.REASON_INVALID)
    assert (
        f"cronjob.closed has {gatespec.MAX_ENTRIES_PER_LIST + 1} entries, more than {gatespec.MAX_ENTRIES_PER_LIST}"
        in result.message
    )
    many = [keeper(f"k{i}", "g", closed=["0 0 29 2 *"] * gatespec.MAX_ENTRIES_PER_LIST) for i in range(3)]
    result = state(gate("g"), many)
    assert (result.open, result.reason) == (False, names.REASON_INVALID)
    assert f"more than {gatespec.MAX_ENTRIES}" in result.message


def test_a_hostile_gatekeeper_costs_a_bounded_number_of_cron_searches(monkeypatch):
    """The hostile GateKeeper, cut to the schema's bounds, evaluated once a minute for an hour:
    it stays closed, its next transition is unknown (never "open"), and cron is searched a
    bounded number of times, not thousands of times per evaluation."""
    from admission.core.time import cron, schedule

    searches = []
    real = cron.CronSpec._sim
    monkeypatch.setattr(
        cron.CronSpec, "_sim", lambda spec, *args: searches.append(spec.expr) or real(spec, *args)
    )
    schedule._entry.cache_clear()
    cron._parse_cron.cache_clear()
    windows = [{"cron": f"{m} 0 29 2 *", "duration": "1m"} for m in range(gatespec.MAX_ENTRIES_PER_LIST - 2)]
    hostile = keeper(
        "k", "g", closed=ALTERNATING + windows, opened=[{"cron": "0 0 29 2 *", "duration": "1m"}] * 16
    )
    compiled = compile_gate(gate("g"), [hostile])
    for minute in range(60):
        result = evaluate(compiled, at("2026-11-22T02:00") + timedelta(minutes=minute, seconds=30))
        assert (result.open, result.reason, result.next_transition) == (False, names.REASON_SCHEDULED, None)
    assert len(searches) <= 3 * gatespec.MAX_ENTRIES, f"{len(searches)} cron searches"


# -- deciding needs no look-ahead; the next transition is searched for when asked ----------


def test_deciding_searches_no_further_than_the_next_change_and_the_next_transition_waits_until_asked(
    monkeypatch,
):
    from admission.core.time import schedule

    asked = []
    real = schedule.Entry.state_and_next_change
    monkeypatch.setattr(
        schedule.Entry, "state_and_next_change", lambda entry, now: asked.append(now) or real(entry, now)
    )
    k = keeper("k", "g", opened=["* 9-16 * * MON-FRI"], closed=[{"cron": "0 12 * * *", "duration": "1h"}])
    cg = compile_gate(gate("g", default="closed"), [k])
    s = evaluate(cg, at("2026-06-13T10:00"))  # a Saturday
    assert (s.open, s.reason) == (False, names.REASON_DEFAULT) and asked == []
    assert s.next_transition == at("2026-06-15T09:00") == next_transition(cg, at("2026-06-13T10:00"))
    searched = len(asked)
    assert searched > 0 and s.next_transition == at("2026-06-15T09:00") and len(asked) == searched  # once


def test_a_gate_held_by_a_toggle_or_by_windows_that_never_end_opens_when_the_toggle_does():
    # Windows every 15 minutes lasting 30 overlap for ever: closed until the open request.
    quarter = {"cron": "*/15 * * * *", "duration": "30m"}
    keepers = [
        keeper(f"k{i}", "g", closed=[quarter], timeZone=z) for i, z in enumerate(["UTC", "Europe/Berlin"])
    ]
    opens = at("2026-11-23T22:13")
    toggled = gate("g", annotations={names.OPEN_ANNOTATION: "2026-11-23T22:13:00Z"}, window="24h")
    s = evaluate(compile_gate(toggled, keepers), at("2026-11-22T02:13:30"))
    assert (s.open, s.reason, s.next_transition) == (False, names.REASON_SCHEDULED, opens)


def test_when_nothing_changes_within_the_horizon_the_state_is_looked_at_again_a_day_later():
    # 29 February 2028 is beyond the horizon: no change is known, and that is not "never".
    k = keeper("k", "g", closed=[{"cron": "0 0 29 2 *", "duration": "24h"}])
    s = evaluate(compile_gate(gate("g"), [k]), at("2026-11-22T02:13:30"))
    assert (s.open, s.next_transition, s.valid_until) == (True, None, at("2026-11-22T02:13:30") + g.VALIDITY)
    assert (
        evaluate(compile_gate(gate("g"), []), at("2026-11-22T02:13:30")).valid_until is None
    )  # nothing can change


def test_an_unknown_next_transition_never_changes_the_state_or_claims_an_opening():
    from admission.core.admission.decision import Context, Settings, decide
    from tests.builders import changed, flux, lookup_from, request

    windows = [
        {"cron": f"{m} 0 L * {d}#5", "duration": "9600h"}
        for m, d in zip(range(16), [1, 2, 3, 4, 5, 6, 0] * 3, strict=False)
    ]
    hostile = keeper("k", "g", closed=windows)
    cg = compile_gate(gate("g"), [hostile])
    s = evaluate(cg, at("2026-11-22T02:13:30"))
    assert (s.open, s.reason, s.next_transition) == (False, names.REASON_SCHEDULED, None)
    obj = flux(gates="flux-system/g")
    denied = decide(
        request("UPDATE", changed(obj, path="./v2"), obj),
        Context(lookup_from([gate("g")], [hostile]), at("2026-11-22T02:13:30"), Settings()),
    )
    assert not denied.allowed and "opens at" not in denied.message


# A gate closed every quarter hour, opened from midnight to five in Berlin, found by hypothesis:
# at 05:00 Berlin it opens at 00:01 the next night, 19 hours away.
QUARTERS = "*/15 * * * *"
NIGHTS = "* 0-4 * * *"


def quarterly(*opened: str):
    k = keeper("k0", "d", closed=[QUARTERS], opened=[NIGHTS, *opened], timeZone="Europe/Berlin")
    return compile_gate(gate("d", default="closed"), [k])


def test_an_opening_19_hours_away_behind_quarter_hourly_closings_is_found():
    # The same entry closes and opens: it can never open the gate, so it is no reason to step.
    s = evaluate(quarterly(QUARTERS), at("2026-11-15T04:00"))
    assert (s.open, s.valid_until, s.next_transition) == (
        False,
        at("2026-11-15T04:01"),
        at("2026-11-15T23:01"),
    )
    assert s.transition_unknown_after is None


def test_a_search_that_gives_up_says_until_when_nothing_changes_never_that_nothing_does():
    # Spelt differently, the opening entry is stepped through quarter by quarter, past the budget.
    cg = quarterly("0,15,30,45 * * * *")
    now = at("2026-11-15T04:00")
    s = evaluate(cg, now)
    assert s.next_transition is None
    after = s.transition_unknown_after
    assert after is not None and now + timedelta(hours=1) < after <= at("2026-11-15T23:01")
    minute = now
    while minute < after:  # what it claims holds: closed until then
        assert not g._is_open(cg, minute)
        minute += timedelta(minutes=1)
    assert state(gate("g", closed=True)).transition_unknown_after is None  # nothing changes: known


@pytest.mark.parametrize(
    "spec, why",
    [
        ({"window": "99999999h"}, "spec.window '99999999h' is longer than 876000h"),
        ({"interval": "9" * 31 + "h"}, "is too long"),
    ],
)
def test_durations_too_long_to_add_to_a_date_make_the_gate_invalid_not_a_crash(spec, why):
    g_ = gate("g", annotations={names.OPEN_ANNOTATION: "2026-11-22T00:00:00Z"}, **spec)
    s = state(g_)
    assert (s.open, s.reason) == (False, names.REASON_INVALID) and why in s.message


def test_a_toggle_beyond_the_horizon_is_still_the_next_transition():
    # `kubectl get gates` shows it (tests/e2e/test_cluster_gates.py): change points are exact.
    s = state(gate("g", default="closed", annotations={OPEN_ANNOTATION: "2030-01-01T00:00:00Z"}))
    assert (s.open, s.next_transition) == (False, at("2030-01-01T00:00"))


def test_the_gatekeeper_crd_states_the_bounds_the_code_enforces():
    crd = yaml.safe_load(
        (
            Path(__file__).resolve().parents[2]
            / "manifests"
            / "crds"
            / "gating.toolkit.fluxcd.io_gatekeepers.yaml"
        ).read_text()
    )
    cronjob = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "cronjob"
    ]
    for key in ("closed", "opened"):
        entries = cronjob["properties"][key]
        assert entries["maxItems"] == gatespec.MAX_ENTRIES_PER_LIST
        item = entries["items"]
        assert item["maxLength"] == item["properties"]["cron"]["maxLength"] == MAX_CRON_LENGTH
        assert item["maxProperties"] == 2  # cron and duration; the code refuses any other field
    from admission.core.time import subscriptions as s

    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    calendars = schema["spec"]["properties"]["calendars"]
    entry = calendars["items"]["properties"]
    assert calendars["maxItems"] == s.MAX_CALENDARS and set(entry) == s._FIELDS
    assert (entry["url"]["maxLength"], entry["name"]["maxLength"], entry["caBundle"]["maxLength"]) == (
        s.MAX_URL,
        s.MAX_NAME,
        s.MAX_CA_BUNDLE,
    )
    assert entry["filter"]["properties"]["summary"]["maxLength"] == s.MAX_PATTERN
    assert entry["filter"]["properties"]["categories"]["maxItems"] == s.MAX_CATEGORIES
    assert entry["action"]["enum"] == list(s.ACTIONS)
    status = schema["status"]["properties"]["calendars"]["items"]["properties"]
    assert status["intervals"]["maxItems"] == s.MAX_INTERVALS
    assert (
        status["intervals"]["items"]["properties"]["summary"]["maxLength"],
        status["error"]["maxLength"],
    ) == (s.MAX_SUMMARY, s.MAX_ERROR)


# --- instants at the end of the calendar: one gate invalid, never a reader broken ---------


def test_a_toggle_dated_past_the_horizon_is_ignored_and_said_so():
    obj = gate("late", annotations={CLOSE_ANNOTATION: "9999-12-31T23:59:59Z"}, window="1h")
    s = state(obj)
    assert s.open and s.reason == names.REASON_DEFAULT
    assert any("too late" in p for p in s.problems)
    assert s.next_transition is None


def test_evaluation_that_leaves_the_calendar_makes_the_gate_invalid_not_an_exception():
    from datetime import datetime

    from admission.core.gates.timeline import intervals

    # As bounded parsing never builds it: a toggle at the last second datetime holds, and a window.
    late = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)
    cg = gatespec.CompiledGate(
        "ns", "late", window=timedelta(hours=1), toggles=(gatespec.Toggle(late, False),)
    )
    s = evaluate(cg, NOW)
    assert (s.open, s.reason) == (False, names.REASON_INVALID)
    assert "cannot be evaluated" in s.message
    spans = intervals(cg, NOW, NOW + timedelta(days=14))
    assert [(i.open, i.reason, i.known) for i in spans] == [(False, names.REASON_INVALID, False)]
