"""Half a release (admission.core.admission.halfrelease): the warnings for an object whose inputs (source,
dependsOn, a HelmRelease's valuesFrom, the automation an ImagePolicy feeds) are gated
differently, so approving its content would land only part of a change."""

from __future__ import annotations

from admission.core.admission import halfrelease
from admission.core.admission.pending import lookups
from admission.core.base import names
from tests.builders import flux

GIT = {"kind": "GitRepository", "name": "podinfo"}


def find(*objects: dict):
    return lookups(list(objects))


def app(gates: str | None = "flux-system/freeze", **spec) -> dict:
    return flux(name="app", gates=gates, spec={"interval": "10m", "sourceRef": GIT, **spec})


def test_a_source_gated_like_the_object_is_no_warning_and_one_gated_otherwise_is():
    same = flux("GitRepository", "podinfo", gates="flux-system/freeze")
    other = flux("GitRepository", "podinfo", gates="flux-system/other")
    assert halfrelease.warnings(app(), *find(same)) == []
    [warning] = halfrelease.warnings(app(), *find(other))
    assert warning.startswith(
        "its source GitRepository/apps/podinfo is gated by flux-system/other, "
        "it by flux-system/freeze: an approval here lands only what those gates let through"
    )
    [ungated] = halfrelease.warnings(app(), *find(flux("GitRepository", "podinfo")))
    assert "is gated by no gate" in ungated
    # A source we cannot see (offline, not in the manifest): how it is gated is unknown, so no claim.
    assert halfrelease.warnings(app(), *find()) == []


def test_depends_on_in_another_namespace_is_looked_up_there():
    source = flux("GitRepository", "podinfo", gates="flux-system/freeze")
    db = flux(name="db", namespace="data", gates="flux-system/db-window")
    found = halfrelease.warnings(app(dependsOn=[{"name": "db", "namespace": "data"}]), *find(source, db))
    assert (
        found == [found[0]]
        and "its dependency Kustomization/data/db is gated by flux-system/db-window" in found[0]
    )


def test_values_from_configmaps_and_secrets_are_approved_apart_from_the_chart():
    release = flux(
        "HelmRelease",
        "web",
        gates="flux-system/freeze",
        spec={
            "interval": "10m",
            "chart": {"spec": {"chart": "web", "sourceRef": {"kind": "HelmRepository", "name": "charts"}}},
            "valuesFrom": [
                {"kind": "ConfigMap", "name": "web-values"},
                {"kind": "Secret", "name": "web-secrets"},
                {"kind": "Other", "name": "ignored"},
                "odd",
            ],
        },
    )
    [warning] = halfrelease.warnings(
        release, *find()
    )  # its generated HelmChart inherits its gates: no warning
    assert warning.startswith(
        "its values come from ConfigMap/apps/web-values, Secret/apps/web-secrets, which no "
        "gate holds: a change there waits here as a new values digest"
    )
    del release["spec"]["valuesFrom"]
    assert halfrelease.warnings(release, *find()) == []


def automation(name: str = "auto", selector: dict | None = None, git: str = "podinfo") -> dict:
    spec = {"interval": "1m", "sourceRef": {"kind": "GitRepository", "name": git}}
    if selector is not None:
        spec["policySelector"] = selector
    return flux("ImageUpdateAutomation", name, spec=spec)


def policy(labels: dict | None = None) -> dict:
    return flux(
        "ImagePolicy",
        "podinfo",
        gates="flux-system/freeze",
        labels=labels,
        spec={"imageRepositoryRef": {"name": "podinfo"}, "policy": {"semver": {"range": "6.x"}}},
    )


def test_an_image_policy_feeding_an_automation_whose_git_source_is_gated_warns():
    gated_git = flux("GitRepository", "podinfo", gates="flux-system/freeze")
    [warning] = halfrelease.warnings(policy(), *find(automation(), gated_git))
    assert warning.startswith(
        "it feeds ImageUpdateAutomation/apps/auto, whose commits wait at "
        "GitRepository/apps/podinfo, gated by flux-system/freeze: an image approved here "
        "lands once that commit is let through there too"
    )
    assert halfrelease.warnings(policy(), *find(automation(), flux("GitRepository", "podinfo"))) == []
    elsewhere = flux("ImageUpdateAutomation", "auto", "other", spec={"sourceRef": GIT})
    assert halfrelease.warnings(policy(), *find(elsewhere, gated_git)) == []  # feeds its own namespace only


def test_an_automations_policy_selector_says_which_policies_feed_it():
    git = flux("GitRepository", "podinfo", gates="flux-system/freeze")

    def fed(labels: dict | None, selector: dict) -> bool:
        return bool(halfrelease.warnings(policy(labels), *find(automation(selector=selector), git)))

    assert fed({"app": "web"}, {"matchLabels": {"app": "web"}})
    assert not fed({"app": "db"}, {"matchLabels": {"app": "web"}})
    assert not fed(None, {"matchLabels": {"app": "web"}})
    assert fed({"tier": "a"}, {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]})
    assert not fed(
        {"tier": "c"}, {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}
    )
    assert not fed(
        {"tier": "a"}, {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["a"]}]}
    )
    assert fed({"tier": "a"}, {"matchExpressions": [{"key": "tier", "operator": "Exists"}]})
    assert not fed({"tier": "a"}, {"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]})
    assert fed(None, {})  # an empty selector takes every policy


def test_lookups_prefer_the_manifests_objects_and_list_the_clusters_once_per_kind():
    listed: list[str] = []

    def cluster(kind: str) -> list[dict]:
        listed.append(kind)
        return [flux("GitRepository", "podinfo", gates="flux-system/other"), flux("GitRepository", "extra")]

    get, listing = lookups([flux("GitRepository", "podinfo", gates="flux-system/freeze")], cluster)
    assert (
        get("GitRepository", "apps", "podinfo")["metadata"]["annotations"][names.GATES_ANNOTATION]
        == "flux-system/freeze"
    )  # the manifest's, not the cluster's
    assert halfrelease.warnings(app(), get, listing) == []
    assert [metadata_name(o) for o in listing("GitRepository", "apps")] == ["podinfo", "extra"]
    assert get("GitRepository", "other", "podinfo") is None and listed == ["GitRepository"]


def metadata_name(obj: dict) -> str:
    return obj["metadata"]["name"]


def test_kubectl_gate_pending_shows_them_on_each_held_object():
    from admission.core.admission.pending import pending_rows
    from tests.conftest import FIXED_NOW

    held = policy()
    held["status"] = {
        "conditions": [
            {
                "type": names.BLOCKED_CONDITION,
                "status": "True",
                "reason": names.GATE_CLOSED_REASON,
                "lastTransitionTime": "2026-06-10T11:00:00Z",
                "message": "Reconciliation is blocked as gate 'flux-system/freeze' is closed: "
                "podinfo:6.5.1@sha256:aa waits, serving podinfo:6.5.0@sha256:bb",
            }
        ]
    }
    [row] = pending_rows(
        [held, automation(), flux("GitRepository", "podinfo", gates="flux-system/freeze")], {}, FIXED_NOW
    )
    assert row["waits"] == "podinfo:6.5.1@sha256:aa" and row["since"] == "2026-06-10T11:00:00Z"
    assert [w.split(",")[0] for w in row["warnings"]] == ["it feeds ImageUpdateAutomation/apps/auto"]
