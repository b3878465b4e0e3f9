"""Gates with the same schedule share one remembered calendar (``core.gates.timeline.intervals``):
the spans a gate gets are, exactly, those its own evaluation gives, whichever gate's look filled
the memory first."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from admission.core.base import names
from admission.core.base.timefmt import format_time
from admission.core.gates import timeline
from admission.core.gates.gatespec import compile_gate
from admission.core.time.cron import zone
from tests.builders import at, gate, keeper
from tests.unit.test_approvals import stamped

START = at("2026-01-01T00:00")
CRONS = [
    "* * 20-31 12 *",
    "* 0-8,18-23 * * 1-5",
    "* * * * 0,6",
    "0 */4 * * *",
    "*/15 9-17 * * *",
    "0 2 * * *",  # in the spring-forward gap of Europe/Berlin and America/New_York
    "30 1 * * *",  # twice at fall-back in America/New_York
    "0 10 * * 2,4",
    "@always",
    "@never",
    "CRON_TZ=Asia/Tokyo 0 9 * * 1-5",
]
ZONES = [None, "UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo", "Australia/Lord_Howe"]
minutes_of_a_year = st.integers(0, 366 * 24 * 60)
entries = st.one_of(
    st.sampled_from(CRONS),
    st.builds(
        lambda cron, duration: {"cron": cron, "duration": duration},
        st.sampled_from(CRONS[:8]),
        st.sampled_from(["30m", "2h", "8h", "62h", "5d"]),
    ),
)


@st.composite
def schedules(draw):
    """A Gate's spec and annotations, and its GateKeepers' (name, closed, opened, zone)."""
    spec = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "default": st.sampled_from(["opened", "closed"]),
                "window": st.sampled_from(["30m", "2h", "24h"]),
            },
        )
    )
    annotations = {}
    for key in (names.OPEN_ANNOTATION, names.CLOSE_ANNOTATION):
        if draw(st.booleans()):
            moment = START + timedelta(minutes=draw(minutes_of_a_year), seconds=draw(st.integers(0, 59)))
            annotations[key] = format_time(moment)
    if annotations and draw(st.booleans()):
        annotations[names.REQUESTED_BY_ANNOTATION] = "jane@example.com"
        annotations[names.MESSAGE_ANNOTATION] = draw(st.sampled_from(["INC-7 <b>payments</b>", "hotfix"]))
    keepers = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["k", "schedule"]),
                st.lists(entries, max_size=3),
                st.lists(entries, max_size=2),
                st.sampled_from(ZONES),
            ),
            max_size=2,
            unique_by=lambda k: k[0],
        )
    )
    return spec, annotations, keepers


def compiled(schedule, namespace: str, name: str, other: bool = False):
    """The gate ``namespace/name`` with this schedule; ``other``: in audit mode, with an approval."""
    spec, annotations, keepers = schedule
    annotations = dict(annotations)
    if other:
        spec = dict(spec, mode="audit")
        annotations[names.APPROVAL_ANNOTATION_PREFIX + "a1"] = stamped()
    return compile_gate(
        gate(name, namespace, annotations, **spec),
        [keeper(k, name, closed, opened, namespace, timeZone=tz) for k, closed, opened, tz in keepers],
    )


def shown(spans) -> tuple[str, ...]:
    # repr: the instants with their zones, the state, reason and message, whether it is known.
    return tuple(repr(span) for span in spans)


@settings(max_examples=150)
@given(
    schedules(),
    minutes_of_a_year,
    st.integers(1, 21 * 24 * 60),
    st.sampled_from(["UTC", "Europe/Berlin", "Pacific/Chatham"]),
    st.sampled_from([timeline.MAX_INTERVAL_STEPS, 3, 40]),
)
def test_a_gate_gets_the_spans_its_own_evaluation_gives_when_another_gate_with_its_schedule_came_first(
    schedule, start_minute, length, viewer, max_steps
):
    start = (START + timedelta(minutes=start_minute)).astimezone(zone(viewer))
    end = start + timedelta(minutes=length)
    mine = compiled(schedule, "team-a", "freeze")
    twin = compiled(schedule, "team-b", "release", other=True)
    # Worked out on its own, nothing remembered: what the calendar said before gates shared it.
    own = timeline._intervals(mine, start, end, max_steps)
    timeline.forget()
    first = timeline.intervals(twin, start, end, max_steps)
    assert shown(timeline.intervals(mine, start, end, max_steps)) == shown(own)
    assert shown(first) == shown(own)
    assert shown(timeline.intervals(mine, start, end, max_steps)) == shown(own)  # remembered


def test_a_schedule_copied_to_many_namespaces_is_worked_out_once():
    schedule = (
        {"default": "opened"},
        {},
        [("canary", [{"cron": "0 */4 * * *", "duration": "30m"}], [], None)],
    )
    start = at("2026-12-20T00:00")
    end = start + timedelta(days=14)
    timeline.forget()
    found = {
        shown(timeline.intervals(compiled(schedule, f"team-{i}", "canary", other=i % 2 == 1), start, end))
        for i in range(50)
    }
    assert len(found) == 1
    assert timeline._remembered.cache_info().misses == 1  # one evaluation for the fifty gates
    # A toggle is part of the schedule: that gate's calendar is its own.
    toggled = (schedule[0], {names.CLOSE_ANNOTATION: "2026-12-21T09:00:00Z"}, schedule[2])
    spans = timeline.intervals(compiled(toggled, "team-x", "canary"), start, end)
    assert shown(spans) != shown(timeline.intervals(compiled(schedule, "team-x", "canary"), start, end))
    assert timeline._remembered.cache_info().misses == 2


def test_an_entry_many_gates_have_is_walked_once_and_each_gate_gets_its_own_spans():
    # Each GateKeeper named after its namespace: the spans' messages differ, the entry is one.
    start = at("2026-12-20T00:00")
    end = start + timedelta(days=14)
    timeline.forget()
    for i in range(20):
        schedule = (
            {"default": "opened"},
            {names.CLOSE_ANNOTATION: "2026-12-21T09:00:00Z"} if i % 7 == 3 else {},
            [(f"canary-{i}", [{"cron": "0 */4 * * *", "duration": "30m"}], [], "Europe/Berlin")],
        )
        gate_i = compiled(schedule, f"team-{i}", "canary")
        spans = timeline.intervals(gate_i, start, end)
        assert shown(spans) == shown(timeline._intervals(gate_i, start, end, timeline.MAX_INTERVAL_STEPS))
        assert f"GateKeeper 'canary-{i}'" in spans[1].message
    assert timeline._remembered.cache_info().misses == 20
    assert timeline._walk.cache_info().misses == 1
