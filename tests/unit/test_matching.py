"""The Python twin of the webhooks' matchConditions (admission.core.admission.matching): the table of
requests it shares with the end-to-end test, and the shapes only a unit test can make."""

from __future__ import annotations

import pytest

from admission.core.admission import matching
from admission.core.base import names
from tests.builders import flux, request
from tests.matching_cases import CASES, OWNER, Case


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_python_predicate_calls_the_endpoints_the_table_says(case: Case):
    req = case.request()
    assert (matching.concerns(matching.VALIDATE, req), matching.concerns(matching.MUTATE, req)) == (
        case.validate,
        case.mutate,
    )


def test_a_request_reaches_at_most_one_entry_per_endpoint():
    # Two entries of one configuration would both be called: once is what the server counts.
    for case in CASES:
        req = case.request()
        for endpoint in (matching.VALIDATE, matching.MUTATE):
            assert sum(e.calls(req) for e in matching.ENTRIES if e.endpoint == endpoint) <= 1, case.id


def test_a_delete_is_judged_on_the_old_object_and_never_sent_to_the_mutating_entries():
    gated = flux("GitRepository", gates="flux-system/a")
    assert matching.concerns(matching.VALIDATE, request("DELETE", None, gated))
    assert not matching.concerns(matching.MUTATE, request("DELETE", None, gated))
    assert not matching.concerns(matching.VALIDATE, request("DELETE", None, flux("GitRepository")))


def test_kinds_and_subresources_we_do_not_gate_are_never_ours():
    other = request("CREATE", flux("GitRepository", gates="flux-system/a"))
    other["kind"] = {"group": "apps", "version": "v1", "kind": "Deployment"}
    assert not matching.concerns(matching.VALIDATE, other)
    scale = request("UPDATE", flux(gates="flux-system/a"), flux(gates="flux-system/a"), sub_resource="scale")
    assert not matching.concerns(matching.VALIDATE, scale) and not matching.concerns(matching.MUTATE, scale)


def test_a_field_of_the_wrong_type_is_not_ours_as_the_fail_open_entries_erring_on_it_are_not_called():
    # Only the mutating entries (Ignore) can see such a field: schema validation comes after them.
    odd = flux("GitRepository", status={"conditions": {"type": names.BLOCKED_CONDITION}})
    assert not matching.concerns(matching.MUTATE, request("UPDATE", odd, odd, sub_resource="status"))
    odd = flux("GitRepository", spec="not an object")
    assert not matching.concerns(matching.MUTATE, request("CREATE", odd))


def test_status_suspended_reaches_the_mutating_entry_only_when_it_must_change():
    def status_write(spec_suspend, suspended):
        obj = flux(
            "GitRepository",
            spec={"suspend": spec_suspend} if spec_suspend is not None else {},
            status={} if suspended is None else {"suspended": suspended},
        )
        return matching.concerns(matching.MUTATE, request("UPDATE", obj, obj, sub_resource="status"))

    assert status_write(True, None) and status_write(True, False) and status_write(True, True)
    assert status_write(None, True) and status_write(False, True)
    assert not status_write(None, None) and not status_write(False, False) and not status_write(None, False)


def test_a_chart_is_generated_only_under_the_name_its_owner_labels_give():
    def status_write(name, labels):
        chart = flux("HelmChart", name=name, namespace="flux-system", labels=labels)
        return matching.concerns(matching.VALIDATE, request("UPDATE", chart, chart, sub_resource="status"))

    assert status_write("apps-podinfo", OWNER)
    assert not status_write("podinfo", OWNER)
    assert not status_write("apps-podinfo", {names.HELM_NAME_LABEL: "podinfo"})
    release = flux("HelmRelease", name="apps-podinfo", labels=OWNER)  # only HelmCharts are generated
    assert not matching.concerns(matching.MUTATE, request("UPDATE", release, release, sub_resource="status"))


def test_the_cel_names_every_string_the_python_twin_reads():
    cel = "\n".join(e.condition.cel for e in matching.ENTRIES)
    for value in (
        *matching.HOLDING_ANNOTATIONS,
        *matching.HOLD_CONDITIONS,
        names.HELM_NAME_LABEL,
        names.HELM_NAMESPACE_LABEL,
        matching.GENERATED_KIND,
    ):
        assert f"'{value}'" in cel
    for entry in matching.ENTRIES:
        assert entry.condition.cel.count("(") == entry.condition.cel.count(")"), entry.name
        assert '"' not in entry.condition.cel


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_what_the_rules_read_of_a_request_is_kept_and_gives_every_entry_s_own_answer(case: Case):
    # concerns() keeps, per request shape, which entries' rules send it; each entry asked on
    # its own (Entry.calls) must agree, on the kept answer as on the first.
    req = case.request()
    for endpoint in (matching.VALIDATE, matching.MUTATE):
        asked = any(e.calls(req) for e in matching.ENTRIES if e.endpoint == endpoint)
        assert matching.concerns(endpoint, req) == asked == matching.concerns(endpoint, req), case.id


def test_a_request_shape_of_long_strings_is_asked_each_time_and_never_kept():
    odd = request("CREATE", flux(gates="flux-system/a"))
    odd["kind"] = {"group": names.KUSTOMIZE_GROUP, "version": "v1", "kind": "K" * 300}
    before = matching._registered.cache_info()
    assert not matching.concerns(matching.VALIDATE, odd)
    after = matching._registered.cache_info()
    assert (after.hits, after.misses, after.currsize) == (before.hits, before.misses, before.currsize)
