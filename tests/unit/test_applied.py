"""The request `kubectl gate check` reconstructs: what `kubectl apply` would make the API server send."""

from __future__ import annotations

import json

from admission.core.admission.applied import applied, apply_request, user_info
from admission.core.base.names import GATES_ANNOTATION, LAST_APPLIED_ANNOTATION
from tests.builders import applied_live, flux


def test_an_unchanged_manifest_applies_to_the_live_object_itself():
    manifest = flux(gates="flux-system/a")
    live = applied_live(manifest, status={"observedGeneration": 1})
    new = applied(live, manifest)
    assert new["spec"] == live["spec"] and new["status"] == live["status"]
    assert (
        new["metadata"]["uid"] == "uid-live"
        and new["metadata"]["annotations"][GATES_ANNOTATION] == "flux-system/a"
    )


def test_fields_only_the_server_wrote_stay_and_fields_the_manifest_dropped_go():
    before = flux(spec={"interval": "10m", "path": "./a", "prune": True})
    live = applied_live(before)
    live["spec"]["timeout"] = "5m"  # a default the API server filled in
    after = flux(spec={"interval": "10m", "path": "./a"})
    new = applied(live, after)
    assert new["spec"] == {"interval": "10m", "path": "./a", "timeout": "5m"}


def test_a_dropped_gate_annotation_is_removed_and_status_in_the_manifest_is_ignored():
    live = applied_live(flux(gates="flux-system/a"), status={"ready": True})
    manifest = flux(status={"ready": False})
    new = applied(live, manifest)
    assert GATES_ANNOTATION not in new["metadata"]["annotations"]
    assert new["status"] == {"ready": True}
    assert json.loads(new["metadata"]["annotations"][LAST_APPLIED_ANNOTATION]) == manifest


def test_requests_are_creates_without_a_live_object_and_updates_with_one():
    manifest = flux("HelmRelease", spec={"interval": "1m"})
    create = apply_request(manifest, None, user_info("alice"))
    assert create["operation"] == "CREATE" and create["oldObject"] is None and create["object"] == manifest
    assert create["kind"] == {"group": "helm.toolkit.fluxcd.io", "version": "v2", "kind": "HelmRelease"}
    assert create["resource"]["resource"] == "helmreleases" and create["namespace"] == "apps"
    update = apply_request(manifest, applied_live(manifest), user_info("alice"))
    assert update["operation"] == "UPDATE" and update["oldObject"]["metadata"]["uid"] == "uid-live"


def test_user_info_adds_the_groups_the_api_server_adds():
    assert user_info("alice") == {"username": "alice", "groups": ["system:authenticated"]}
    assert user_info("bob", ["sre", "sre"]) == {"username": "bob", "groups": ["sre", "system:authenticated"]}
    assert user_info("system:serviceaccount:flux-system:kc")["groups"] == [
        "system:serviceaccounts",
        "system:serviceaccounts:flux-system",
        "system:authenticated",
    ]
    assert user_info("system:anonymous")["groups"] == []
