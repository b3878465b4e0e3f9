"""``gate-admission serve``: the Flask app under gunicorn, threaded workers, TLS only."""

from __future__ import annotations

import errno
import logging
import socket
import sys
from collections.abc import Callable
from typing import Any, Protocol

from flask import Flask
from gunicorn import glogging
from gunicorn.app.base import BaseApplication
from gunicorn.arbiter import Arbiter
from gunicorn.config import Config

from admission.transport.tls import ReloadingContext
from admission.transport.worker import CLIENT_CONNECTIONS, PreReadWorker

# The API server's webhook client keeps idle connections for 90 s. A server that
# closes them sooner races the client's next request on that connection, and a
# POST that loses the race fails the admission call. So idle longer than 90 s.
KEEPALIVE_SECONDS = 120


class GunicornLogger(glogging.Logger):
    """gunicorn's own messages as our JSON lines, and no access log: every gated review has a
    decision line already, and building an access entry per request costs ~6% of a review."""

    def _compute_access_log_enabled(self) -> bool:
        return False

    def info(self, msg: object, *args: object, **kwargs: Any) -> None:
        # With reuse_port the master holds no socket (each worker binds its own), so gunicorn's
        # "Listening at: %s (%s)" names none: say the address the workers listen on.
        if str(msg).startswith("Listening at:") and args and not args[0]:
            args = (", ".join(f"https://{b}" for b in self.cfg.bind), *args[1:])
        super().info(msg, *args, **kwargs)

    def setup(self, cfg: Config) -> None:
        super().setup(cfg)
        for log in (self.error_log, self.access_log):
            log.handlers[:] = []
            log.propagate = True  # to the root logger, which logs.configure makes JSON


class _ForkedWorker(Protocol):
    @property
    def pid(self) -> int:
        """The child's, set when the arbiter forked it (a placeholder string before that)."""


def _child_exit(server: Arbiter, worker: _ForkedWorker) -> None:
    from admission.observability.metrics import worker_exited

    worker_exited(worker.pid)


class PortInUse(Exception):
    """The address cannot be listened on by this server alone."""


def claim_port(address: str, port: int) -> socket.socket:
    """A lock on ``port`` for this server's life (a socket its workers close), or PortInUse.

    Each worker binds its own SO_REUSEPORT socket, and the kernel lets any process of the same
    user join them: a second server on the port would take half the connections and answer with
    its own gates. So the port is claimed first: by name, against another gate-admission in this
    network namespace (even one starting at the same moment), and by a bind without
    SO_REUSEPORT, against any socket listening there (whose port the workers could never bind:
    gunicorn would replace them for ever)."""
    lock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        lock.bind(f"\0gate-admission-serve:{port}")
    except OSError as err:
        lock.close()
        if err.errno != errno.EADDRINUSE:
            raise PortInUse(f"cannot claim port {port}: {err.strerror or err}") from None
        raise PortInUse(f"port {port} is in use by another gate-admission serve") from None
    host = address.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as err:
        lock.close()
        why = "address already in use" if err.errno == errno.EADDRINUSE else (err.strerror or str(err))
        raise PortInUse(f"cannot listen on {address}:{port}: {why}") from None
    return lock


class Server(BaseApplication):
    """gunicorn, configured in code; each worker builds its own app (and gate store)."""

    def __init__(self, app_factory: Callable[[], Flask], options: dict[str, Any]):
        self.app_factory = app_factory
        self.options = options
        self.port_lock: socket.socket | None = None
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)

    # A WSGI app all the same: werkzeug types start_response more strictly than gunicorn's stubs.
    def load(self) -> Flask:  # type: ignore[override]
        return self.app_factory()

    # gunicorn prints its own start-up failures as plain text; ours are JSON lines like the rest.
    def do_load_config(self) -> None:
        try:
            self.load_default_config()
            self.load_config()
            self.cfg.validate()
        except Exception as err:  # noqa: BLE001 (gunicorn's settings raise what their validators do)
            logging.getLogger("gunicorn.error").error(f"configuration refused: {err}")
            sys.exit(1)

    def run(self) -> None:
        address, _, port = str(self.cfg.bind[0]).rpartition(":")
        try:
            self.port_lock = claim_port(address, int(port))
        except PortInUse as err:
            logging.getLogger("gunicorn.error").error(str(err))
            sys.exit(1)
        # The master keeps the claim; a worker (and what it forks: the calendar builders) must not,
        # or one left behind would keep the port claimed after the server has gone.
        self.cfg.set("post_fork", self._close_claim)
        try:
            Arbiter(self).run()
        except RuntimeError as err:
            logging.getLogger("gunicorn.error").error(str(err))
            sys.exit(1)

    def _close_claim(self, server: Arbiter, worker: object) -> None:
        if self.port_lock is not None:
            self.port_lock.close()


def worker_class(
    max_body: int,
    shutdown_delay: float,
    tls: ReloadingContext,
    max_client_connections: int = CLIENT_CONNECTIONS,
) -> type[PreReadWorker]:
    """Our gthread worker (admission.transport.worker) with this server's limits and certificate."""
    return type(
        "GateAdmissionWorker",
        (PreReadWorker,),
        {
            "max_body": max_body,
            "shutdown_delay": shutdown_delay,
            "tls": tls,
            "client_auth": bool(tls.client_ca),
            "max_client_connections": max_client_connections,
        },
    )


def options(
    *,
    address: str,
    port: int,
    certfile: str,
    keyfile: str,
    workers: int,
    threads: int,
    log_level: str = "info",
    shutdown_delay: float = 5.0,
    client_ca: str | None = None,
    max_client_connections: int | None = None,
) -> dict[str, Any]:
    """gunicorn settings for a webhook: gthread, long keep-alive, TLS from reloadable files."""
    from admission.webhook.app import MAX_BODY

    return {
        "bind": [f"{address}:{port}"],
        "workers": workers,
        "threads": threads,
        # gthread whose threads only get requests that have fully arrived: idle and slow
        # clients wait in the event loop, never in a thread (admission/transport/worker.py).
        # At most max_client_connections of a worker's connections come from one client address.
        "worker_class": worker_class(
            MAX_BODY,
            shutdown_delay,
            ReloadingContext(certfile, keyfile, client_ca=client_ca),
            max_client_connections or CLIENT_CONNECTIONS,
        ),
        "keepalive": KEEPALIVE_SECONDS,
        # Each worker listens on its own SO_REUSEPORT socket, so the kernel spreads new
        # connections over the workers. With one shared socket the first worker to wake takes
        # every connection the API server opens at once, and keeps them (keep-alive): one
        # worker does the work while the others idle (bench/load: 16/0 splits, half the rate).
        "reuse_port": True,
        "timeout": 30,
        # SIGTERM: serve shutdown_delay more seconds, then finish requests in flight; the master
        # kills what is left graceful_timeout after SIGTERM.
        "graceful_timeout": int(shutdown_delay) + 16,
        # TLS is done by the worker with the context above, not from gunicorn's certfile and
        # keyfile (so gunicorn's environ says wsgi.url_scheme "http"; nothing here reads it).
        # No peer is a trusted proxy, whatever FORWARDED_ALLOW_IPS says: a header must never
        # choose the route (the loop refuses names with "_" already; admission.transport.target).
        "forwarded_allow_ips": "",
        "forwarder_headers": "",
        "header_map": "refuse",
        "accesslog": None,
        "logger_class": GunicornLogger,
        "loglevel": log_level,
        "control_socket_disable": True,
        "child_exit": _child_exit,
        "proc_name": "gate-admission",
    }
