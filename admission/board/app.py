"""The board's HTTP side: the page, its fragment for live updates, its static files, and the
actions, behind the checks a local web server needs (docs/decisions/0072).

- Only the ``Host`` the board serves is answered: a page on another site that rebinds its DNS
  name to 127.0.0.1 reaches the port, but not with our Host, so it gets nothing (403).
- Every POST carries the per-session CSRF token the page was rendered with, and a browser's
  ``Origin``, when sent, must be the board's own.
- Scripts and styles are ours, served from the package with integrity hashes; the Content
  Security Policy allows nothing else (no inline script, no third-party origin).
"""

from __future__ import annotations

import hmac
import json
import secrets
import threading
import time
from collections.abc import Callable
from datetime import datetime, tzinfo

from flask import Flask, Response, request
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from admission.board import page
from admission.board.model import Actions, Board, Refused, Snapshot, Source, build, query_of
from admission.core.gates.references import is_name, is_namespace

SNAPSHOT_TTL = 0.5  # seconds a read of the cluster serves every tab's polls
MAX_BODY = 64 * 1024  # an action's form is a few hundred bytes
READ_TIMEOUT = 10  # seconds a connection may take to send its request
ACTIONS = ("approve", "withdraw", "open", "close")
POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


def loopback_hosts(port: int) -> frozenset[str]:
    """The Host values a browser sends to the board on ``port``: the loopback names, nothing else."""
    names = ("127.0.0.1", "localhost", "[::1]")
    # A browser leaves the scheme's default port out of Host: on port 80 it sends the bare name.
    return frozenset(f"{name}:{port}" for name in names) | frozenset(names if port == 80 else ())


class _Snapshots:
    """One read of the source serves every request for SNAPSHOT_TTL seconds."""

    def __init__(self, source: Source):
        self._source, self._lock = source, threading.Lock()
        self._taken: float = 0.0
        self._snapshot: Snapshot | None = None

    def get(self) -> Snapshot:
        with self._lock:
            if self._snapshot is None or time.monotonic() - self._taken >= SNAPSHOT_TTL:
                self._snapshot, self._taken = self._source.snapshot(), time.monotonic()
            return self._snapshot

    def forget(self) -> None:
        with self._lock:
            self._snapshot = None


def create_app(
    source: Source,
    actions: Actions | None,
    viewer: tzinfo,
    clock: Callable[[], datetime],
    hosts: frozenset[str] | None = frozenset(),
    csrf: str | None = None,
) -> Flask:
    """The board's app: ``actions`` None makes it read-only. It answers only the Host values
    ``hosts`` names (``serve`` sets the loopback ones once its port is known; empty: nothing);
    None answers any Host, for a read-only board served over TLS, where a rebound name fails
    the certificate check before any request is made."""
    app = Flask(__name__, static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY
    app.config["BOARD_HOSTS"] = hosts
    token = csrf or secrets.token_urlsafe(32)
    snapshots = _Snapshots(source)
    static = {name: page.static_file(name) for name in page.STATIC}

    def board() -> Board:
        query = query_of({k: v for k, v in request.args.items()})
        return build(snapshots.get(), clock(), query, viewer, source.where, actions is not None)

    def view() -> page.View:
        return page.View(token, request.script_root.rstrip("/") + "/")

    @app.before_request
    def checks() -> Response | None:
        hosts = app.config["BOARD_HOSTS"]
        if hosts is not None and request.host not in hosts:
            return _text(403, f"refused: this board answers only {', '.join(sorted(hosts))}")
        if request.method == "POST":
            origin = request.headers.get("Origin")
            if origin is not None and origin != f"http://{request.host}":
                return _text(403, "refused: the request comes from another site")
            if not hmac.compare_digest(request.form.get("csrf", ""), token):
                return _text(403, "refused: no valid CSRF token (reload the board)")
        return None

    @app.errorhandler(RequestEntityTooLarge)
    def too_large(_: RequestEntityTooLarge) -> Response:
        return _text(413, f"refused: a form is {MAX_BODY} bytes at most, and this one is larger")

    @app.after_request
    def headers(response: Response) -> Response:
        response.headers["Content-Security-Policy"] = POLICY
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers.setdefault("Cache-Control", "no-store")
        return response

    @app.get("/")
    def index() -> Response:
        return Response(page.page(board(), view()), mimetype="text/html")

    @app.get("/fragment")
    def fragment() -> Response:
        body = page.fragment(board(), view())
        etag = page.etag_of([body])
        if request.headers.get("If-None-Match") == f'"{etag}"':
            return Response(status=304)
        answer = Response(body, mimetype="text/html")
        answer.set_etag(etag)
        return answer

    @app.get("/static/<name>")
    def static_file(name: str) -> Response:
        if name not in static:
            return _text(404, "not found")
        kind = "text/css" if name.endswith(".css") else "text/javascript"
        answer = Response(static[name], mimetype=kind)
        answer.headers["Cache-Control"] = "no-cache"
        return answer

    @app.post("/actions/<action>")
    def act(action: str) -> Response:
        if actions is None:
            return _text(403, "refused: this board is read-only")
        if action not in ACTIONS:
            return _text(404, "not found")
        form = {
            k: request.form.get(k, "").strip() for k in ("namespace", "gate", "content", "for", "message")
        }
        form["expires"] = request.form.get("expires", "").strip()
        if not is_namespace(form["namespace"]) or not is_name(form["gate"]):
            return _text(400, "refused: namespace and gate must name a gate")
        what = _describe(action, form)
        if request.form.get("confirmed") != "yes":
            return Response(page.confirm_page(action, what, form, view()), mimetype="text/html")
        try:
            lines = _perform(actions, action, form)
            ok = True
            snapshots.forget()  # the next look reads what the action wrote
        except Refused as err:
            lines, ok = [str(err)], False
        if "application/json" in request.headers.get("Accept", ""):
            body = json.dumps({"ok": ok, "lines": lines})
            return Response(body, status=200 if ok else 422, mimetype="application/json")
        return Response(page.result_page(ok, lines, view()), status=200 if ok else 422, mimetype="text/html")

    return app


def _describe(action: str, form: dict[str, str]) -> str:
    gate = f"{form['namespace']}/{form['gate']}"
    if action == "approve":
        return f"Approve {form['content'] or 'what waits'} for {form['for'] or 'every object'} behind gate {gate}"
    if action == "withdraw":
        return f"Withdraw the approvals of {form['content'] or 'anything'} for {form['for'] or 'any object'} on gate {gate}"
    until = f", closing again after {form['for']}" if action == "open" and form["for"] else ""
    return f"{action.capitalize()} gate {gate} now{until}" + (
        f": {form['message']}" if form["message"] else ""
    )


def _perform(actions: Actions, action: str, form: dict[str, str]) -> list[str]:
    if action == "approve":
        return actions.approve(
            form["namespace"], form["gate"], form["content"], form["for"], form["message"], form["expires"]
        )
    if action == "withdraw":
        return actions.withdraw(form["namespace"], form["gate"], form["content"], form["for"])
    return actions.toggle(form["namespace"], form["gate"], action, form["message"], form["for"])


def _text(status: int, text: str) -> Response:
    """A refusal: as text, or as an action's JSON answer where JSON is asked (board.js shows its
    lines; a stale token after the board restarted must say so, not fail to parse)."""
    if "application/json" in request.headers.get("Accept", ""):
        return Response(
            json.dumps({"ok": False, "lines": [text]}), status=status, mimetype="application/json"
        )
    return Response(text + "\n", status=status, mimetype="text/plain")


class _Handler(WSGIRequestHandler):
    timeout = READ_TIMEOUT  # a client that stalls mid-request holds a thread this long at most

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass  # polls every second: the terminal is for the command's own lines


def serve(app: Flask, address: str, port: int) -> BaseWSGIServer:
    """A threaded server for ``app`` on loopback ``address:port`` (0: a free port), answering the
    loopback Host values of the port it got; ``serve_forever`` runs it."""
    server = make_server(address, port, app, threaded=True, request_handler=_Handler)
    if app.config["BOARD_HOSTS"] == frozenset():
        app.config["BOARD_HOSTS"] = loopback_hosts(server.server_port)
    return server
