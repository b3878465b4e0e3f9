"""The controller's release at once, in process on a real API server with a controlled clock:
which objects get ``reconcile.fluxcd.io/requestedAt`` when a gate opens or a suspension ends,
and when the controller wakes for a suspendDuring window's end."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import yaml

from admission.core.base import names
from admission.kube.client import api_client
from admission.kube.controller import Controller
from tests.builders import gate
from tests.e2e.conftest import own_plane
from tests.polling import until

pytestmark = pytest.mark.e2e
NS = "release-e2e"


class Clock:
    def __init__(self, now: datetime):
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def flux_object(
    kind: str, name: str, annotations: dict | None = None, namespace: str = NS, labels: dict | None = None
) -> dict:
    api = {
        "Kustomization": "kustomize.toolkit.fluxcd.io/v1",
        "GitRepository": "source.toolkit.fluxcd.io/v1",
        "HelmRelease": "helm.toolkit.fluxcd.io/v2",
        "HelmChart": "source.toolkit.fluxcd.io/v1",
    }[kind]
    spec = {
        "Kustomization": {
            "interval": "10m",
            "path": "./",
            "prune": False,
            "sourceRef": {"kind": "GitRepository", "name": "none"},
        },
        "GitRepository": {"interval": "10m", "url": "https://example.com/x"},
        "HelmRelease": {
            "interval": "10m",
            "chart": {
                "spec": {
                    "chart": "podinfo",
                    "sourceRef": {"kind": "HelmRepository", "name": "charts", "namespace": NS},
                }
            },
        },
        "HelmChart": {
            "interval": "10m",
            "chart": "podinfo",
            "version": "*",
            "sourceRef": {"kind": "HelmRepository", "name": "charts"},
        },
    }[kind]
    meta = {"name": name, "namespace": namespace}
    if annotations:
        meta["annotations"] = annotations
    if labels:
        meta["labels"] = labels
    return {"apiVersion": api, "kind": kind, "metadata": meta, "spec": spec}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # Its own API server with no webhooks registered: the objects reference gates the shared
    # cluster's webhook (a gates directory) does not know, and this module judges the controller.
    yield from own_plane(tmp_path_factory.mktemp("release"))


@pytest.fixture(scope="module")
def world(cluster):
    cluster.kubectl("create", "namespace", NS, check=False)
    gated = {"gating.toolkit.fluxcd.io/gates": f"{NS}/freeze"}
    objects = [
        gate("freeze", NS, default="closed"),
        gate("other", NS, default="closed"),
        flux_object("Kustomization", "gated", gated),
        flux_object(
            "Kustomization", "two-gates", {"gating.toolkit.fluxcd.io/gates": f"{NS}/freeze,{NS}/other"}
        ),
        flux_object("Kustomization", "free"),
        flux_object("GitRepository", "gated-source", gated),
        flux_object("HelmRelease", "app", gated),
        # Generated for HelmRelease app (helm-controller's owner labels): inherits its gates.
        flux_object(
            "HelmChart", f"{NS}-app", labels={names.HELM_NAME_LABEL: "app", names.HELM_NAMESPACE_LABEL: NS}
        ),
        flux_object("Kustomization", "window", {"reconcile.fluxcd.io/suspendDuring": "30 14 * * *"}),
        flux_object("Kustomization", "paused", {"reconcile.fluxcd.io/suspended": "freeze"}),
    ]
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
    clock = Clock(datetime(2026, 11, 22, 14, 30, 30, tzinfo=UTC))
    controller = Controller(api_client(str(cluster.kubeconfig())), clock=clock)
    controller.store.start()
    controller.flux.start()
    try:
        assert controller.store.wait_synced(30) and controller.flux.wait_synced(30)
        until(lambda: controller.flux.get("Kustomization", NS, "paused"), bool)
        yield cluster, controller, clock
    finally:
        controller.stop()


def requested(cluster, kind: str, name: str) -> str:
    return cluster.kubectl(
        "get",
        kind.lower(),
        name,
        "-n",
        NS,
        "-o",
        r"jsonpath={.metadata.annotations.reconcile\.fluxcd\.io/requestedAt}",
    ).stdout


def test_opening_a_gate_asks_only_what_it_held_and_nothing_else_holds(world):
    cluster, controller, clock = world
    done = controller.request_reconciles(NS, "freeze", clock())
    # The gate is still closed in the cache: nothing is free yet.
    assert done == []
    cluster.kubectl(
        "annotate",
        "--overwrite",
        "gate",
        "freeze",
        "-n",
        NS,
        "open.gate.fluxcd.io/requestedAt=2026-11-22T14:30:00Z",
    )
    until(lambda: controller.store.index.lookup(NS, "freeze", clock()).open, bool)
    done = controller.request_reconciles(NS, "freeze", clock())
    assert sorted(done) == sorted(
        [
            f"Kustomization/{NS}/gated",
            f"GitRepository/{NS}/gated-source",
            f"HelmRelease/{NS}/app",
            f"HelmChart/{NS}/{NS}-app",
        ]
    )
    for kind, name in (
        ("Kustomization", "gated"),
        ("GitRepository", "gated-source"),
        ("HelmChart", f"{NS}-app"),
    ):
        assert requested(cluster, kind, name) == "2026-11-22T14:30:30.000000Z"
    assert requested(cluster, "Kustomization", "two-gates") == "", "still held by the other gate"
    assert requested(cluster, "Kustomization", "free") == "", "it references no gate"


def test_the_controller_wakes_when_a_suspend_window_ends_and_releases_what_it_held(world):
    cluster, controller, clock = world
    wake_at = controller.reconcile(clock())
    assert wake_at == datetime(2026, 11, 22, 14, 31, tzinfo=UTC), "the window's end"
    assert requested(cluster, "Kustomization", "window") == ""
    clock.now = wake_at
    controller.reconcile(clock())
    assert until(lambda: requested(cluster, "Kustomization", "window"), bool) == "2026-11-22T14:31:00.000000Z"
    assert requested(cluster, "Kustomization", "paused") == "", "still suspended"


def test_removing_the_suspended_annotation_releases_the_object(world):
    cluster, controller, clock = world
    controller.reconcile(clock())
    cluster.kubectl("annotate", "kustomization", "paused", "-n", NS, "reconcile.fluxcd.io/suspended-")
    until(
        lambda: controller.flux.get("Kustomization", NS, "paused"),
        lambda o: "reconcile.fluxcd.io/suspended" not in o["metadata"].get("annotations", {}),
    )
    controller.reconcile(clock())
    assert requested(cluster, "Kustomization", "paused") == clock().strftime("%Y-%m-%dT%H:%M:%S.%fZ")
