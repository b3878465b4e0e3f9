"""The API servers the tiers start: our own control plane turns the `kubernetes` Service's
endpoint reconciler off (Kubernetes 1.37 refuses its loopback address and exits), while the
real-cluster tier's, which Pods reach through that Service, keeps it."""

from __future__ import annotations

from pathlib import Path

from tests.cluster.node import GATEWAY, HostCluster
from tests.e2e.controlplane import ControlPlane


def test_our_control_plane_keeps_no_endpoints_for_its_loopback_address(tmp_path: Path):
    (tmp_path / "kubectl").touch()  # found next to the API server: no kubectl on PATH needed
    args = ControlPlane(tmp_path, tmp_path).apiserver_args()
    assert "--advertise-address=127.0.0.1" in args
    assert "--endpoint-reconciler-type=none" in args


def test_the_real_cluster_keeps_the_kubernetes_service_endpoint(tmp_path: Path):
    (tmp_path / "kubectl").touch()
    args = HostCluster(tmp_path, tmp_path, tmp_path).apiserver_args()
    assert f"--advertise-address={GATEWAY}" in args
    assert not [a for a in args if a.startswith("--endpoint-reconciler-type")]
