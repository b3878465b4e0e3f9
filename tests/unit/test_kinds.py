"""manifests/ agree with the one table of gated Flux kinds (admission.core.flux.kinds)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from admission.core.admission import matching
from admission.core.base import names
from admission.core.flux import kinds
from tests.fluxcli import flux_binary

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]


def _hooks(kind: str) -> list[dict]:
    return next(d for d in _docs(MANIFESTS / "webhooks" / "webhooks.yaml") if d["kind"] == kind)["webhooks"]


def _hook_rules(hook: dict) -> dict[str, list[str]]:
    """An entry's resources per API group; every rule of it has the entry's operations."""
    entry = matching.BY_NAME[hook["name"]]
    out: dict[str, list[str]] = {}
    for rule in hook["rules"]:
        assert rule["operations"] == list(entry.operations), hook["name"]
        assert rule["apiVersions"] == ["*"] and rule["scope"] == "Namespaced"
        for group in rule["apiGroups"]:
            out.setdefault(group, []).extend(rule["resources"])
    return out


def _all_hooks() -> list[dict]:
    return _hooks("ValidatingWebhookConfiguration") + _hooks("MutatingWebhookConfiguration")


def test_the_manifest_has_exactly_the_entries_of_the_matching_module():
    assert [h["name"] for h in _all_hooks()] == [e.name for e in matching.ENTRIES]
    for hook in _hooks("ValidatingWebhookConfiguration"):
        assert matching.BY_NAME[hook["name"]].endpoint == matching.VALIDATE
    for hook in _hooks("MutatingWebhookConfiguration"):
        assert matching.BY_NAME[hook["name"]].endpoint == matching.MUTATE


def test_each_entry_carries_the_match_conditions_of_the_matching_module_verbatim():
    for hook in _all_hooks():
        entry = matching.BY_NAME[hook["name"]]
        assert hook["matchConditions"] == entry.match_conditions(), hook["name"]
        assert hook["clientConfig"]["service"]["path"] == f"/{entry.endpoint}"


def test_every_entry_that_can_hold_fails_closed_and_the_rest_fail_open():
    # With the conditions, only objects that reference a gate reach the Fail entries.
    policies = {h["name"]: h["failurePolicy"] for h in _all_hooks()}
    assert policies == {e.name: e.failure_policy for e in matching.ENTRIES}
    assert policies[names.VALIDATE_WEBHOOK] == policies[names.VALIDATE_STATUS_WEBHOOK] == "Fail"
    assert policies[names.MUTATE_WEBHOOK] == policies[names.MUTATE_STATUS_WEBHOOK] == "Ignore"
    assert policies[names.VALIDATE_INHERITED_WEBHOOK] == "Ignore"  # every HelmRelease's chart, gated or not
    assert not any("objectSelector" in h for h in _all_hooks())  # the fail-closed label is pre-1.30 only


def test_each_entry_is_registered_for_the_kinds_the_table_and_the_matching_module_give():
    for hook in _all_hooks():
        assert _hook_rules(hook) == matching.BY_NAME[hook["name"]].resources(), hook["name"]


def test_the_validating_entries_see_every_main_resource_and_the_status_of_kinds_whose_status_carries_content():
    rules = {h["name"]: _hook_rules(h) for h in _hooks("ValidatingWebhookConfiguration")}
    main = {g: sorted(r) for g, r in rules[names.VALIDATE_WEBHOOK].items()}
    assert main == {g: sorted(r) for g, r in kinds.resources_by_group().items()}
    status = {r for rs in rules[names.VALIDATE_STATUS_WEBHOOK].values() for r in rs}
    assert status == {f"{k.plural}/status" for k in kinds.FLUX_KINDS if k.content.holds}
    assert rules[names.VALIDATE_INHERITED_WEBHOOK] == {names.SOURCE_GROUP: ["helmcharts/status"]}


def test_the_mutating_entries_see_every_main_resource_and_every_status():
    rules = {h["name"]: _hook_rules(h) for h in _hooks("MutatingWebhookConfiguration")}
    assert {g: sorted(r) for g, r in rules[names.MUTATE_WEBHOOK].items()} == {
        g: sorted(r) for g, r in kinds.resources_by_group().items()
    }
    assert {r for rs in rules[names.MUTATE_STATUS_WEBHOOK].values() for r in rs} == {
        f"{k.plural}/status" for k in kinds.FLUX_KINDS
    }


def test_controller_rbac_covers_exactly_the_gated_kinds():
    role = next(d for d in _docs(MANIFESTS / "rbac" / "controller.yaml") if d["kind"] == "ClusterRole")
    flux_groups = set(kinds.resources_by_group())
    granted: dict[str, set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            if group in flux_groups:
                assert sorted(rule["verbs"]) == ["list", "patch", "watch"], (
                    rule
                )  # a watch cache, and requestedAt
                granted.setdefault(group, set()).update(rule["resources"])
    assert granted == {g: set(r) for g, r in kinds.resources_by_group().items()}


def test_the_table_has_one_row_per_kind_and_plural():
    assert len({k.kind for k in kinds.FLUX_KINDS}) == len(kinds.FLUX_KINDS)
    assert len({(k.group, k.plural) for k in kinds.FLUX_KINDS}) == len(kinds.FLUX_KINDS)
    assert all(k.versions for k in kinds.FLUX_KINDS)


def _granted(role: dict, verbs: list[str], status: bool) -> dict[str, set[str]]:
    """The Flux resources granted exactly ``verbs`` (main resources or ``/status``); no rule on
    them grants anything but the verbs these tests name."""
    flux_groups = set(kinds.resources_by_group())
    granted: dict[str, set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            if group in flux_groups and all(r.endswith("/status") == status for r in rule["resources"]):
                assert sorted(rule["verbs"]) in (["list", "watch"], ["get"], ["get", "patch"]), rule
                if sorted(rule["verbs"]) == verbs:
                    granted.setdefault(group, set()).update(rule["resources"])
    return granted


def _wanted(kind_names, suffix: str = "") -> dict[str, set[str]]:
    wanted: dict[str, set[str]] = {}
    for kind in kind_names:
        row = kinds.BY_KIND[kind]
        wanted.setdefault(row.group, set()).add(row.plural + suffix)
    return wanted


def test_webhook_rbac_reads_exactly_the_kinds_the_hold_points_look_up():
    role = next(d for d in _docs(MANIFESTS / "rbac" / "webhook.yaml") if d["kind"] == "ClusterRole")
    # Read-only, a watch cache: never a call per review.
    assert _granted(role, ["list", "watch"], status=False) == _wanted(kinds.CACHED_KINDS)
    # One object read before a denial Event is written about it, off the admission path.
    assert _granted(role, ["get"], status=False) == _wanted(kinds.EVENT_KINDS)


def test_webhook_rbac_writes_only_the_status_of_kinds_whose_denied_attempts_it_shows():
    role = next(d for d in _docs(MANIFESTS / "rbac" / "webhook.yaml") if d["kind"] == "ClusterRole")
    assert kinds.ATTEMPT_SHOWING_KINDS == {"HelmRelease"}
    # get (read again on Conflict) and patch of the status subresource: nothing else, no create/update.
    assert _granted(role, ["get", "patch"], status=True) == _wanted(kinds.ATTEMPT_SHOWING_KINDS, "/status")
    rules = [r for r in role["rules"] if any(x.endswith("/status") for x in r["resources"])]
    assert all(set(r["apiGroups"]) <= set(kinds.resources_by_group()) for r in rules), rules


def _served(crd_files: list[Path]) -> dict[str, tuple[str, set[str]]]:
    """kind -> (group, served versions) of every CRD in ``crd_files`` that the table gates."""
    out = {}
    for path in crd_files:
        for doc in _docs(path):
            spec = doc.get("spec") or {}
            kind = (spec.get("names") or {}).get("kind")
            if doc.get("kind") == "CustomResourceDefinition" and kind in kinds.BY_KIND:
                out[kind] = (spec["group"], {v["name"] for v in spec["versions"] if v.get("served")})
    return out


def test_every_served_version_of_the_real_flux_crds_is_in_the_table():
    crds = sorted((flux_binary().parent / "crds").glob("*.yaml"))  # the Flux release tests/realflux runs
    if not crds:
        pytest.skip(f"no Flux CRDs at {flux_binary().parent / 'crds'}: hack/go-binaries.sh flux builds them")
    served = _served(crds)
    assert set(served) == set(kinds.BY_KIND), "every gated kind is a CRD of the Flux release"
    for kind, (group, versions) in served.items():
        row = kinds.BY_KIND[kind]
        assert group == row.group and versions <= set(row.versions), (kind, versions, row.versions)
        assert row.versions[0] in versions, f"{kind}: the table uses {row.versions[0]}, not served"
