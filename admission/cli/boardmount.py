"""``serve --board``: the gate board, read-only, beside the webhook for a team screen
(docs/decisions/0073). It reads what the worker decides with: its gate cache, and the Flux
objects its own cache holds; the webhook mounts it under ``/board`` behind the calendar's token."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Protocol

from admission.board.app import create_app
from admission.board.model import Snapshot
from admission.store import GateStore

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

BUSY = b"The board is drawing a page for someone else in this worker: try again in a second.\n"


class Listing(Protocol):
    """The Flux objects a worker holds (admission.kube.fluxcache.FluxCache): read, never changed."""

    def kinds(self) -> list[str]: ...

    def objects(self, kind: str) -> list[dict[str, Any]]: ...

    def untrusted(self) -> str | None: ...


class WorkerSource:
    """The board's source in a webhook worker: the gate store the webhook decides with, and the
    Flux objects of ``flux`` (none with ``--gates-dir``, and the page says so)."""

    def __init__(self, store: GateStore, flux: Listing | None, where: str):
        self._store, self._flux = store, flux
        if flux is None:
            self.where = f"{where}, read-only: no Flux objects here, so nothing held is shown"
        else:
            # The webhook watches what its hold points look up: sources and HelmReleases.
            self.where = (
                f"{where}, read-only; held objects of the kinds this server watches: "
                f"{', '.join(sorted(flux.kinds()))} (every kind: kubectl gate board)"
            )

    def snapshot(self) -> Snapshot:
        problems = []
        ready, detail = self._store.readiness()
        if not ready:
            problems.append(f"the gate cache is not ready: {detail.get('reason') or 'not synced yet'}")
        objects: list[dict[str, Any]] = []
        if self._flux is not None:
            untrusted = self._flux.untrusted()
            if untrusted:
                problems.append(f"held objects may be out of date: {untrusted}")
            objects = [obj for kind in self._flux.kinds() for obj in self._flux.objects(kind)]
        return Snapshot(self._store.index, objects, tuple(problems))


class OneAtATime:
    """A worker draws one board page at a time, in one of the threads that answer the API server:
    another page asked for meanwhile is 503 at once, never a second thread held (its static
    files are read from memory, and always served). A team screen's next poll gets the page."""

    def __init__(self, app: WSGIApplication):
        self._app, self._lock = app, threading.Lock()

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if str(environ.get("PATH_INFO", "")).startswith("/static/"):
            return self._app(environ, start_response)
        if not self._lock.acquire(blocking=False):
            start_response(
                "503 Service Unavailable",
                [
                    ("Content-Type", "text/plain; charset=utf-8"),
                    ("Content-Length", str(len(BUSY))),
                    ("Retry-After", "1"),
                    ("Cache-Control", "no-store"),
                ],
            )
            return [BUSY]
        try:
            answer = self._app(environ, start_response)
            try:
                return list(answer)  # drawn while the lock is held
            finally:
                close = getattr(answer, "close", None)
                if close is not None:
                    close()
        finally:
            self._lock.release()


def board(
    store: GateStore, flux: Listing | None, where: str, clock: Callable[[], datetime]
) -> WSGIApplication:
    """The read-only board over a worker's caches, in UTC unless the viewer's ``tz`` says
    otherwise; any Host (it is served over TLS, where a rebound name fails the certificate)."""
    app = create_app(WorkerSource(store, flux, where), None, timezone.utc, clock, hosts=None)
    return OneAtATime(app)
