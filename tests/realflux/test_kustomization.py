"""A new commit for a gated Kustomization waits behind a closed gate, with the real
source-controller and kustomize-controller: the cluster keeps the approved ConfigMap, `flux get`
shows the hold, an ungated Kustomization on the same repository gets the commit meanwhile, and
opening the gate lands the commit at once."""

from __future__ import annotations

import json
import time

from tests.conftest import REPORT
from tests.realflux.conftest import condition, ready
from tests.realflux.servers import configmap


def gate(name: str, namespace: str, default: str = "opened") -> dict:
    return {
        "apiVersion": "gating.toolkit.fluxcd.io/v1alpha1",
        "kind": "Gate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"default": default},
    }


def git_repository(name: str, url: str, annotations: dict | None = None) -> dict:
    return {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "GitRepository",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {"interval": "3s", "url": url, "ref": {"branch": "main"}, "timeout": "20s"},
    }


def kustomization(name: str, path: str, source: str, annotations: dict | None = None, **spec) -> dict:
    return {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {"name": name, "annotations": annotations or {}},
        # A long interval: only our controller's release can explain a prompt apply.
        "spec": {
            "interval": "10m",
            "path": path,
            "prune": True,
            "wait": False,
            "timeout": "30s",
            "sourceRef": {"kind": "GitRepository", "name": source},
            **spec,
        },
    }


def manifests(namespace: str, version: str) -> dict[str, str]:
    return {
        f"{app}/configmap.yaml": configmap(f"app-{app}", namespace, {"version": version})
        for app in ("a", "b")
    }


def test_a_new_commit_waits_for_the_gate_and_lands_when_it_opens(cluster, git):
    ns = cluster.namespace
    repo = git.repository(ns)
    first = repo.commit(manifests(ns, "1"), "version 1")
    gated = {"gating.toolkit.fluxcd.io/gates": "freeze"}
    cluster.apply(
        gate("freeze", ns),
        git_repository("apps", repo.url),
        kustomization("gated", "./a", "apps", gated),
        kustomization("free", "./b", "apps"),
    )
    seen = cluster.wait(
        lambda: (cluster.data("app-a"), cluster.data("app-b")),
        lambda d: d == ({"version": "1"}, {"version": "1"}),
    )
    assert seen == ({"version": "1"}, {"version": "1"}), "version 1 should be applied while the gate is open"

    assert cluster.gate("close", "freeze", "-n", ns, "-m", "release freeze").returncode == 0
    second = repo.commit(manifests(ns, "2"), "version 2")

    # The ungated Kustomization on the same repository gets the commit ...
    assert cluster.wait(lambda: cluster.data("app-b"), lambda d: d == {"version": "2"}) == {"version": "2"}
    # ... the gated one is held at its attempt: nothing of version 2 is applied.
    held = cluster.wait(
        lambda: cluster.get("kustomization", "gated"),
        lambda k: ready(k) == "False" and "freeze" in condition(k, "Ready").get("message", ""),
    )
    assert ready(held) == "False", held.get("status")
    assert "gate" in condition(held, "Ready")["message"] and "freeze" in condition(held, "Ready")["message"]
    assert held["status"]["lastAppliedRevision"] == first
    assert cluster.data("app-a") == {"version": "1"}
    assert (
        second.split("@")[1][:12] in condition(held, "Ready")["message"]
        or second in condition(held, "Ready")["message"]
    )

    listing = cluster.flux("get", "kustomizations", "-n", ns)
    assert listing.returncode == 0, listing.stderr
    line = next(row for row in listing.stdout.splitlines() if row.startswith("gated"))
    assert "False" in line and "freeze" in line, listing.stdout
    REPORT["flux get kustomizations, one held"] = "\n" + listing.stdout.rstrip()
    REPORT["kubectl get kustomizations, one held"] = (
        "\n" + cluster.plane.kubectl("get", "kustomizations", "-n", ns).stdout.rstrip()
    )

    opened = time.monotonic()
    assert cluster.gate("open", "freeze", "-n", ns, "-m", "approved").returncode == 0
    landed = cluster.wait(lambda: cluster.data("app-a"), lambda d: d == {"version": "2"}, timeout=60)
    assert landed == {"version": "2"}, cluster.get("kustomization", "gated").get("status")
    REPORT["real Flux: commit lands after kubectl gate open"] = f"{time.monotonic() - opened:.1f}s"
    released = cluster.wait(lambda: cluster.get("kustomization", "gated"), lambda k: ready(k) == "True")
    assert released["status"]["lastAppliedRevision"] == second

    # Only what a gate can hold reaches our server (matchConditions): the API server's audit log
    # names the mutating webhooks it called for each write. Mutation's conditions include every
    # validating one's, so a write it was not called for reached neither.
    called = webhook_calls(cluster.plane.audit_log, ns)
    assert called.get("gated"), "the gated Kustomization's writes reach the webhook"
    assert not called.get("free"), (
        f"the ungated Kustomization's writes reached the webhook: {called.get('free')}"
    )
    assert not called.get("apps"), "nor do the ungated GitRepository's"


def webhook_calls(audit_log, namespace: str) -> dict[str, list[str]]:
    """Per object name in ``namespace``: the writes (verb and subresource) for which the API
    server called one of our mutating webhooks."""
    calls: dict[str, list[str]] = {}
    for line in audit_log.read_text().splitlines():
        event = json.loads(line)
        ref = event.get("objectRef") or {}
        if ref.get("namespace") != namespace or event.get("stage") != "ResponseComplete":
            continue
        ours = [
            v
            for k, v in (event.get("annotations") or {}).items()
            if k.startswith("mutation.webhook.admission.k8s.io/") and '"gate-admission"' in v
        ]
        if ours:
            calls.setdefault(ref.get("name", ""), []).append(
                f"{event['verb']} {ref.get('subresource', '')}".strip()
            )
    return calls
