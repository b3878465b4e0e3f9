"""Uninstalled as it was installed (`kubectl delete -k manifests/`): nothing of ours is left to
block Flux or the API server, and installing again works. Runs after the other cluster tests."""

from __future__ import annotations

import pytest

from tests.cluster.conftest import NS, no_webhook_pod, wait_installed
from tests.e2e.controlplane import ROOT
from tests.e2e.manifests import kustomization
from tests.polling import until

# What docs/operations.md ("Uninstall") gives for an emergency: every Pod gone, writes of gated
# objects failing, and the webhooks must go now.
EMERGENCY = (
    "delete",
    "validatingwebhookconfiguration,mutatingwebhookconfiguration",
    "-l",
    "app.kubernetes.io/name=gate-admission",
)


def ours(cluster) -> str:
    return cluster.kubectl(
        "get",
        "validatingwebhookconfigurations,mutatingwebhookconfigurations,crd,namespace",
        "-o",
        "name",
        check=False,
    ).stdout


def test_delete_k_leaves_nothing_behind_and_reinstalling_works(cluster, installed):
    deleted = cluster.kubectl(
        "delete", "-k", str(ROOT / "manifests"), "--timeout=180s", check=False, timeout=240
    )
    assert deleted.returncode == 0, deleted.stderr
    left = until(
        lambda: ours(cluster),
        lambda out: "gate-admission" not in out and "gating.toolkit" not in out,
        timeout=120,
        interval=1,
    )
    assert "gate-admission" not in left and "gating.toolkit" not in left, left
    # Flux objects that referenced gates are written freely again (no webhook, no stuck finalizer).
    free = kustomization("after-uninstall", gates="flux-system/install-freeze", path="./anything")
    written = cluster.kubectl("apply", "-f", "-", input=free, check=False)
    assert written.returncode == 0, written.stderr

    again = cluster.kubectl("apply", "-k", str(ROOT / "manifests"), check=False, timeout=120)
    assert again.returncode == 0, again.stderr
    wait_installed(cluster)


def test_the_emergency_one_liner_removes_the_webhooks_when_no_pod_runs(cluster, installed):
    cluster.kubectl("scale", "-n", NS, "deployment/gate-admission", "--replicas=0")
    assert until(lambda: no_webhook_pod(cluster), bool, timeout=120, interval=1)
    gated = kustomization("emergency", gates="flux-system/nobody-answers", path="./x")
    refused = until(
        lambda: cluster.kubectl("apply", "-f", "-", input=gated, check=False),
        lambda r: r.returncode != 0,
        timeout=120,
        interval=1,
    )
    assert "failed calling webhook" in refused.stderr, refused.stderr
    cluster.kubectl(*EMERGENCY)
    assert "webhookconfiguration" not in ours(cluster)
    written = cluster.kubectl("apply", "-f", "-", input=gated, check=False)
    assert written.returncode == 0, written.stderr
    # Reinstalling restores them.
    assert cluster.kubectl("apply", "-k", str(ROOT / "manifests"), check=False, timeout=120).returncode == 0
    wait_installed(cluster)
    assert "validatingwebhookconfiguration.admissionregistration.k8s.io/gate-admission" in ours(cluster)


pytestmark = pytest.mark.cluster
