"""``gate-admission serve``: the Flask app under gunicorn, threaded workers, TLS only."""

from __future__ import annotations

from typing import Callable

from flask import Flask
from gunicorn.app.base import BaseApplication

from .tls import ReloadingContext

# The API server's webhook client keeps idle connections for 90 s. A server that
# closes them sooner races the client's next request on that connection, and a
# POST that loses the race fails the admission call. So idle longer than 90 s.
KEEPALIVE_SECONDS = 120


def logconfig(level: str) -> dict:
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "admission.logs.JSONFormatter"}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}},
        "root": {"level": level.upper(), "handlers": ["stderr"]},
        "loggers": {
            "gunicorn.error": {"level": level.upper(), "handlers": [], "propagate": True},
            "gunicorn.access": {"level": "WARNING", "handlers": [], "propagate": True},
        },
    }


def _child_exit(server: object, worker: object) -> None:
    from .metrics import worker_exited
    worker_exited(worker.pid)


class Server(BaseApplication):
    """gunicorn, configured in code; each worker builds its own app (and gate store)."""

    def __init__(self, app_factory: Callable[[], Flask], options: dict):
        self.app_factory = app_factory
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)

    def load(self) -> Flask:
        return self.app_factory()


def options(*, address: str, port: int, certfile: str, keyfile: str, workers: int, threads: int,
            log_level: str = "info") -> dict:
    """gunicorn settings for a webhook: gthread, long keep-alive, TLS from reloadable files."""
    return {
        "bind": [f"{address}:{port}"],
        "workers": workers,
        "threads": threads,
        "worker_class": "gthread",
        "keepalive": KEEPALIVE_SECONDS,
        "timeout": 30,
        "graceful_timeout": 20,
        "certfile": certfile,
        "keyfile": keyfile,
        "ssl_context": ReloadingContext(certfile, keyfile),
        "accesslog": None,
        "logconfig_dict": logconfig(log_level),
        "control_socket_disable": True,
        "child_exit": _child_exit,
        "proc_name": "gate-admission",
    }
