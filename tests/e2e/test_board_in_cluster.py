"""`serve --board` on the cluster store: the read-only board at /board over the webhook's TLS,
showing what the server reads from a real kube-apiserver as its own identity (its Gates, and
the Flux objects its cache watches), and refusing every action."""

from __future__ import annotations

from datetime import timedelta

import pytest
import yaml

from admission.clock import utcnow
from admission.core.base import names
from tests.builders import flux, gate
from tests.e2e.conftest import start_server, until
from tests.e2e.controlplane import GATE_ADMISSION

pytestmark = pytest.mark.e2e

NS = "flux-system"


@pytest.fixture(scope="module")
def board_server(cluster, tmp_path_factory):
    """Our server with --board, reading the cluster; not registered as the webhooks (the board
    needs none, and the session's server stays the one the API server calls)."""
    kubeconfig = str(cluster.kubeconfig(GATE_ADMISSION))
    server = start_server(
        tmp_path_factory.mktemp("board-server"), None, "--kubeconfig", kubeconfig, "--board"
    )
    try:
        yield server
    finally:
        server.stop()


def get(server, path: str, method: str = "GET") -> tuple[int, str]:
    conn = server.connection()
    try:
        conn.request(method, path)
        answer = conn.getresponse()
        return answer.status, answer.read().decode()
    finally:
        conn.close()


def apply(cluster, *objects: dict) -> None:
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))


def test_a_gate_created_in_the_cluster_shows_on_the_board(cluster, board_server):
    suspended = flux(
        "GitRepository",
        "board-podinfo",
        NS,
        # A window that is not open now: a create while it is would be held (the webhook's rule).
        annotations={names.SUSPEND_DURING_ANNOTATION: f"* {(utcnow() + timedelta(hours=3)).hour} * * *"},
        spec={"interval": "1m", "url": "https://example.org/podinfo.git", "ref": {"branch": "main"}},
    )
    apply(cluster, gate("board-freeze", NS, default="closed"), suspended)
    status, page = until(
        lambda: get(board_server, "/board"),
        lambda got: got[0] == 200 and "flux-system/board-freeze" in got[1],
        timeout=30,
    )
    assert status == 200 and "flux-system/board-freeze" in page, page[-2000:]
    assert "Read-only" in page and 'method="post"' not in page
    # The worker's Flux object cache reaches the page: the source's suspendDuring timeline.
    fragment = until(
        lambda: get(board_server, "/board/fragment")[1],
        lambda fragment: "GitRepository/flux-system/board-podinfo" in fragment,
        timeout=30,
    )
    assert "GitRepository/flux-system/board-podinfo" in fragment, fragment[-2000:]
    apply(cluster, gate("board-later", NS, default="opened"))  # one the server watches arrive
    fragment = until(
        lambda: get(board_server, "/board/fragment")[1],
        lambda fragment: "flux-system/board-later" in fragment,
        timeout=30,
    )
    assert "flux-system/board-later" in fragment


def test_the_board_in_the_cluster_changes_nothing(cluster, board_server):
    apply(cluster, gate("board-held", NS, default="closed"))
    page = until(
        lambda: get(board_server, "/board")[1], lambda page: "flux-system/board-held" in page, timeout=30
    )
    assert "flux-system/board-held" in page
    for action in ("open", "approve"):
        status, body = get(board_server, f"/board/actions/{action}", method="POST")
        assert status == 403 and "refused" in body
    stored = cluster.kubectl("get", "gate", "board-held", "-n", NS, "-o", "json").stdout
    assert names.OPEN_ANNOTATION not in stored
