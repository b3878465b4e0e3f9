"""``serve --board``: the gate board, read-only, beside the webhook for a team screen
(docs/decisions/0073). It reads what the worker decides with: its gate cache, and the Flux
objects its own cache holds; the webhook mounts it under ``/board`` behind the calendar's token."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from admission.board.app import create_app
from admission.board.model import Snapshot
from admission.store import GateStore

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

# A page (no script: the board's policy allows none inline) that asks again by itself.
BUSY = (
    b'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="1">'
    b"<title>Gate board</title></head><body><p>The board is being drawn; this page reloads in a "
    b"second.</p></body></html>"
)


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


REST = 4.0  # after a drawing, the worker draws nothing new for this many times as long
FRESH = 1.0  # seconds a drawing is served to every screen asking for the same view
MAX_KEPT = 8  # views (path and query) whose last drawing a worker keeps
MAX_KEPT_BYTES = 32 << 20  # and at most this many bytes of them


class Drawing(NamedTuple):
    status: str
    headers: list[tuple[str, str]]
    body: bytes
    drawn: float  # time.monotonic()

    def etag(self) -> str | None:
        return next((v for k, v in self.headers if k.lower() == "etag"), None)


class Drawings:
    """How a worker draws the board: in a thread that answers the API server too, holding the
    GIL its reviews need for as long as a drawing takes (a second or more for a hundred gates:
    docs/operations.md). So one drawing runs at a time, and after each the worker draws nothing
    new for ``REST`` times as long: the board takes at most a fifth of a worker, however many
    screens watch or whatever they ask. Meanwhile each view is served its last drawing (304 when
    a screen has it), or a page that reloads itself in a second when it has none. A drawing
    younger than ``FRESH`` seconds serves every screen that asks for the same view. Static files
    are served as they are."""

    def __init__(self, app: WSGIApplication, clock: Callable[[], float] = time.monotonic):
        self._app, self._clock = app, clock
        self._drawing, self._keeping = threading.Lock(), threading.Lock()
        self._kept: OrderedDict[tuple[str, str], Drawing] = OrderedDict()
        self._rested = 0.0  # no new drawing starts before this time

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path, method = str(environ.get("PATH_INFO", "")), environ.get("REQUEST_METHOD")
        if path.startswith("/static/") or method not in ("GET", "HEAD"):
            return self._app(environ, start_response)  # the files from memory; a refusal of a post
        view = (path, str(environ.get("QUERY_STRING", "")))
        with self._keeping:
            kept = self._kept.get(view)
        if kept is not None and self._clock() - kept.drawn < FRESH:
            return _served(kept, environ, start_response)
        if self._clock() < self._rested or not self._drawing.acquire(blocking=False):
            return _served(kept, environ, start_response)
        try:
            drawn = self._draw(environ)
        finally:
            self._drawing.release()
        if drawn.status.startswith("200 "):
            self._keep(view, drawn)
        return _served(drawn, environ, start_response)

    def _draw(self, environ: WSGIEnvironment) -> Drawing:
        started = self._clock()
        said: list[tuple[str, list[tuple[str, str]]]] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            said[:] = [(status, list(headers))]
            return lambda data: None  # the board's app returns its body; it never writes

        # Drawn whole, as for a GET: a 304, or a HEAD's empty body, is made from it here.
        environ = {**environ, "HTTP_IF_NONE_MATCH": "", "REQUEST_METHOD": "GET"}
        answer = self._app(environ, start_response)
        try:
            body = b"".join(answer)
        finally:
            close = getattr(answer, "close", None)
            if close is not None:
                close()
        took = self._clock() - started
        self._rested = self._clock() + REST * took
        status, headers = said[0]
        return Drawing(status, headers, body, started + took)

    def _keep(self, view: tuple[str, str], drawn: Drawing) -> None:
        with self._keeping:
            self._kept.pop(view, None)
            if len(drawn.body) > MAX_KEPT_BYTES:
                return
            self._kept[view] = drawn
            while (
                len(self._kept) > MAX_KEPT or sum(len(d.body) for d in self._kept.values()) > MAX_KEPT_BYTES
            ):
                self._kept.popitem(last=False)


def _served(
    drawn: Drawing | None, environ: WSGIEnvironment, start_response: StartResponse
) -> Iterable[bytes]:
    """``drawn`` as the answer to this request: 304 when the request names its ETag; 503 with a
    page that reloads itself when there is none yet."""
    if drawn is None:
        start_response(
            "503 Service Unavailable",
            [
                ("Content-Type", "text/html; charset=utf-8"),
                ("Content-Length", str(len(BUSY))),
                ("Retry-After", "1"),
                ("Cache-Control", "no-store"),
            ],
        )
        return [BUSY]
    etag = drawn.etag()
    if etag is not None and environ.get("HTTP_IF_NONE_MATCH") == etag:
        start_response("304 Not Modified", [("ETag", etag), ("Cache-Control", "no-store")])
        return []
    start_response(drawn.status, drawn.headers)
    return [] if environ.get("REQUEST_METHOD") == "HEAD" else [drawn.body]


def board(
    store: GateStore,
    flux: Listing | None,
    where: str,
    clock: Callable[[], datetime],
    monotonic: Callable[[], float] = time.monotonic,
) -> WSGIApplication:
    """The read-only board over a worker's caches, in UTC unless the viewer's ``tz`` says
    otherwise; any Host (it is served over TLS, where a rebound name fails the certificate)."""
    app = create_app(WorkerSource(store, flux, where), None, UTC, clock, hosts=None)
    return Drawings(app, monotonic)
