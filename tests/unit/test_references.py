"""SPEC §4: which gates a Flux object references, how many must be open, suspension."""

import pytest

from admission.core.gates.references import loosens, policy_of, suspension_of
from tests.builders import at, flux


def keys(obj):
    return [ref.key for ref in policy_of(obj).refs]


def test_annotation_with_bare_and_namespaced_names():
    obj = flux(namespace="apps", gates="sre-approval, flux-system/qa-approval")
    assert keys(obj) == ["apps/sre-approval", "flux-system/qa-approval"]
    assert policy_of(obj).require == "all"


def test_empty_parts_and_duplicates_are_dropped():
    assert keys(flux(gates=" a ,, a, ,b")) == ["apps/a", "apps/b"]


@pytest.mark.parametrize("require, expected", [("all", "all"), ("oneOf", "oneOf"), (None, "all")])
def test_require_annotation(require, expected):
    assert policy_of(flux(gates="a, b", require=require)).require == expected


def test_unknown_require_means_all_and_says_so():
    policy = policy_of(flux(gates="a, b", require="oneof"))
    assert policy.require == "all" and "require 'oneof' is not 'all' or 'oneOf', using all" in policy.notes


def test_rfc_spec_gates_list_shape():
    obj = flux(spec={"gates": [{"name": "sre-approval"}, {"name": "qa-approval", "namespace": "qa"}]})
    assert keys(obj) == ["apps/sre-approval", "qa/qa-approval"]


def test_working_examples_spec_gates_shape():
    obj = flux(
        "GitRepository",
        "flux-system",
        "flux-system",
        spec={"gates": {"require": "oneOf", "refs": ["change-freeze", "bypass-signoff"]}},
    )
    policy = policy_of(obj)
    assert [r.key for r in policy.refs] == ["flux-system/change-freeze", "flux-system/bypass-signoff"]
    assert policy.require == "oneOf"


def test_references_are_the_union_of_annotation_and_spec():
    obj = flux(gates="a, shared", spec={"gates": [{"name": "shared"}, {"name": "b"}]})
    assert keys(obj) == ["apps/a", "apps/shared", "apps/b"]


def test_annotation_and_spec_require_disagreeing_means_all():
    obj = flux(gates="a", require="oneOf", spec={"gates": {"require": "all", "refs": ["b"]}})
    policy = policy_of(obj)
    assert policy.require == "all" and any("disagree" in n for n in policy.notes)


@pytest.mark.parametrize("text", ["a/b/c", "Upper", "-bad", "ns/"])
def test_unusable_references_are_kept_with_an_error(text):
    refs = policy_of(flux(gates=text)).refs
    assert len(refs) == 1 and refs[0].error and "not a valid" in refs[0].error


def test_a_spec_gates_of_the_wrong_shape_is_an_unusable_reference():
    refs = policy_of(flux(spec={"gates": "sre-approval"})).refs
    assert refs[0].error == "spec.gates must be a list or {require, refs: [...]}"


def test_no_references():
    assert policy_of(flux()).refs == ()


def test_loosening_removes_references_or_relaxes_require():
    before = policy_of(flux(gates="a, b"))
    assert loosens(before, policy_of(flux(gates="a"))) == "removes gate references 'apps/b'"
    assert (
        loosens(before, policy_of(flux(gates="a, b", require="oneOf"))) == "loosens require from all to oneOf"
    )
    assert loosens(before, policy_of(flux(gates="a, b, c"))) is None
    assert loosens(policy_of(flux(gates="a, b", require="oneOf")), before) is None


def test_under_one_of_adding_a_reference_loosens():
    # One more gate that can release it: its opening alone would be enough.
    one_of = policy_of(flux(gates="a, b", require="oneOf"))
    assert (
        loosens(one_of, policy_of(flux(gates="a, b, team/c", require="oneOf")))
        == "adds gate references 'team/c' under require oneOf"
    )
    assert loosens(one_of, policy_of(flux(gates="a, b, c"))) is None  # and require all: tighter
    assert loosens(policy_of(flux()), policy_of(flux(gates="a, b", require="oneOf"))) is None  # gated anew


NIGHT = at("2026-11-21T02:00")
DAY = at("2026-11-21T12:00")


def test_spec_suspend_suspends_without_holding():
    s = suspension_of(flux(spec={"suspend": True}), DAY)
    assert s.suspended and s.hold is None


def test_suspended_annotation_suspends_and_holds_with_its_reason():
    s = suspension_of(flux(annotations={"reconcile.fluxcd.io/suspended": "incident 42"}), DAY)
    assert s.suspended and s.hold == "suspended by reconcile.fluxcd.io/suspended ('incident 42')"


@pytest.mark.parametrize("key", ["reconcile.fluxcd.io/suspendDuring", "reconcile.fluxcd.io/suspendedDuring"])
def test_suspend_during_is_active_in_its_window_only(key):
    obj = flux(annotations={key: "* 0-4 * * *"})
    night = suspension_of(obj, NIGHT)
    assert night.suspended and night.until == at("2026-11-21T05:00")
    assert night.hold == f"suspended by {key} '* 0-4 * * *' until 2026-11-21T05:00:00Z"
    assert suspension_of(obj, DAY) == suspension_of(flux(), DAY)


def test_suspend_during_always():
    assert suspension_of(flux(annotations={"reconcile.fluxcd.io/suspendDuring": "@always"}), DAY).hold


def test_suspend_during_uses_utc_or_its_cron_tz_prefix():
    obj = flux(annotations={"reconcile.fluxcd.io/suspendDuring": "CRON_TZ=Asia/Tokyo * 9 * * *"})
    assert suspension_of(obj, at("2026-11-21T00:30")).suspended  # 09:30 in Tokyo
    assert not suspension_of(obj, at("2026-11-21T09:30")).suspended


def test_an_unparseable_suspend_during_counts_as_active():
    s = suspension_of(flux(annotations={"reconcile.fluxcd.io/suspendDuring": "weekends"}), DAY)
    assert s.suspended and "cannot be evaluated" in s.hold


def test_spec_suspend_or_schedule():
    obj = flux(spec={"suspend": False}, annotations={"reconcile.fluxcd.io/suspendDuring": "* 0-4 * * *"})
    assert suspension_of(obj, NIGHT).suspended and not suspension_of(obj, DAY).suspended


@pytest.mark.parametrize("require", [["oneOf"], {"a": 1}])
def test_a_require_that_is_a_list_or_a_mapping_means_all(require):
    # Found by bench/fuzz.py: set() of the asked values raised TypeError (unhashable).
    for obj in (
        flux(gates="a, b", annotations={"gating.toolkit.fluxcd.io/require": require}),
        flux(spec={"gates": {"require": require, "refs": ["a", "b"]}}),
    ):
        policy = policy_of(obj)
        assert policy.require == "all" and any("is not 'all' or 'oneOf'" in n for n in policy.notes)


@pytest.mark.parametrize("value", [["* * * * *"], {"cron": "* * * * *"}, 5, "CRON_TZ=America * * * * *"])
def test_a_suspend_during_that_cannot_be_parsed_in_any_way_counts_as_active(value):
    # Found by bench/fuzz.py: a list raised TypeError in the cron cache, a directory zone OSError.
    s = suspension_of(flux(annotations={"reconcile.fluxcd.io/suspendDuring": value}), DAY)
    assert s.suspended and "cannot be evaluated" in s.hold


def test_too_many_references_hold_the_object_and_say_why():
    many = ", ".join(f"g{i}" for i in range(65))
    refs = policy_of(flux(gates=many)).refs
    assert len(refs) == 1 and refs[0].error == "more than the 64 distinct gate references allowed"
    assert len(policy_of(flux(gates=", ".join(f"g{i}" for i in range(64)))).refs) == 64
    huge = ", ".join(f"g{i}" for i in range(40000))
    assert "more than the 20416 allowed" in policy_of(flux(gates=huge)).refs[0].error
    spec = policy_of(flux(spec={"gates": [{"name": f"g{i}"} for i in range(100)]})).refs
    assert spec[0].error == "more than the 64 distinct gate references allowed"
    both = flux(gates=", ".join(f"g{i}" for i in range(40)), spec={"gates": [f"h{i}" for i in range(25)]})
    assert policy_of(both).refs[0].error == "more than the 64 distinct gate references allowed"


SIXTY_FIVE_OPEN_THEN_FREEZE = ["flux-system/open"] * 65 + ["flux-system/freeze"]


@pytest.mark.parametrize(
    "obj",
    [
        flux(gates=", ".join(SIXTY_FIVE_OPEN_THEN_FREEZE)),
        flux(gates=",".join(SIXTY_FIVE_OPEN_THEN_FREEZE)),
        flux(
            spec={
                "gates": [
                    {"name": r.split("/")[1], "namespace": "flux-system"} for r in SIXTY_FIVE_OPEN_THEN_FREEZE
                ]
            }
        ),
        flux(spec={"gates": {"refs": SIXTY_FIVE_OPEN_THEN_FREEZE}}),
        flux(
            gates=", ".join(["flux-system/open"] * 65),
            spec={"gates": [{"name": "freeze", "namespace": "flux-system"}]},
        ),
        flux(
            namespace="flux-system", gates=", ".join(["open", " flux-system/open", "/open"] * 30 + ["freeze"])
        ),
    ],
)
def test_repeating_a_gate_never_pushes_another_out(obj):
    assert [ref.key for ref in policy_of(obj).refs] == ["flux-system/open", "flux-system/freeze"]


def test_the_longest_valid_references_fit_the_annotation_and_a_longer_one_is_held():
    longest = [f"{'n' * 62}{i % 10}/{'g' * 250}{i:03d}" for i in range(64)]
    assert len(longest[0]) == 317
    refs = policy_of(flux(gates=", ".join(longest))).refs
    assert len(refs) == 64 and not any(ref.error for ref in refs)
    longer = policy_of(flux(gates=", ".join(longest) + ", " + longest[0])).refs
    assert [ref.error for ref in longer] == [
        "the gating.toolkit.fluxcd.io/gates annotation is 20733 characters long, more than the 20416 allowed"
    ]


def test_spec_gates_with_more_entries_than_read_are_held_even_when_they_repeat():
    assert len(policy_of(flux(spec={"gates": ["a"] * 1024})).refs) == 1
    refs = policy_of(flux(spec={"gates": ["a"] * 1025})).refs
    assert [ref.error for ref in refs] == ["spec.gates lists 1025 entries, more than the 1024 allowed"]


def test_an_empty_name_in_spec_gates_is_still_an_unusable_reference():
    refs = policy_of(flux(spec={"gates": ["", {"name": ""}]})).refs
    assert refs and all(ref.error and "not a valid" in ref.error for ref in refs)


def test_a_name_with_a_trailing_newline_is_not_valid():
    refs = policy_of(flux(spec={"gates": [{"name": "x\n"}]})).refs
    assert refs[0].error and "not a valid" in refs[0].error


# ---- a policy read from annotations alone is kept (references._annotations_policy) ------------


def test_a_kept_policy_is_the_one_of_its_own_namespace_and_spec_gates_still_count():
    ref = "change-freeze, flux-system/sre"
    apps, web = flux(namespace="apps", gates=ref), flux(namespace="web", gates=ref)
    assert [r.key for r in policy_of(apps).refs] == ["apps/change-freeze", "flux-system/sre"]
    assert [r.key for r in policy_of(web).refs] == ["web/change-freeze", "flux-system/sre"]
    listed = flux(namespace="apps", gates=ref, spec={"gates": [{"name": "qa"}]})
    assert [r.key for r in policy_of(listed).refs] == [
        "apps/change-freeze",
        "flux-system/sre",
        "apps/qa",
    ]
    assert policy_of(flux(namespace="apps", gates=ref, require="oneOf")).require == "oneOf"
    assert policy_of(apps).require == "all"


def test_what_is_kept_stays_bounded_and_long_values_are_read_each_time():
    from admission.core.gates import references

    for i in range(references._KEPT + 50):
        assert policy_of(flux(gates=f"gate-{i}")).refs[0].name == f"gate-{i}"
    assert references._annotations_policy.cache_info().currsize <= references._KEPT
    long = ", ".join(f"gate-{i}-" + "x" * 120 for i in range(10))
    assert len(long) > references._KEPT_LENGTH
    before = references._annotations_policy.cache_info()
    assert len(policy_of(flux(gates=long)).refs) == 10
    after = references._annotations_policy.cache_info()
    assert (after.hits, after.misses) == (before.hits, before.misses)
