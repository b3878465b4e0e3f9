"""The application: review endpoints (decode, call a handler, encode) in front of Flask views."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol, TypedDict, Unpack

import orjson
from flask import Blueprint, Flask, Response, request
from werkzeug.exceptions import HTTPException
from werkzeug.middleware.dispatcher import DispatcherMiddleware

from admission.clock import utcnow
from admission.core.admission.decision import CONTENT, Context, Settings, not_judged
from admission.core.admission.review import AdmissionRequest, AdmissionReview
from admission.core.base import names
from admission.core.flux import kinds
from admission.observability import logs, metrics
from admission.store import GateStore, Sources
from admission.transport.target import BOARD_PATH, NOT_ONE_SPELLING, request_path
from admission.webhook import calendar_route, handlers
from admission.webhook.feeds import FIRST_WAIT, CalendarFeeds
from admission.webhook.handlers import Handler, Outcome
from admission.webhook.receiver import TokenFile
from admission.webhook.responses import json_response
from admission.webhook.review import ReviewError, allowed, complete, errored, parse_review

if TYPE_CHECKING:  # the WSGI types of PEP 3333, as typeshed spells them
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

log = logging.getLogger("admission.decisions")
# The API server refuses request bodies over 3 MiB, so an object it sends us is at most that,
# and a review carries two (UPDATE: object and oldObject) plus a small envelope (user, options).
MAX_BODY = 2 * 3 * 1024 * 1024 + 256 * 1024


MAX_LOGGED_GATES = 32  # gate states in one decision log line; the rest are counted


def _log_decision(endpoint: str, review: AdmissionReview, outcome: Outcome, dry_run: bool) -> None:
    decision = outcome.decision
    if not (decision.gated or decision.exempt):
        return
    req = review["request"]
    hold = decision.hold
    fields = {
        "object": {
            "kind": logs.cap(req["kind"]["kind"], 300),
            "namespace": logs.cap(req.get("namespace", ""), 300),
            "name": logs.cap(req.get("name", ""), 300),
        },
        "operation": req["operation"] + (f"/{req['subResource']}" if req.get("subResource") else ""),
        "user": logs.cap(req["userInfo"].get("username", ""), 300),
        "uid": req["uid"],
        "verdict": _verdict(endpoint, outcome),
        "mode": decision.mode,
        "change": decision.change,
        "held": decision.held_what,  # edit or content (None when nothing is held)
        "dryRun": dry_run,
    }
    if hold is not None:
        # Bounded: a review can reference many gates with long (invalid) names.
        states = hold.states[:MAX_LOGGED_GATES]
        logged: dict[str, object] = {
            "require": hold.policy.require,
            "status": [
                {"gate": logs.cap(s.key, 300), "closed": str(not s.open).lower(), "reason": s.reason}
                for s in states
            ],
        }
        if len(hold.states) > len(states):
            logged["truncated"] = len(hold.states) - len(states)
        fields["gates"] = logged
    if decision.exempt:
        fields["exempt"] = logs.cap(decision.exempt)
    if decision.approved:  # who approved the content that passed, and why
        fields["approved"] = logs.cap(decision.approved)
    if decision.message:
        fields["reason"] = logs.cap(decision.message)
    logs.emit(log, "admission decision", fields)


def _verdict(endpoint: str, outcome: Outcome) -> str:
    """What this endpoint did with the request. ``denied`` and ``audited`` are the validating
    webhook's: the mutating webhook sees the same held request and only lets it through (with
    the audit record in audit mode), so counting it there too would count each hold twice."""
    decision, response = outcome.decision, outcome.response
    if outcome.error:
        return "error"
    if decision.exempt:
        return "exempt"
    if not response.get("allowed"):
        return "denied"
    if decision.held and decision.mode == names.ENFORCE and decision.allowed:
        return "rewritten"  # the mutating webhook put the served content back
    if decision.held and endpoint == VALIDATE.name:
        return "audited"
    return "patched" if "patch" in response else "allowed"


def _count(
    endpoint: str, review: AdmissionReview, outcome: Outcome, settings: Settings, started: float
) -> None:
    req = review["request"]
    kind = req["kind"]
    # Only our kinds become label values: anything else could grow the series without bound.
    kind_label = kind["kind"] if kinds.is_gated_kind(kind["group"], kind["kind"]) else "other"
    operation = req["operation"] + ("/status" if req.get("subResource") == "status" else "")
    mode = outcome.decision.mode if outcome.decision.held else settings.mode
    verdict = _verdict(endpoint, outcome)
    metrics.series(metrics.REVIEWS, endpoint, kind_label, operation, verdict, mode).inc()
    if outcome.decision.held_what and (endpoint == "validate" or verdict == "rewritten"):
        metrics.series(metrics.HOLDS, kind_label, outcome.decision.held_what, verdict).inc()
    metrics.series(metrics.DURATION, endpoint).observe(time.perf_counter() - started)


@dataclass(frozen=True)
class Route:
    """A review endpoint: its name (in logs and metrics), its handler, and what a failure answers."""

    name: str
    handler: Handler
    fail_open: bool  # mutation never blocks; validation is where a change is refused
    logged: bool  # decisions are logged, and denials become Events, once: where they are made


VALIDATE = Route("validate", handlers.validate, fail_open=False, logged=True)
MUTATE = Route("mutate", handlers.mutate, fail_open=True, logged=False)


class Recorder(Protocol):
    """Takes note of a denied request, to act on it off the admission path (Events, shown attempts)."""

    def record(self, request: AdmissionRequest) -> None: ...


class Reviews:
    """Decode a review, call a handler, encode the answer: one place for both endpoints."""

    def __init__(
        self,
        store: GateStore,
        settings: Settings,
        clock: Callable[[], datetime],
        events: Recorder | None = None,
        sources: Sources | None = None,
        attempts: Recorder | None = None,
    ):
        self.store, self.settings, self.clock, self.events = store, settings, clock, events
        self.attempts = attempts
        self.get = sources.get if sources is not None else None

    def answer(self, route: Route, body: bytes) -> tuple[int, bytes]:
        """The HTTP status and JSON body for a review ``body`` sent to ``route``."""
        with metrics.series(metrics.IN_FLIGHT, route.name).track_inprogress():
            return self._answer(route, body)

    def _answer(self, route: Route, body: bytes) -> tuple[int, bytes]:
        started = time.perf_counter()
        try:
            review = parse_review(body)
        except ReviewError as err:
            return 400, orjson.dumps({"error": str(err)})
        now = self.clock()
        try:
            outcome = route.handler(
                review["request"], Context(self.store.lookup, now, self.settings, self.get)
            )
        except RecursionError:
            # orjson decodes 1024 levels; comparing or printing ~1000 exceeds Python's limit.
            return 400, orjson.dumps({"error": "request nests values too deeply to be judged"})
        except Exception as err:  # a bug must not become a 500 or a crashed worker
            log.exception("handler failed", extra={"uid": review["request"]["uid"]})
            why = f"gate-admission could not evaluate this request: {err}"
            response = allowed(warnings=[why]) if route.fail_open else errored(why)
            outcome = Outcome(response, not_judged(route.fail_open), error=why)
        if route.logged or _verdict(route.name, outcome) == "rewritten":  # a rewrite is decided in /mutate
            _log_decision(route.name, review, outcome, bool(review["request"].get("dryRun")))
        if route.logged:
            if self.events is not None and outcome.decision.held and not outcome.decision.allowed:
                self.events.record(
                    review["request"]
                )  # which object; its Event says what the API server shows
            if (
                self.attempts is not None
                and outcome.decision.held_what == CONTENT
                and not outcome.decision.allowed
            ):
                self.attempts.record(review["request"])  # only its status write carried it: show it
        payload = orjson.dumps(complete(review, outcome.response))
        _count(route.name, review, outcome, self.settings, started)
        return 200, payload


_STATUS = {
    200: "200 OK",
    400: "400 Bad Request",
    405: "405 Method Not Allowed",
    413: "413 Request Entity Too Large",
}


class ReviewRoutes:
    """WSGI middleware answering POST /validate and /mutate; every other path goes to Flask,
    routed by the path admission.transport.target reads from the request target.

    Flask's per-request machinery (request context, URL adapter, Request and Response
    objects) costs more than judging a review does, and these two endpoints use none of it:
    on the write path of the cluster, that is worth a dozen lines of plain WSGI.
    """

    def __init__(self, fallback: WSGIApplication, reviews: Reviews):
        self.fallback = fallback
        self.routes = {f"/{route.name}": route for route in (VALIDATE, MUTATE)}
        self.reviews = reviews

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        # Not the server's PATH_INFO: gunicorn strips a SCRIPT_NAME header's prefix from it and
        # percent-decodes it, so it could name another route than the client-certificate check read.
        path = request_path(environ.get("RAW_URI", ""))
        route = self.routes.get(path or "")
        headers: list[tuple[str, str]] = []
        if path is None:
            status, payload = 400, orjson.dumps({"error": NOT_ONE_SPELLING})
        elif route is None:
            environ["PATH_INFO"], environ["SCRIPT_NAME"] = path, ""
            return self.fallback(environ, start_response)
        elif environ.get("REQUEST_METHOD") != "POST":
            status, payload, headers = (
                405,
                orjson.dumps({"error": "use POST with an AdmissionReview"}),
                [("Allow", "POST")],
            )
        else:
            body = _read_body(environ)
            if body is None:
                status, payload = 413, orjson.dumps({"error": f"body larger than {MAX_BODY} bytes"})
            else:
                status, payload = self.reviews.answer(route, body)
        start_response(
            _STATUS[status],
            [("Content-Type", "application/json"), ("Content-Length", str(len(payload))), *headers],
        )
        return [payload]


def _read_body(environ: WSGIEnvironment) -> bytes | None:
    """The request body, or None when it is over the limit (decided from Content-Length
    before reading, when there is one)."""
    stream = environ["wsgi.input"]
    try:
        length = int(environ.get("CONTENT_LENGTH") or -1)
    except ValueError:
        length = -1
    if length > MAX_BODY:
        return None
    body = stream.read(length) if length >= 0 else stream.read(MAX_BODY + 1)
    return None if len(body) > MAX_BODY else body


def _probes(
    store: GateStore, sources: Sources | None, clock: Callable[[], datetime], certfile: str | None
) -> Blueprint:
    """``/healthz``, ``/readyz`` and ``/metrics``."""
    probes = Blueprint("probes", __name__)
    trusted_once: list[bool] = []  # set once the Flux object cache has been trusted

    @probes.get("/healthz")
    def healthz() -> Response:
        return json_response({"status": "ok"})

    @probes.get("/readyz")
    def readyz() -> Response:
        ready, detail = store.readiness()
        if sources is not None:
            untrusted = sources.untrusted()
            if untrusted is None:
                trusted_once.append(True)
            detail = {
                **detail,
                "fluxObjects": {"ready": untrusted is None, **({"reason": untrusted} if untrusted else {})},
            }
            # Not ready until the Flux objects are listed once; after that a stale copy is still
            # the best knowledge there is (it only shows what waits and which charts inherit
            # gates), and the gate cache decides readiness (docs/design.md, "Hold points").
            if untrusted is not None and not trusted_once:
                ready = False
                detail.setdefault("reason", untrusted)
        return json_response({"ready": ready, **detail}, 200 if ready else 503)

    @probes.get("/metrics")
    def prometheus() -> Response:
        payload, content_type = metrics.exposition(store, clock, certfile)
        return Response(payload, mimetype=None, content_type=content_type)

    return probes


def _guarded(page: WSGIApplication, token: TokenFile | None) -> WSGIApplication:
    """``page`` for the callers /calendar.ics answers: what it shows is the calendar's and more."""

    def guarded(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        refused = calendar_route.token_refusal(token, environ.get("HTTP_AUTHORIZATION"))
        if refused is not None:
            return refused(environ, start_response)
        # /board itself: its page (the mount leaves no path), which no trailing '/' may name here.
        environ["PATH_INFO"] = environ.get("PATH_INFO") or "/"
        return page(environ, start_response)

    return guarded


def _http_error(err: HTTPException) -> Response:
    return json_response({"error": err.description or err.name}, err.code or 400)


def _unexpected(err: Exception) -> Response:
    log.exception("unexpected error", extra={"path": request.path})
    return json_response({"error": "internal error; see the server log"}, 500)


class Parts(TypedDict, total=False):
    """What a server wires in beside its store and settings, each optional (the command line's
    wiring, `admission.cli.wiring`, builds them from its configuration).

    ``receiver``: the open/close hooks (admission.webhook.receiver); ``events`` and ``attempts``
    show denials as Events and on their objects (admission.kube.events, admission.kube.attempts);
    ``sources``: the Flux objects the hold points look up (none when not given). Unless not
    ``calendar`` (default on), /calendar.ics (admission.webhook.calendar_route) serves
    ``calendar_feeds``, or this worker's own (a query with no feed yet waits up to
    ``calendar_wait`` seconds for its first build), to callers with ``calendar_token`` only when
    given. ``board``: a read-only page (the gate board, wired by the command line), served under
    ``/board`` to the same callers. ``certfile``: the serving certificate, whose expiry /metrics shows.
    """

    receiver: Blueprint | None
    events: Recorder | None
    calendar: bool
    sources: Sources | None
    attempts: Recorder | None
    calendar_feeds: CalendarFeeds | None
    calendar_wait: float
    calendar_token: TokenFile | None
    board: WSGIApplication | None
    certfile: str | None


def create_app(
    store: GateStore,
    settings: Settings | None = None,
    *,
    clock: Callable[[], datetime] = utcnow,
    **parts: Unpack[Parts],
) -> Flask:
    """Wire the app around a gate store and its `Parts`; ``clock`` is the one place time is read."""
    receiver, board, sources = parts.get("receiver"), parts.get("board"), parts.get("sources")
    calendar_token = parts.get("calendar_token")
    settings = settings or Settings()
    app = Flask("admission")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY
    app.extensions.update(gate_store=store, gate_settings=settings, gate_sources=sources)
    fallback: WSGIApplication = app.wsgi_app
    if board is not None:
        # Behind ReviewRoutes: routed by the path it read from the request target, as every route is.
        fallback = DispatcherMiddleware(fallback, {BOARD_PATH: _guarded(board, calendar_token)})
    # Flask's documented way to put WSGI middleware in front of the app.
    app.wsgi_app = ReviewRoutes(  # type: ignore[method-assign]
        fallback, Reviews(store, settings, clock, parts.get("events"), sources, parts.get("attempts"))
    )
    app.register_blueprint(_probes(store, sources, clock, parts.get("certfile")))
    if receiver is not None:
        app.register_blueprint(receiver)
    if parts.get("calendar", True):
        feeds = parts.get("calendar_feeds") or calendar_route.worker_feeds(
            store, clock, parts.get("calendar_wait", FIRST_WAIT)
        )
        app.extensions["calendar_feeds"] = feeds
        app.register_blueprint(calendar_route.blueprint(store, feeds, clock, calendar_token))
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _unexpected)
    return app
