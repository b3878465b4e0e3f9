"""Calendar intervals: the open and closed spans of a gate, from the decisions' own core."""

import itertools
from datetime import timedelta

from admission.core.base import names
from admission.core.base.names import CLOSE_ANNOTATION, OPEN_ANNOTATION, REQUESTED_BY_ANNOTATION
from admission.core.gates.gates import evaluate
from admission.core.gates.gatespec import compile_gate
from admission.core.gates.timeline import intervals, time_zone
from tests.builders import at, gate, keeper


def spans(cg, start, end, **kw):
    return [(i.start, i.end, i.open) for i in intervals(cg, at(start), at(end), **kw)]


def closed(cg, start, end):
    return [(s, e) for s, e, is_open in spans(cg, start, end) if not is_open]


def test_a_window_in_a_spring_forward_gap_starts_right_after_the_gap():
    # 02:00 Berlin does not exist on 2026-03-29: cron (and so the gate) starts at 03:00 CEST.
    cg = compile_gate(
        gate("nightly", default="opened"),
        [keeper("k", "nightly", closed=[{"cron": "0 2 * * *", "duration": "1h"}], timeZone="Europe/Berlin")],
    )
    assert closed(cg, "2026-03-28T00:00", "2026-03-31T00:00") == [
        (at("2026-03-28T01:00"), at("2026-03-28T02:00")),  # 02:00 CET
        (at("2026-03-29T01:00"), at("2026-03-29T02:00")),  # 03:00 CEST, right after the gap
        (at("2026-03-30T00:00"), at("2026-03-30T01:00")),  # 02:00 CEST
    ]


def test_an_hour_that_happens_twice_at_fall_back_is_closed_twice_as_long():
    cg = compile_gate(
        gate("night", default="opened"),
        [keeper("k", "night", closed=["* 2 * * *"], timeZone="Europe/Berlin")],
    )
    assert closed(cg, "2026-10-24T00:00", "2026-10-26T12:00") == [
        (at("2026-10-24T00:00"), at("2026-10-24T01:00")),
        (at("2026-10-25T00:00"), at("2026-10-25T02:00")),  # 02:00-03:00 CEST, then 02:00-03:00 CET
        (at("2026-10-26T01:00"), at("2026-10-26T02:00")),
    ]


def test_a_freeze_across_new_year_is_one_closed_interval_in_local_time():
    cg = compile_gate(
        gate("change-freeze", default="opened"),
        [keeper("k", "change-freeze", closed=["* * 20-31 12 *", "* * 1-2 1 *"], timeZone="Europe/Berlin")],
    )
    result = intervals(cg, at("2026-12-01T00:00"), at("2027-01-15T00:00"))
    assert [(i.start, i.end, i.open) for i in result] == [
        (at("2026-12-01T00:00"), at("2026-12-19T23:00"), True),
        (at("2026-12-19T23:00"), at("2027-01-02T23:00"), False),  # midnight Berlin to midnight Berlin
        (at("2027-01-02T23:00"), at("2027-01-15T00:00"), True),
    ]
    assert result[1].reason == names.REASON_SCHEDULED and "GateKeeper 'k'" in result[1].message
    assert str(time_zone(cg)) == "Europe/Berlin"


def test_intervals_agree_with_evaluate_at_every_boundary_and_between():
    cg = compile_gate(
        gate(
            "mixed",
            default="closed",
            window="2h",
            annotations={OPEN_ANNOTATION: "2026-06-11T09:00:00Z", REQUESTED_BY_ANNOTATION: "bob"},
        ),
        [
            keeper(
                "k", "mixed", opened=[{"cron": "0 9 * * 1-5", "duration": "8h"}], timeZone="America/New_York"
            ),
            keeper("f", "mixed", closed=["* * * * 5"], timeZone="America/New_York"),
        ],
    )
    result = intervals(cg, at("2026-06-08T00:00"), at("2026-06-15T00:00"))
    for interval in result:
        for t in (
            interval.start,
            interval.start + (interval.end - interval.start) / 2,
            interval.end - timedelta(seconds=1),
        ):
            assert evaluate(cg, t).open == interval.open, (t, interval)
    for a, b in itertools.pairwise(result):
        assert a.end == b.start and a.open != b.open


def test_a_planned_open_shows_as_an_open_interval_with_who_asked():
    cg = compile_gate(
        gate(
            "approval",
            default="closed",
            annotations={
                OPEN_ANNOTATION: "2026-06-12T14:00:00Z",
                CLOSE_ANNOTATION: "2026-06-12T16:00:00Z",
                REQUESTED_BY_ANNOTATION: "bob",
            },
        )
    )
    result = intervals(cg, at("2026-06-10T00:00"), at("2026-06-14T00:00"))
    assert [(i.start, i.end, i.open) for i in result] == [
        (at("2026-06-10T00:00"), at("2026-06-12T14:00"), False),
        (at("2026-06-12T14:00"), at("2026-06-12T16:00"), True),
        (at("2026-06-12T16:00"), at("2026-06-14T00:00"), False),
    ]
    assert (
        result[1].reason == names.REASON_OPEN_REQUESTED and result[1].message == "Gate open requested by bob"
    )
    assert str(time_zone(cg)) == "UTC"


def test_an_invalid_gate_is_closed_for_the_whole_range():
    cg = compile_gate(gate("broken", default="sometimes"))
    [only] = intervals(cg, at("2026-06-10T00:00"), at("2026-06-24T00:00"))
    assert (only.open, only.reason) == (False, names.REASON_INVALID) and "spec.default" in only.message


def test_a_schedule_too_dense_to_list_is_bounded_and_says_so():
    cg = compile_gate(gate("flappy", default="opened"), [keeper("k", "flappy", closed=["*/2 * * * *"])])
    result = intervals(cg, at("2026-06-10T00:00"), at("2026-06-24T00:00"), max_steps=100)
    assert len(result) == 101 and result[-1].known is False and result[-1].end == at("2026-06-24T00:00")
    assert "more than 100 times" in result[-1].message
    assert all(i.known for i in result[:-1])


def test_an_empty_range_has_no_intervals():
    assert intervals(compile_gate(gate("g")), at("2026-06-10T00:00"), at("2026-06-10T00:00")) == ()
