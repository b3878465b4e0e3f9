"""The real `gate-admission serve`: gunicorn, gthread workers, TLS from generated certificates."""

from __future__ import annotations

import socket
import ssl
import subprocess

import orjson
import pytest
from cryptography import x509

from admission.webhook.app import MAX_BODY
from tests.builders import FLUX_USER, changed, flux, gate, request, review
from tests.conftest import FIXTURES, write_gates
from tests.polling import until
from tests.processes import BIN, GateServer, serving_gates_dir
from tests.procfs import listening_ports


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with serving_gates_dir(
        tmp_path_factory.mktemp("serve"),
        [gate("sre-approval", default="closed"), gate("qa-approval")],
        "--workers",
        "2",
        "--threads",
        "4",
    ) as srv:
        yield srv


KS = flux(gates="flux-system/sre-approval")


def test_reviews_over_https_verified_against_the_generated_ca(server):
    status, out = server.request(
        "POST", "/validate", orjson.dumps(review(request("UPDATE", changed(KS, path="./b"), KS)))
    )
    assert status == 200
    assert out["response"]["allowed"] is False
    assert "gate 'flux-system/sre-approval' is closed" in out["response"]["status"]["message"]


def test_certificate_names_the_service_and_loopback(server):
    cert = x509.load_pem_x509_certificate((server.cert_dir / "tls.crt").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "gate-admission.gate-admission-system.svc" in sans.get_values_for_type(x509.DNSName)
    assert "localhost" in sans.get_values_for_type(x509.DNSName)
    with socket.create_connection(("127.0.0.1", server.port)) as raw:
        with server.tls().wrap_socket(raw, server_hostname="gate-admission.gate-admission-system.svc") as tls:
            assert tls.version() in ("TLSv1.2", "TLSv1.3")


def test_keep_alive_serves_many_reviews_on_one_connection(server):
    conn = server.connection()
    try:
        for path in sorted(FIXTURES.glob("*-validate-*.json"))[:20] if FIXTURES.is_dir() else []:
            status, out = server.request("POST", "/validate", path.read_bytes(), conn=conn)
            assert (
                status == 200 and out["response"]["uid"] == orjson.loads(path.read_bytes())["request"]["uid"]
            )
        status, _ = server.request("GET", "/healthz", conn=conn)
        assert status == 200
    finally:
        conn.close()


def test_malformed_and_oversized_bodies_over_the_wire(server):
    assert server.request("POST", "/validate", b"{not json")[0] == 400
    # The limit is checked on Content-Length, before the body is read.
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
        with server.tls().wrap_socket(raw, server_hostname="localhost") as tls:
            tls.sendall(
                b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % (MAX_BODY + 1) + b"x" * 1024
            )
            head = b""
            while b'"}' not in head:
                chunk = tls.recv(4096)
                assert chunk, f"connection closed after {head!r}"
                head += chunk
    assert head.startswith(b"HTTP/1.1 413") and b'{"error":' in head
    # The server is still answering after both.
    assert (
        server.request(
            "POST",
            "/mutate",
            orjson.dumps(review(request("UPDATE", KS, KS, sub_resource="status", user=FLUX_USER))),
        )[0]
        == 200
    )


def test_plain_http_is_not_served(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            data = sock.recv(4096)
        except ConnectionResetError:  # the failed handshake closes the connection
            data = b""
    assert b"HTTP/1.1 200" not in data


def test_tls_older_than_1_2_is_refused(server):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(str(server.cert_dir / "ca.crt"))
    context.maximum_version = ssl.TLSVersion.TLSv1_1
    try:
        context.set_ciphers("ALL:@SECLEVEL=0")
    except ssl.SSLError:
        pass
    with pytest.raises((ssl.SSLError, ConnectionResetError)):
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw:
            with context.wrap_socket(raw, server_hostname="localhost"):
                pass


def test_serve_refuses_to_start_without_certificates(tmp_path):
    result = subprocess.run(
        [
            str(BIN / "gate-admission"),
            "serve",
            "--cert-dir",
            str(tmp_path / "none"),
            "--gates-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2 and "TLS is required" in result.stderr
    assert [orjson.loads(line)["level"] for line in result.stderr.splitlines()] == ["error"]


def test_a_service_link_in_the_port_variable_is_a_usage_error_not_a_crash(tmp_path):
    """Kubernetes sets GATE_ADMISSION_PORT=tcp://IP:443 in every Pod of a namespace with a Service
    named gate-admission (unless enableServiceLinks is false): the certificate Job and the
    controller must still start, and `serve` must say what is wrong."""
    env = {"PATH": str(BIN), "GATE_ADMISSION_PORT": "tcp://10.96.90.173:443"}
    other = subprocess.run(
        [str(BIN / "gate-admission"), "certs", "--help"], capture_output=True, text=True, timeout=30, env=env
    )
    assert other.returncode == 0, other.stderr
    served = subprocess.run(
        [str(BIN / "gate-admission"), "serve", "--gates-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
    )
    assert served.returncode == 2 and "Traceback" not in served.stderr
    assert "'tcp://10.96.90.173:443' is not a port number" in served.stderr
    assert "enableServiceLinks: false" in served.stderr


def test_certs_says_why_the_api_server_could_not_be_reached(tmp_path):
    """The certificate Job's log, when the API server is not reachable yet (a Pod network not
    ready): one line that says so, not a traceback; the Job retries."""
    from tests.processes import free_port

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(f"""apiVersion: v1
kind: Config
current-context: c
clusters: [{{name: c, cluster: {{server: "https://127.0.0.1:{free_port()}", insecure-skip-tls-verify: true}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: c, context: {{cluster: c, user: u}}}}]
""")
    result = subprocess.run(
        [
            str(BIN / "gate-admission"),
            "certs",
            "--secret",
            "gate-admission-tls",
            "--inject",
            "--kubeconfig",
            str(kubeconfig),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "gate-admission certs: the API server call failed: " in result.stderr
    assert "Connection refused" in result.stderr or "ConnectionRefused" in result.stderr, result.stderr


def test_every_line_the_server_writes_is_json_from_the_first(tmp_path):
    # --generate-certs writes new certificates: the first line says so, as JSON too.
    with serving_gates_dir(tmp_path, [gate("g")], "--workers", "1") as srv:
        assert srv.request("GET", "/healthz")[0] == 200
    lines = srv.log().splitlines()
    assert lines, "the server wrote nothing"
    entries = []
    for line in lines:
        try:
            entries.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            pytest.fail(f"not a JSON line: {line!r}")
    assert entries[0]["msg"] == "serving certificate written", entries[0]


def test_metrics_add_up_across_workers(server):
    def validated_total() -> float:
        return sum(
            value
            for name, value in server.metrics().items()
            if name.startswith("gate_admission_reviews_total{") and 'webhook="validate"' in name
        )

    before = validated_total()
    body = orjson.dumps(review(request("CREATE", KS)))
    for _ in range(40):  # a new connection each time, so both workers answer some
        assert server.request("POST", "/validate", body)[0] == 200
    totals = {validated_total() for _ in range(6)}
    assert totals == {before + 40}, f"scrapes disagree or miss a worker: {totals}"


@pytest.mark.parametrize(
    "flag, accepted", [("-tls1", False), ("-tls1_1", False), ("-tls1_2", True), ("-tls1_3", True)]
)
def test_openssl_s_client_sees_tls_1_2_or_newer_only(server, flag, accepted):
    result = subprocess.run(
        [
            "openssl",
            "s_client",
            "-connect",
            f"127.0.0.1:{server.port}",
            flag,
            "-CAfile",
            str(server.cert_dir / "ca.crt"),
            "-verify_return_error",
            "-brief",
        ],
        input="",
        capture_output=True,
        text=True,
        timeout=30,
    )
    if accepted:
        assert result.returncode == 0 and "Verification: OK" in result.stderr, result.stderr
    else:
        assert result.returncode != 0, result.stderr


def test_the_only_listener_is_the_tls_port(server):
    pids = [server.pid, *server.children()]
    for pid in pids:
        assert listening_ports(pid) <= {server.port}, f"pid {pid} listens on {listening_ports(pid)}"
    # Every worker listens on its own SO_REUSEPORT socket on that port.
    assert all(server.port in listening_ports(pid) for pid in server.children())


def test_a_gates_file_half_written_by_a_pausing_writer_never_opens_its_gate(tmp_path):
    gates = tmp_path / "gates"
    gates.mkdir()
    path = write_gates(gates, [gate("bypass-signoff", default="closed"), gate("other")], "team.yaml")
    full = path.read_text()
    srv = GateServer(tmp_path, "--gates-dir", str(gates), "--workers", "1")
    held = flux(gates="flux-system/bypass-signoff")
    body = orjson.dumps(review(request("UPDATE", changed(held, path="./b"), held)))
    try:
        srv.wait_ready()
        with open(path, "w") as writer:  # in place: truncated, half written, then a long pause
            writer.write(full[: full.index("default: closed")])
            writer.flush()
            detail = until(lambda: srv.request("GET", "/readyz")[1], lambda d: "being_written" in d)
            if "being_written" not in detail:
                pytest.skip("no inotify here: only the hold-still rule applies")
            # Another file changes meanwhile: once the server has read it, it has polled the
            # directory with the half-written file in it.
            write_gates(gates, [gate("canary", default="closed")], "canary.yaml")
            canary = flux(gates="flux-system/canary")
            canary_body = orjson.dumps(review(request("UPDATE", changed(canary, path="./b"), canary)))
            until(
                lambda: srv.request("POST", "/validate", canary_body)[1]["response"]["status"]["message"],
                lambda m: "NotFound" not in m and "not found" not in m,
            )
            status, out = srv.request("POST", "/validate", body)
            assert status == 200 and out["response"]["allowed"] is False, out
            writer.write(full[full.index("default: closed") :])
        until(lambda: srv.request("GET", "/readyz")[1], lambda d: "being_written" not in d)
        status, out = srv.request("POST", "/validate", body)
        assert (
            out["response"]["allowed"] is False and "bypass-signoff" in out["response"]["status"]["message"]
        )
    finally:
        srv.stop()


def test_a_malformed_gates_file_is_a_reported_problem_not_a_worker_that_cannot_boot(tmp_path):
    import os
    import signal

    gates = tmp_path / "gates"
    gates.mkdir()
    (gates / "list.yaml").write_text("apiVersion: v1\nkind: List\nitems: 5\n")
    write_gates(gates, [gate("sre-approval", default="closed"), gate("qa-approval")])
    srv = GateServer(tmp_path, "--gates-dir", str(gates), "--workers", "1")
    qa = flux(gates="flux-system/qa-approval")
    body = orjson.dumps(review(request("UPDATE", changed(qa, path="./b"), qa)))
    try:
        srv.wait_ready()  # the worker failed to boot, and the server exited
        status, detail = srv.request("GET", "/readyz")
        assert status == 200 and "list.yaml is broken" in orjson.dumps(detail).decode()
        assert srv.request("POST", "/validate", body)[1]["response"]["allowed"] is True
        # A worker that restarts reads the file again at boot: the master goes on.
        [worker] = srv.children()
        os.kill(worker, signal.SIGKILL)
        until(srv.children, lambda pids: pids and worker not in pids, timeout=30)
        srv.wait_ready()
        # And the other files are still read: closing a gate takes effect.
        write_gates(gates, [gate("sre-approval", default="closed"), gate("qa-approval", default="closed")])
        out = until(
            lambda: srv.request("POST", "/validate", body)[1], lambda o: o["response"]["allowed"] is False
        )
        assert "qa-approval' is closed" in out["response"]["status"]["message"]
        assert srv.alive()
    finally:
        srv.stop()
