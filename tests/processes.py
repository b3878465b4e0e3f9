"""Start and stop real processes for tests: free loopback ports, pids, polled readiness."""

from __future__ import annotations

import http.client
import json
import os
import resource
import signal
import socket
import ssl
import subprocess
import sys
import threading
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import orjson

from tests.polling import wait_for
from tests.procfs import children

BIN = Path(sys.executable).parent


class SilentPort:
    """A loopback port that counts the connections it accepts and closes each after ``hold``
    seconds without a byte of answer (0: at once): a server that never answers, for deadlines,
    and a count of who asked at all."""

    def __init__(self, hold: float = 0.0):
        self.hold, self.connections = hold, 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.connections += 1
            threading.Timer(self.hold, conn.close).start() if self.hold else conn.close()

    def kubeconfig(self, path: Path) -> str:
        port = self.sock.getsockname()[1]
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "c",
                    "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                    "users": [{"name": "u", "user": {"token": "t"}}],
                    "contexts": [
                        {"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "flux-system"}}
                    ],
                }
            )
        )
        return str(path)

    def close(self) -> None:
        self.stopped.set()
        self.thread.join()
        self.sock.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Process:
    """A child process in its own process group, logging to a file, stopped by its pid."""

    def __init__(
        self,
        args: list[str],
        log_path: Path,
        env: dict | None = None,
        cwd: Path | None = None,
        nofile: int | None = None,
    ):
        """``nofile``: the process's descriptor limit (RLIMIT_NOFILE, soft and hard), as `ulimit -n` sets it."""
        self.args, self.log_path = args, log_path
        self.log_file = open(log_path, "ab")
        limit = (
            None if nofile is None else partial(resource.setrlimit, resource.RLIMIT_NOFILE, (nofile, nofile))
        )
        self.proc = subprocess.Popen(
            args,
            stdout=self.log_file,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env={**os.environ, **(env or {})},
            start_new_session=True,
            preexec_fn=limit,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def terminate(self, timeout: float = 40.0) -> int | None:
        """SIGTERM to the main process only, as the kubelet does to a container's PID 1."""
        if self.alive():
            os.kill(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout)
        return self.stop()

    def children(self) -> list[int]:
        """Pids whose parent is this process (gunicorn's workers)."""
        return children(self.proc.pid)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int | None:
        if self.alive():
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.log_file.close()
        return self.proc.returncode


class GateServer(Process):
    """``gate-admission serve`` on a free loopback port with certificates in ``cert_dir``."""

    def __init__(
        self,
        tmp: Path,
        *extra: str,
        port: int | None = None,
        cert_dir: Path | None = None,
        env: dict | None = None,
        nofile: int | None = None,
    ):
        self.port = port or free_port()
        self.cert_dir = cert_dir or tmp / "certs"
        args = [
            str(BIN / "gate-admission"),
            "serve",
            "--address",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--cert-dir",
            str(self.cert_dir),
            "--generate-certs",
            *extra,
        ]
        super().__init__(args, tmp / f"gate-admission-{self.port}.log", env=env, nofile=nofile)
        self.url = f"https://127.0.0.1:{self.port}"

    def tls(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.cert_dir / "ca.crt"))

    def connection(self, timeout: float = 10.0) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=self.tls(), timeout=timeout)

    def metrics(self) -> dict[str, float]:
        """One scrape of /metrics: each sample (name and labels, as written) and its value."""
        conn = self.connection()
        try:
            conn.request("GET", "/metrics")
            text = conn.getresponse().read().decode()
        finally:
            conn.close()
        return {
            name: float(value)
            for name, _, value in (
                line.rpartition(" ") for line in text.splitlines() if line and not line.startswith("#")
            )
        }

    def request(self, method: str, path: str, body: bytes | None = None, conn=None) -> tuple[int, dict]:
        own = conn is None
        conn = conn or self.connection()
        try:
            conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, orjson.loads(resp.read() or b"{}")
        finally:
            if own:
                conn.close()

    def wait_ready(self, timeout: float = 30.0) -> None:
        def ready():
            if not self.alive():
                raise RuntimeError(f"server exited: {self.log()[-2000:]}")
            return self.request("GET", "/readyz")[0] == 200

        wait_for(ready, timeout, f"gate-admission on port {self.port}")


@contextmanager
def serving_gates_dir(tmp: Path, gate_objects: list[dict], *args: str, nofile: int | None = None):
    """`gate-admission serve --gates-dir tmp/gates` with these gates in gates.yaml, ready; stopped after."""
    from tests.conftest import write_gates

    gates = tmp / "gates"
    gates.mkdir()
    write_gates(gates, gate_objects)
    server = GateServer(tmp, "--gates-dir", str(gates), *args, nofile=nofile)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()
