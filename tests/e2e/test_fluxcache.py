"""The Flux object watch cache (kube/fluxcache.py) against the real API server and Flux CRDs."""

from __future__ import annotations

import json

import pytest
import yaml
from kubernetes import client

from admission.core.flux.kinds import FluxKind
from admission.kube.client import api_client
from admission.kube.fluxcache import FluxCache
from tests.e2e.manifests import artifact_patch, git_repository, kustomization
from tests.polling import until

pytestmark = pytest.mark.e2e

NOT_INSTALLED = FluxKind("Widget", "widgets.example.com", "widgets", ("v1",))


@pytest.fixture(scope="module")
def cache(cluster):
    cluster.kubectl("create", "namespace", "cache-e2e", check=False)
    cluster.kubectl("apply", "-f", "-", input=git_repository("before-start", "cache-e2e"))
    cache = FluxCache(
        api_client(str(cluster.kubeconfig())), ["GitRepository", "Kustomization", NOT_INSTALLED]
    )
    seen: list[tuple[str, str | None, str | None]] = []
    cache.on_change = lambda kind, old, new: seen.append(
        (kind, old and old["metadata"]["name"], new and new["metadata"]["name"])
    )
    cache.seen = seen
    cache.start()
    try:
        assert cache.wait_synced(30), cache.readiness()
        yield cache
    finally:
        cache.stop()
        cluster.kubectl("delete", "namespace", "cache-e2e", "--wait=false", check=False)


def test_lists_then_follows_additions_status_writes_and_deletions(cluster, cache):
    assert cache.untrusted() is None
    listed = cache.get("GitRepository", "cache-e2e", "before-start")
    assert (
        listed is not None
        and listed["apiVersion"] == "source.toolkit.fluxcd.io/v1"
        and listed["kind"] == "GitRepository"
    )
    assert ("GitRepository", None, "before-start") in cache.seen

    cluster.kubectl("apply", "-f", "-", input=kustomization("later", "cache-e2e"))
    assert until(lambda: cache.get("Kustomization", "cache-e2e", "later"), bool) is not None

    _patch_status(cluster, "before-start", artifact_patch("main@sha1:41ab"))
    served = until(
        lambda: cache.get("GitRepository", "cache-e2e", "before-start"),
        lambda o: (o.get("status") or {}).get("artifact", {}).get("revision") == "main@sha1:41ab",
    )
    assert served["status"]["artifact"]["revision"] == "main@sha1:41ab"

    cluster.kubectl("delete", "kustomization", "later", "-n", "cache-e2e")
    assert until(lambda: cache.get("Kustomization", "cache-e2e", "later"), lambda o: o is None) is None
    assert ("Kustomization", "later", None) in cache.seen
    assert [
        o["metadata"]["name"]
        for o in cache.objects("GitRepository")
        if o["metadata"]["namespace"] == "cache-e2e"
    ] == ["before-start"]


def test_a_kind_whose_crd_is_not_installed_is_empty_and_trusted(cache):
    assert cache.objects("Widget") == [] and cache.get("Widget", "x", "y") is None
    assert cache.readiness()["watches"]["widgets"]["served"] is False
    assert cache.untrusted() is None


def test_keeps_what_is_read_and_drops_what_costs_memory(cluster, cache):
    manifest = yaml.safe_load(kustomization("trimmed", "cache-e2e"))
    cluster.kubectl(
        "apply", "-f", "-", input=yaml.safe_dump(manifest)
    )  # client-side: last-applied annotation
    _patch_status(
        cluster,
        "trimmed",
        '{"status": {"inventory": {"entries": [{"id": "x", "v": "v1"}]},'
        ' "lastAppliedRevision": "main@sha1:1"}}',
        kind="kustomization",
    )
    obj = until(
        lambda: cache.get("Kustomization", "cache-e2e", "trimmed"),
        lambda o: o is not None and (o.get("status") or {}).get("lastAppliedRevision"),
    )
    assert obj["status"]["lastAppliedRevision"] == "main@sha1:1"
    assert "managedFields" not in obj["metadata"] and "inventory" not in obj["status"]
    assert "kubectl.kubernetes.io/last-applied-configuration" not in (
        obj["metadata"].get("annotations") or {}
    )


def _patch_status(cluster, name: str, patch: str, kind: str = "gitrepository") -> None:
    """A merge patch of the status subresource (kubectl 1.20 has no --subresource: raw API)."""
    row = {
        "gitrepository": ("source.toolkit.fluxcd.io", "v1", "gitrepositories"),
        "kustomization": ("kustomize.toolkit.fluxcd.io", "v1", "kustomizations"),
    }[kind]
    client.CustomObjectsApi(api_client(str(cluster.kubeconfig()))).patch_namespaced_custom_object_status(
        *row[:2], "cache-e2e", row[2], name, json.loads(patch)
    )
