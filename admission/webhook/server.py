"""``gate-admission serve``: the Flask app under gunicorn, threaded workers, TLS only."""

from __future__ import annotations

import logging
import sys
from typing import Any, Callable, Protocol

from flask import Flask
from gunicorn import glogging
from gunicorn.app.base import BaseApplication
from gunicorn.arbiter import Arbiter
from gunicorn.config import Config

from admission.webhook.tls import ReloadingContext
from admission.webhook.worker import CLIENT_CONNECTIONS, PreReadWorker

# The API server's webhook client keeps idle connections for 90 s. A server that
# closes them sooner races the client's next request on that connection, and a
# POST that loses the race fails the admission call. So idle longer than 90 s.
KEEPALIVE_SECONDS = 120


class GunicornLogger(glogging.Logger):
    """gunicorn's own messages as our JSON lines, and no access log: every gated review has a
    decision line already, and building an access entry per request costs ~6% of a review."""

    def _compute_access_log_enabled(self) -> bool:
        return False

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


class Server(BaseApplication):
    """gunicorn, configured in code; each worker builds its own app (and gate store)."""

    def __init__(self, app_factory: Callable[[], Flask], options: dict[str, Any]):
        self.app_factory = app_factory
        self.options = options
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
        except Exception as err:
            logging.getLogger("gunicorn.error").error(f"configuration refused: {err}")
            sys.exit(1)

    def run(self) -> None:
        try:
            Arbiter(self).run()
        except RuntimeError as err:
            logging.getLogger("gunicorn.error").error(str(err))
            sys.exit(1)


def worker_class(
    max_body: int,
    shutdown_delay: float,
    tls: ReloadingContext,
    max_client_connections: int = CLIENT_CONNECTIONS,
) -> type[PreReadWorker]:
    """Our gthread worker (admission.webhook.worker) with this server's limits and certificate."""
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
        # clients wait in the event loop, never in a thread (admission/webhook/worker.py).
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
        # choose the route (the loop refuses names with "_" already; admission.webhook.target).
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
