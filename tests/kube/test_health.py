"""The controller's /healthz and /readyz: on the address it is given (loopback by default), and
on the Pod IP in its Deployment, the address the kubelet probes."""

from __future__ import annotations

import http.client
from contextlib import contextmanager
from pathlib import Path

import yaml

from admission.cli.gate_admission import build_parser
from tests.polling import until
from tests.processes import BIN, Process, free_port

DEPLOYMENT = Path(__file__).resolve().parents[2] / "manifests" / "controller" / "deployment.yaml"


@contextmanager
def controller(tmp_path: Path, *extra: str):
    """`gate-admission controller` with an API server that never answers; its health port."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{free_port()}"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
            }
        )
    )
    port = free_port()
    proc = Process(
        [
            str(BIN / "gate-admission"),
            "controller",
            "--kubeconfig",
            str(kubeconfig),
            "--no-leader-elect",
            "--health-port",
            str(port),
            *extra,
        ],
        tmp_path / "controller.log",
    )
    try:
        yield proc, port
    finally:
        proc.stop()


def healthz(host: str, port: int) -> int | None:
    """/healthz's status at ``host``, or None when nothing listens there."""
    conn = http.client.HTTPConnection(host, port, timeout=2)
    try:
        conn.request("GET", "/healthz")
        return conn.getresponse().status
    except OSError:
        return None
    finally:
        conn.close()


def answered(proc: Process, host: str, port: int) -> int | None:
    """/healthz's status at ``host`` once the controller is up (None if it exited first)."""
    return until(lambda: healthz(host, port), lambda status: status == 200 or not proc.alive(), timeout=30)


def test_by_default_probes_are_answered_on_loopback_only(tmp_path):
    with controller(tmp_path) as (proc, port):
        assert answered(proc, "127.0.0.1", port) == 200, proc.log()
        assert healthz("127.0.0.2", port) is None  # another address of this host: not listened on


def test_health_address_binds_the_address_given_ipv4_or_ipv6(tmp_path):
    for number, (address, elsewhere) in enumerate((("127.0.0.2", "127.0.0.1"), ("::1", "127.0.0.1"))):
        (tmp_path / str(number)).mkdir()
        with controller(tmp_path / str(number), "--health-address", address) as (proc, port):
            assert answered(proc, address, port) == 200, proc.log()
            assert healthz(elsewhere, port) is None


def test_the_deployment_binds_the_pod_ip_the_kubelet_probes():
    container = yaml.safe_load(DEPLOYMENT.read_text())["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    # The kubelet expands $(POD_IP) in args; the probes go to the named port, on the Pod IP.
    args = [arg.replace("$(POD_IP)", "10.244.1.7") for arg in container["args"]]
    parsed = build_parser().parse_args(args)
    port = next(p for p in container["ports"] if p["name"] == "health")["containerPort"]
    assert parsed.health_address == "10.244.1.7" and parsed.health_port == port
    assert (
        container["readinessProbe"]["httpGet"]["port"]
        == container["livenessProbe"]["httpGet"]["port"]
        == "health"
    )


def test_an_address_it_cannot_listen_on_is_a_clear_error(tmp_path):
    with controller(tmp_path, "--health-address", "192.0.2.1") as (proc, _):  # TEST-NET-1: not this host's
        until(proc.alive, lambda alive: not alive, timeout=30)
        assert proc.proc.returncode == 2 and "cannot listen on --health-address 192.0.2.1" in proc.log(), (
            proc.log()
        )


def _thread_count(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/task").iterdir()))


def test_idle_connections_beyond_the_cap_cost_no_thread_and_probes_are_still_answered(tmp_path):
    """A client that opens connections and never writes on them (a scan, or an attack on the Pod
    IP): the controller's thread count stays where it was, and the kubelet's probe is answered."""
    import socket

    with controller(tmp_path) as (proc, port):
        assert answered(proc, "127.0.0.1", port) == 200, proc.log()
        before = _thread_count(proc.proc.pid)
        idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(200)]
        try:
            for _ in range(5):
                assert healthz("127.0.0.1", port) == 200
            # The controller's other threads come and go (its API client retries); a thread per
            # connection would be 200 more.
            assert _thread_count(proc.proc.pid) <= before + 16, "idle connections took threads"
        finally:
            for conn in idle:
                conn.close()


def test_a_connection_that_sends_no_request_is_closed_after_the_read_timeout():
    import socket
    import time

    from admission.kube.health import serve_health

    server = serve_health(0, lambda: (True, {}), read_timeout=0.5, max_connections=4)
    try:
        conn = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        conn.sendall(b"GET /healthz HTTP/1.1\r\n")  # and never the end of the head
        started = time.monotonic()
        assert conn.recv(100) == b""  # closed by the server, not answered
        assert time.monotonic() - started < 3
        conn.close()
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as other:
            other.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert other.recv(1000).startswith(b"HTTP/1.1 200 OK")
    finally:
        server.shutdown()
