"""Properties of the core that must hold for every input, checked with hypothesis."""

import copy
import itertools
from datetime import timedelta

from hypothesis import example, given, settings
from hypothesis import strategies as st

from admission.core.admission.decision import Context, Settings, decide
from admission.core.base.names import CLOSE_ANNOTATION, OPEN_ANNOTATION
from admission.core.base.timefmt import format_time
from admission.core.gates.gates import evaluate
from admission.core.gates.gatespec import compile_gate
from tests.builders import at, changed, flux, gate, keeper, lookup_from, request

BASE = at("2026-11-15T00:00")
NAMES = ["a", "b", "c", "d"]
GATE_NAME = st.sampled_from(NAMES)
CRONS = [
    "* * 20-30 11 *",
    "* 0-4 * * *",
    "0 18 * * 5",
    "*/15 * * * *",
    "* 9-16 * * MON-FRI",
    "@always",
    "@never",
    "30 2 * * *",
    "CRON_TZ=Europe/Berlin * 2 * * *",
]

moments = st.integers(min_value=0, max_value=30 * 24 * 60).map(lambda m: BASE + timedelta(minutes=m))
seconds = st.integers(min_value=0, max_value=59).map(lambda s: timedelta(seconds=s))


@st.composite
def gate_objects(draw, name=GATE_NAME):
    gate_name = draw(name)
    spec = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "default": st.sampled_from(["opened", "closed"]),
                "window": st.sampled_from(["5m", "1h", "24h"]),
            },
        )
    )
    annotations = {}
    for key in (OPEN_ANNOTATION, CLOSE_ANNOTATION):
        if draw(st.booleans()):
            annotations[key] = format_time(draw(moments))
    return gate(gate_name, annotations=annotations, **spec)


entries = st.one_of(
    st.sampled_from(CRONS),
    st.builds(
        lambda c, d: {"cron": c, "duration": d},
        st.sampled_from(CRONS[2:5] + CRONS[7:8]),
        st.sampled_from(["30m", "2h", "62h"]),
    ),
)


@st.composite
def keeper_objects(draw, gate_name):
    return keeper(
        f"k{draw(st.integers(0, 99))}",
        gate_name,
        closed=draw(st.lists(entries, max_size=2)),
        opened=draw(st.lists(entries, max_size=2)),
        timeZone=draw(st.sampled_from([None, "UTC", "Europe/Berlin", "America/New_York"])),
    )


@st.composite
def gate_worlds(draw):
    gates = {g["metadata"]["name"]: g for g in draw(st.lists(gate_objects(), max_size=4))}
    keepers = draw(st.lists(st.sampled_from(NAMES).flatmap(keeper_objects), max_size=3))
    return list(gates.values()), keepers


@settings(max_examples=200, deadline=None)
@given(gate_worlds(), moments, seconds)
def test_evaluation_is_deterministic_for_a_given_now(world, now, offset):
    gates, keepers = world
    for g in gates:
        first = evaluate(compile_gate(g, keepers), now + offset)
        second = evaluate(compile_gate(copy.deepcopy(g), copy.deepcopy(keepers)), now + offset)
        assert first == second


# Every example hypothesis finds is pinned with @example (docs/decisions/0055-deterministic-property-tests-in-ci.md).
# Closed every quarter hour, open at night in Berlin; at 05:00 Berlin it opens at 00:01 the
# next night, 19 hours away, and the search said "no transition" (a fresh clone's run found it).
QUARTERLY_NIGHTS = (
    [gate("d", default="closed")],
    [
        keeper(
            "k0",
            "d",
            closed=["*/15 * * * *"],
            opened=["* 0-4 * * *", "*/15 * * * *"],
            timeZone="Europe/Berlin",
        )
    ],
)


@settings(max_examples=200, deadline=None)
@given(gate_worlds(), moments, st.lists(st.integers(0, 60 * 24 * 3), min_size=1, max_size=8))
@example(QUARTERLY_NIGHTS, at("2026-11-15T04:00"), [19 * 60 + 1])
def test_state_does_not_change_before_valid_until_or_next_transition(world, now, probes):
    # The store memoises a state until valid_until; this is what makes that sound.
    gates, keepers = world
    for g in gates:
        cg = compile_gate(g, keepers)
        state = evaluate(cg, now)
        for minutes in probes:
            later = now + timedelta(minutes=minutes, seconds=30)
            if state.valid_until is None or later < state.valid_until:
                assert evaluate(cg, later).open == state.open
                assert evaluate(cg, later).reason == state.reason
            # Without a next transition: none within the horizon (check a day), or none before
            # the time the search gave up at.
            if later < (state.next_transition or state.transition_unknown_after or now + timedelta(days=1)):
                assert evaluate(cg, later).open == state.open
        if state.next_transition is not None:
            assert evaluate(cg, state.next_transition).open != state.open


@settings(max_examples=200, deadline=None)
@given(
    gate_worlds(),
    moments,
    st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True),
    st.sampled_from(NAMES),
)
def test_closing_one_more_gate_never_turns_a_denial_into_an_allow_under_all(world, now, refs, extra):
    gates, keepers = world
    obj = flux(gates=", ".join(f"flux-system/{r}" for r in refs))
    req = request("UPDATE", changed(obj, path="./v2"), obj)
    before = decide(req, Context(lookup_from(gates, keepers), now, Settings()))
    closed_one_more = [g for g in gates if g["metadata"]["name"] != extra] + [gate(extra, closed=True)]
    after = decide(
        req,
        Context(
            lookup_from(closed_one_more, [k for k in keepers if k["spec"]["gate"] != extra]), now, Settings()
        ),
    )
    if not before.allowed:
        assert not after.allowed


@settings(max_examples=200, deadline=None)
@given(
    gate_worlds(),
    moments,
    st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True),
    st.sampled_from(NAMES),
)
def test_opening_one_more_gate_never_turns_an_allow_into_a_denial_under_one_of(world, now, refs, extra):
    gates, keepers = world
    obj = flux(gates=", ".join(f"flux-system/{r}" for r in refs), require="oneOf")
    req = request("UPDATE", changed(obj, path="./v2"), obj)
    before = decide(req, Context(lookup_from(gates, keepers), now, Settings()))
    opened = [g for g in gates if g["metadata"]["name"] != extra] + [gate(extra)]
    after = decide(
        req, Context(lookup_from(opened, [k for k in keepers if k["spec"]["gate"] != extra]), now, Settings())
    )
    if before.allowed:
        assert after.allowed


metadata_edits = st.fixed_dictionaries(
    {},
    optional={
        "labels": st.dictionaries(st.sampled_from(["team", "tier", "app"]), st.text(max_size=5), max_size=3),
        "finalizers": st.lists(st.sampled_from(["finalizers.fluxcd.io", "x/y"]), max_size=2),
        "resourceVersion": st.text(min_size=1, max_size=5),
        "annotations_extra": st.dictionaries(
            st.sampled_from(
                [
                    "note",
                    "reconcile.fluxcd.io/requestedAt",
                    "reconcile.fluxcd.io/forceAt",
                    "kubectl.kubernetes.io/last-applied-configuration",
                ]
            ),
            st.text(max_size=10),
            max_size=3,
        ),
    },
)


@settings(max_examples=300, deadline=None)
@given(
    gate_worlds(),
    moments,
    metadata_edits,
    st.sampled_from(["Kustomization", "HelmRelease", "GitRepository"]),
    st.sampled_from(["enforce", "audit"]),
)
def test_metadata_only_updates_are_never_gated(world, now, edits, kind, mode):
    gates, keepers = world
    old = flux(
        kind,
        gates="flux-system/a, flux-system/b",
        annotations={"reconcile.fluxcd.io/suspendDuring": "@always"},
    )
    new = copy.deepcopy(old)
    extra = edits.pop("annotations_extra", {})
    new["metadata"].update(edits)
    new["metadata"]["annotations"].update(extra)
    decision = decide(
        request("UPDATE", new, old), Context(lookup_from(gates, keepers), now, Settings(mode=mode))
    )
    assert decision.allowed and not decision.held and not decision.gated


@settings(max_examples=30, deadline=None)
@given(
    gate_objects(name=st.just("a")),
    st.lists(keeper_objects("a"), max_size=2),
    moments,
    st.lists(st.integers(0, 3 * 24 * 60 - 1), min_size=1, max_size=5),
)
def test_calendar_intervals_agree_with_admission_at_any_minute(obj, keepers, start, offsets):
    from admission.core.gates.timeline import intervals

    compiled = compile_gate(obj, keepers)
    end = start + timedelta(days=3)
    spans = intervals(compiled, start, end, max_steps=20_000)
    assert spans[0].start == start and spans[-1].end == end
    assert all(a.end == b.start and a.open != b.open for a, b in itertools.pairwise(spans))
    for offset in offsets:  # a random instant falls in exactly one span, with the decision's state
        t = start + timedelta(minutes=offset, seconds=17)
        [span] = [s for s in spans if s.start <= t < s.end]
        assert span.open == evaluate(compiled, t).open


@settings(max_examples=60, deadline=None)
@given(gate_worlds(), moments)
@example(QUARTERLY_NIGHTS, at("2026-11-15T04:00"))
def test_the_next_transition_is_the_first_minute_the_state_changes(world, now):
    # The search jumps from change point to change point; reading the state minute by minute
    # for a day finds the same instant (every change here falls on a whole minute).
    from admission.core.gates.gates import _is_open

    gates, keepers = world
    for g in gates:
        cg = compile_gate(g, keepers)
        state = evaluate(cg, now)
        minute, end = now + timedelta(minutes=1), now + timedelta(days=1)
        while minute <= end and _is_open(cg, minute) == state.open:
            minute += timedelta(minutes=1)
        if minute <= end and state.transition_unknown_after is not None:  # the search gave up before it
            assert state.next_transition is None and state.transition_unknown_after <= minute
        elif minute <= end:
            assert state.next_transition == minute
        else:
            assert state.next_transition is None or state.next_transition > end
