"""Faults on a real API server, each counting the writes that failed."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import orjson
import pytest
import yaml
from kubernetes import client

from admission.kube.client import api_client
from tests.builders import changed, flux, gate, request, review
from tests.conftest import REPORT
from tests.doubles.balancer import Balancer
from tests.e2e.conftest import own_plane, register_webhooks, wait_until_webhooks_answer
from tests.e2e.controlplane import ALICE, GATE_ADMISSION
from tests.e2e.manifests import kustomization, now_rfc3339
from tests.polling import until
from tests.processes import GateServer

pytestmark = pytest.mark.e2e
FAKETIME = next(
    (
        p
        for p in (
            "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
            "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
        )
        if os.path.exists(p)
    ),
    None,
)


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    yield from own_plane(tmp_path_factory.mktemp("faults"))


class Writer:
    """Writes through the API server (so through our webhooks) until stopped; counts failures."""

    def __init__(self, plane, name: str):
        self.api = client.CustomObjectsApi(api_client(str(plane.kubeconfig(ALICE))))
        self.name, self.done, self.failures = name, 0, []
        # It references an open gate: the API server sends only such objects' writes to us
        # (matchConditions), and each of these must go through the webhook.
        plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(gate("writes", default="opened")))
        created = until(
            lambda: plane.kubectl(
                "apply",
                "-f",
                "-",
                input=kustomization(name, gates="flux-system/writes"),
                user=ALICE,
                check=False,
            ),
            lambda r: r.returncode == 0,
        )
        assert created.returncode == 0, (
            created.stderr
        )  # the server's cache sees the new gate at once, or soon
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.api.patch_namespaced_custom_object(
                    "kustomize.toolkit.fluxcd.io",
                    "v1",
                    "apps",
                    "kustomizations",
                    self.name,
                    {"metadata": {"labels": {"n": str(self.done)}}},
                )
                self.done += 1
            except Exception as err:  # noqa: BLE001 (each one is a write a user would have seen fail)
                self.failures.append(f"{type(err).__name__}: {getattr(err, 'body', err)}"[:300])

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(30)

    def flows(self, more: int = 50, timeout: float = 30) -> None:
        start = self.done
        until(lambda: self.done, lambda n: n >= start + more, timeout=timeout)
        assert self.done >= start + more, f"writes stalled at {self.done}: {self.failures[-3:]}"


def cluster_server(
    plane,
    tmp: Path,
    *extra: str,
    cert_dir: Path | None = None,
    env: dict | None = None,
    port: int | None = None,
) -> GateServer:
    tmp.mkdir(parents=True, exist_ok=True)
    server = GateServer(
        tmp,
        "--kubeconfig",
        str(plane.kubeconfig(GATE_ADMISSION)),
        "--event-period",
        "0",
        *extra,
        cert_dir=cert_dir,
        env=env,
        port=port,
    )
    server.wait_ready()
    return server


def test_a_killed_worker(plane, tmp_path):
    server = cluster_server(plane, tmp_path)
    try:
        register_webhooks(plane, server)
        wait_until_webhooks_answer(plane, server)
        with Writer(plane, "kill-worker") as writer:
            writer.flows()
            victim = server.children()[0]
            os.kill(victim, signal.SIGKILL)
            until(server.children, lambda pids: len(pids) == 2 and victim not in pids, timeout=30)
            writer.flows(100)
        REPORT["a gunicorn worker SIGKILLed while writes flow"] = (
            f"{len(writer.failures)} failed of {writer.done + len(writer.failures)} writes"
        )
        assert server.alive() and len(server.children()) == 2
        # A write in flight on the killed worker can fail (failurePolicy Fail); no more than that.
        assert len(writer.failures) <= 4, writer.failures
    finally:
        server.stop()


def test_sigterm_drains_two_replicas_behind_a_balancer_without_losing_a_write(plane, tmp_path):
    certs = tmp_path / "certs"
    replicas = [
        cluster_server(plane, tmp_path / "a", cert_dir=certs),
        cluster_server(plane, tmp_path / "b", cert_dir=certs),
    ]
    balancer = Balancer([r.port for r in replicas])
    try:
        register_webhooks(plane, replicas[0], port=balancer.port)
        wait_until_webhooks_answer(plane, replicas[0])
        with Writer(plane, "rolling") as writer:
            writer.flows()
            for i in range(2):  # a rolling restart: each replica in turn
                old = replicas[i]
                old.terminate()
                assert old.proc.returncode == 0, old.log()[-1500:]
                writer.flows()
                replicas[i] = cluster_server(plane, tmp_path / f"{i}-new", cert_dir=certs, port=old.port)
                writer.flows()
        REPORT["two replicas restarted in turn with SIGTERM behind a balancer"] = (
            f"{len(writer.failures)} failed of {writer.done + len(writer.failures)} writes"
        )
        assert writer.failures == [], writer.failures[:5]
        assert all(balancer.connections[r.port] > 0 for r in replicas)
    finally:
        balancer.stop()
        for replica in replicas:
            replica.stop()


def validate(server, body: bytes) -> dict:
    return server.request("POST", "/validate", body)[1]["response"]


@pytest.mark.skipif(FAKETIME is None, reason="needs Debian's faketime (hack/test.sh installs it)")
def test_the_clock_jumping_forward_across_a_window(plane, tmp_path):
    clock = tmp_path / "clock"
    clock.write_text("+0\n")
    # libfaketime 0.9.10 cannot leave the monotonic clock alone without breaking Python's
    # sleep (EINVAL from clock_nanosleep), so both clocks jump. A real jump leaves the
    # monotonic clock alone; this one may make gunicorn think a worker's heartbeat is two
    # hours old and replace it, so the reviews after the jump are polled until one answers
    # from a synced cache.
    env = {"LD_PRELOAD": FAKETIME, "FAKETIME_TIMESTAMP_FILE": str(clock), "FAKETIME_NO_CACHE": "1"}
    plane.kubectl(
        "apply",
        "-f",
        "-",
        input=yaml.safe_dump(
            gate(
                "jump",
                default="closed",
                window="1h",
                annotations={"open.gate.fluxcd.io/requestedAt": now_rfc3339()},
            )
        ),
    )
    server = cluster_server(plane, tmp_path, env=env)
    try:
        obj = flux(gates="flux-system/jump")
        body = orjson.dumps(review(request("UPDATE", changed(obj, path="./v2"), obj)))
        assert until(lambda: validate(server, body), lambda r: r["allowed"])["allowed"] is True
        clock.write_text("+2h\n")  # the window ends while the server runs

        def verdict():
            try:
                return validate(server, body)
            except OSError:  # a worker being replaced
                return {"allowed": None, "status": {"message": ""}}

        after = until(
            verdict,
            lambda r: "(Gate closed by default)" in r.get("status", {}).get("message", ""),
            timeout=30,
        )
        assert after["allowed"] is False
        assert "gate 'flux-system/jump' is closed (Gate closed by default)" in after["status"]["message"]
        REPORT["wall clock jumped 2h forward across a 1h window"] = "the gate closed at the next review"
    finally:
        server.stop()


def test_a_gate_deleted_while_referenced_closes_with_a_reason(plane, tmp_path):
    server = cluster_server(plane, tmp_path)
    try:
        register_webhooks(plane, server)
        wait_until_webhooks_answer(plane, server)
        plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(gate("ephemeral")))
        change = kustomization("orphan", gates="flux-system/ephemeral")
        assert (
            until(
                lambda: plane.kubectl("apply", "-f", "-", input=change, user=ALICE, check=False),
                lambda r: r.returncode == 0,
            ).returncode
            == 0
        )
        plane.kubectl("delete", "gate", "ephemeral", "-n", "flux-system")
        result = until(
            lambda: plane.kubectl(
                "apply",
                "-f",
                "-",
                input=kustomization("orphan", gates="flux-system/ephemeral", path="./v2"),
                user=ALICE,
                check=False,
            ),
            lambda r: " is held: " in r.stderr,
        )
        assert "gate 'flux-system/ephemeral' is closed (Gate not found)" in result.stderr
    finally:
        server.stop()


def test_reviews_fail_safe_within_stale_after_of_losing_the_api_server(plane, tmp_path):
    """Every review after --stale-after + 1 s without the API server is denied "gate state
    unknown", and /readyz stays 503, until the API server is back; reconnect attempts do not
    restart the clock (staleness counts from the last proof)."""
    stale_after = 3.0
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(gate("stale-open")))
    server = cluster_server(plane, tmp_path, "--stale-after", str(stale_after))
    obj = flux(gates="flux-system/stale-open")
    body = orjson.dumps(review(request("UPDATE", changed(obj, path="./v2"), obj)))
    try:
        assert until(lambda: validate(server, body), lambda r: r["allowed"])["allowed"] is True
        plane.stop_apiserver()
        killed = time.monotonic()
        seen = []

        def observe():
            verdict = validate(server, body)
            ready = server.request("GET", "/readyz")[0]
            seen.append(
                (
                    time.monotonic() - killed,
                    verdict["allowed"],
                    verdict.get("status", {}).get("message", ""),
                    ready,
                )
            )
            return seen[-1][0]

        # Watch the first 15 s of the outage: reconnect attempts back off 0.2 s, 0.4 s, ... 6.4 s.
        until(observe, lambda elapsed: elapsed > 15, timeout=40, interval=0.05)
        late = [s for s in seen if s[0] > stale_after + 1]
        assert late, seen
        wrong = [s for s in late if s[1] or "gate state unknown" not in s[2] or s[3] != 503]
        assert not wrong, f"answers after {stale_after + 1}s without the API server: {wrong[:5]}"
        REPORT["API server killed, --stale-after 3"] = (
            f"first 'gate state unknown' after {min(s[0] for s in seen if not s[1]):.1f}s; "
            f"{len(late)} reviews after {stale_after + 1:.0f}s, all denied"
        )
    finally:
        if not plane.apiserver.alive():
            plane.start_apiserver()
    try:
        # Each worker reconnects on its own backoff: poll until every answer says it is back.
        status = until(lambda: server.request("GET", "/readyz")[0], lambda code: code == 200, timeout=60)
        assert status == 200
        verdict = until(lambda: validate(server, body), lambda r: r["allowed"], timeout=60)
        assert verdict["allowed"] is True, verdict
    finally:
        server.stop()
