"""The real Flux controllers (source-controller and kustomize-controller, built from their Go
modules, as host processes) held and released by our webhook and controller running as Pods in
the real cluster: a new commit waits behind a closed gate and lands once `kubectl gate open`."""

from __future__ import annotations

import pytest

from tests.cluster.conftest import FIGURES
from tests.realflux import conftest as realflux
from tests.realflux.conftest import Cluster, condition, ready
from tests.realflux.flux import FluxControllers, flux_dir
from tests.realflux.test_kustomization import gate, git_repository, kustomization, manifests

git = realflux.git  # the real-Flux tier's Git server fixture


@pytest.fixture(scope="module")
def flux(cluster, installed, tmp_path_factory):
    controllers = FluxControllers(cluster, flux_dir(), tmp_path_factory.mktemp("flux"))
    try:
        yield controllers.start("source-controller", "kustomize-controller")
    finally:
        controllers.stop()


def test_a_commit_waits_behind_the_in_cluster_webhook_and_lands_when_the_gate_opens(cluster, flux, git):
    ns = "cluster-flux"
    cluster.kubectl("create", "namespace", ns)
    user = Cluster(cluster, ns)
    repo = git.repository(ns)
    first = repo.commit(manifests(ns, "1"), "version 1")
    user.apply(
        gate("freeze", ns),
        git_repository("apps", repo.url),
        kustomization("gated", "./a", "apps", {"gating.toolkit.fluxcd.io/gates": "freeze"}),
        kustomization("free", "./b", "apps"),
    )
    seen = user.wait(
        lambda: (user.data("app-a"), user.data("app-b")),
        lambda d: d == ({"version": "1"}, {"version": "1"}),
        timeout=120,
    )
    assert seen == ({"version": "1"}, {"version": "1"})

    assert user.gate("close", "freeze", "-n", ns, "-m", "release freeze").returncode == 0
    second = repo.commit(manifests(ns, "2"), "version 2")
    assert user.wait(lambda: user.data("app-b"), lambda d: d == {"version": "2"}, timeout=120) == {
        "version": "2"
    }
    held = user.wait(
        lambda: user.get("kustomization", "gated"),
        lambda k: ready(k) == "False" and "freeze" in condition(k, "Ready").get("message", ""),
    )
    assert ready(held) == "False", held.get("status")
    assert held["status"]["lastAppliedRevision"] == first
    assert user.data("app-a") == {"version": "1"}

    assert user.gate("open", "freeze", "-n", ns, "-m", "approved").returncode == 0
    landed = user.wait(lambda: user.data("app-a"), lambda d: d == {"version": "2"}, timeout=120)
    assert landed == {"version": "2"}, user.get("kustomization", "gated").get("status")
    released = user.wait(lambda: user.get("kustomization", "gated"), lambda k: ready(k) == "True")
    assert released["status"]["lastAppliedRevision"] == second
    FIGURES.append(
        "real Flux: a commit held by the in-cluster webhook, released by the in-cluster controller"
    )
