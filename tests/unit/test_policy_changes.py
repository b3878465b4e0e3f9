"""A held object's gate policy cannot be changed so that it is no longer held (SPEC §5: an
UPDATE that loosens its gates is held), whatever the references and policies are."""

from __future__ import annotations

import copy

from hypothesis import example, given, settings
from hypothesis import strategies as st

from admission.core.admission.decision import Context, Settings, decide
from admission.core.gates.references import GateRef, Policy, policy_of
from tests.builders import at, flux, gate, lookup_from, request

NOW = at("2026-06-10T12:00")
NAMESPACE = "flux-system"
# The gates that exist, by key; any other reference is NotFound (closed).
GATES = [(NAMESPACE, "a"), (NAMESPACE, "b"), (NAMESPACE, "c"), ("team", "x"), ("5", "y")]
# References as people write them: bare names, other namespaces, missing gates, unusable
# ones, and dict entries (one whose namespace is a number: unusable, with the key of "5/y").
TEXTS = ["a", "b", "flux-system/c", "team/x", "missing", "Not_A_Name", "5/y"]
ENTRIES = TEXTS + [{"name": "a"}, {"name": "x", "namespace": "team"}, {"name": "y", "namespace": 5}]
REQUIRES = [None, "all", "oneOf"]


@st.composite
def objects(draw) -> dict:
    """A Kustomization whose references sit in the annotation, in spec.gates (either shape), or both."""
    annotated = draw(st.lists(st.sampled_from(TEXTS), max_size=3, unique=True))
    listed = draw(st.lists(st.sampled_from(ENTRIES), max_size=3))
    spec: dict = {"path": "./deploy"}
    shape = draw(st.sampled_from(["list", "refs"]))
    if listed and shape == "list":
        spec["gates"] = listed
    elif listed:
        spec["gates"] = {"refs": listed, **({"require": r} if (r := draw(st.sampled_from(REQUIRES))) else {})}
    return flux(
        namespace=NAMESPACE,
        gates=", ".join(annotated) if annotated else None,
        require=draw(st.sampled_from(REQUIRES)),
        spec=spec,
    )


def held_by_gates(policy: Policy, open_gates: set[tuple[str, str]]) -> bool:
    """What SPEC §4 says, written out: all holds while any gate is closed, oneOf while none is
    open; an unusable or missing reference is closed."""
    opened = [ref.error is None and (ref.namespace, ref.name) in open_gates for ref in policy.refs]
    if policy.require == "oneOf":
        return bool(opened) and not any(opened)
    return not all(opened)


def asks_at_least_as_much(old: Policy, new: Policy) -> bool:
    return set(old.refs) <= set(new.refs) and new.require == "all"


@settings(max_examples=400, deadline=None)
@given(objects(), objects(), st.sets(st.sampled_from(GATES)))
# Two closed gates under oneOf, and a reference added to an open gate of another namespace.
@example(
    flux(namespace=NAMESPACE, gates="a, b", require="oneOf"),
    flux(namespace=NAMESPACE, gates="a, b, team/x", require="oneOf"),
    {("team", "x")},
)
# An object gated anew under oneOf: nothing held it, so nothing is loosened (it was held as
# "loosens require from all to oneOf").
@example(
    flux(namespace=NAMESPACE, spec={"path": "./deploy"}),
    flux(namespace=NAMESPACE, require="oneOf", spec={"path": "./deploy", "gates": ["a", "b"]}),
    set(),
)
def test_a_policy_change_that_would_release_a_held_object_is_held(old, new, open_gates):
    new = copy.deepcopy(new)
    new["metadata"]["name"] = old["metadata"]["name"]
    gates = [
        gate(name, namespace, default="opened" if (namespace, name) in open_gates else "closed")
        for namespace, name in GATES
    ]
    decision = decide(request("UPDATE", new, old), Context(lookup_from(gates), NOW, Settings()))
    before, after = policy_of(old), policy_of(new)
    if held_by_gates(before, open_gates) and not held_by_gates(after, open_gates):
        assert not decision.allowed and decision.held, (before, after, decision)
    if not before.refs or asks_at_least_as_much(before, after):  # tightening always passes
        assert decision.allowed, (before, after, decision)
    if decision.allowed:
        assert not held_by_gates(before, open_gates) or held_by_gates(after, open_gates)


def test_the_reference_oracle_reads_refs_as_the_core_does():
    # (Guards the property's own reading: an unusable reference is never open.)
    policy = policy_of(flux(namespace=NAMESPACE, spec={"gates": [{"name": "y", "namespace": 5}]}))
    assert policy.refs[0].error and held_by_gates(policy, {("5", "y")})
    assert not held_by_gates(Policy((GateRef("5", "y"),), "all"), {("5", "y")})
