"""A gate on a source, with the real source-controller and kustomize-controller: the source keeps
serving its approved artifact (and says Blocked), its consumer keeps applying that artifact —
drift correction goes on — and opening the gate lets the new revision through."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from tests.conftest import REPORT
from tests.realflux.conftest import condition, ready
from tests.realflux.servers import configmap
from tests.realflux.test_kustomization import gate, git_repository, kustomization


def artifact_revision(obj: dict) -> str | None:
    return (obj.get("status", {}).get("artifact") or {}).get("revision")


def test_a_gated_source_serves_the_approved_artifact_and_drift_is_corrected(cluster, git):
    ns = cluster.namespace
    repo = git.repository(ns)
    first = repo.commit({"app/configmap.yaml": configmap("app", ns, {"version": "1"})}, "version 1")
    cluster.apply(
        gate("freeze", ns),
        git_repository("apps", repo.url, {"gating.toolkit.fluxcd.io/gates": "freeze"}),
        kustomization("app", "./app", "apps", interval="5s"),
    )
    assert cluster.wait(lambda: cluster.data("app"), lambda d: d == {"version": "1"}) == {"version": "1"}

    assert cluster.gate("close", "freeze", "-n", ns).returncode == 0
    second = repo.commit({"app/configmap.yaml": configmap("app", ns, {"version": "2"})}, "version 2")
    blocked = cluster.wait(
        lambda: cluster.get("gitrepository", "apps"),
        lambda s: condition(s, "Blocked").get("status") == "True",
    )
    assert condition(blocked, "Blocked").get("reason") == "GateClosed", blocked.get("status")
    assert artifact_revision(blocked) == first
    assert second.split(":")[1][:7] in condition(blocked, "Blocked")["message"], condition(blocked, "Blocked")

    # Someone edits what Flux applied: the consumer restores the approved data, not the new one.
    cluster.plane.kubectl(
        "patch", "configmap", "app", "-n", ns, "--type=merge", "-p", '{"data":{"version":"hand"}}'
    )
    assert cluster.wait(lambda: cluster.data("app"), lambda d: d == {"version": "1"}) == {"version": "1"}
    assert artifact_revision(cluster.get("gitrepository", "apps")) == first
    consumer = cluster.get("kustomization", "app")
    assert ready(consumer) == "True" and consumer["status"]["lastAppliedRevision"] == first

    opened = time.monotonic()
    at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    patch = f'{{"metadata":{{"annotations":{{"open.gate.fluxcd.io/requestedAt":"{at}"}}}}}}'
    cluster.plane.kubectl("patch", "gate", "freeze", "-n", ns, "--type=merge", "-p", patch)
    assert cluster.wait(lambda: cluster.data("app"), lambda d: d == {"version": "2"}, timeout=60) == {
        "version": "2"
    }
    REPORT["real Flux: a source's new commit lands after the open annotation"] = (
        f"{time.monotonic() - opened:.1f}s"
    )
    released = cluster.get("gitrepository", "apps")
    assert artifact_revision(released) == second
    assert condition(released, "Blocked").get("status") != "True"
