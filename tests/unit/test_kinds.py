"""manifests/ agree with the one table of gated Flux kinds (admission.core.kinds)."""

from __future__ import annotations

from pathlib import Path

import yaml

from admission.core import kinds

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]


def _rules(kind: str) -> dict[str, list[str]]:
    config = next(d for d in _docs(MANIFESTS / "webhooks" / "webhooks.yaml") if d["kind"] == kind)
    (hook,) = config["webhooks"]
    out: dict[str, list[str]] = {}
    for rule in hook["rules"]:
        assert rule["operations"] == ["CREATE", "UPDATE", "DELETE"] and rule["apiVersions"] == ["*"]
        for group in rule["apiGroups"]:
            out.setdefault(group, []).extend(rule["resources"])
    return out


def test_validating_webhook_rules_follow_the_table():
    assert {g: sorted(r) for g, r in _rules("ValidatingWebhookConfiguration").items()} == \
        {g: sorted(r) for g, r in kinds.webhook_resources(validating=True).items()}


def test_mutating_webhook_rules_follow_the_table():
    assert {g: sorted(r) for g, r in _rules("MutatingWebhookConfiguration").items()} == \
        {g: sorted(r) for g, r in kinds.webhook_resources(validating=False).items()}


def test_controller_rbac_covers_exactly_the_gated_kinds():
    role = next(d for d in _docs(MANIFESTS / "rbac" / "controller.yaml") if d["kind"] == "ClusterRole")
    flux_groups = set(kinds.resources_by_group())
    granted: dict[str, set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            if group in flux_groups:
                assert sorted(rule["verbs"]) == ["get", "list", "patch"], rule
                granted.setdefault(group, set()).update(rule["resources"])
    assert granted == {g: set(r) for g, r in kinds.resources_by_group().items()}


def test_the_table_has_one_row_per_kind_and_plural():
    assert len({k.kind for k in kinds.FLUX_KINDS}) == len(kinds.FLUX_KINDS)
    assert len({(k.group, k.plural) for k in kinds.FLUX_KINDS}) == len(kinds.FLUX_KINDS)
    assert all(k.versions for k in kinds.FLUX_KINDS)
