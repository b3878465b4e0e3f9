"""The application: review endpoints (decode, call a handler, encode) in front of Flask views."""

from __future__ import annotations

import logging
import time
from datetime import datetime
from typing import Callable

import orjson
from flask import Blueprint, Flask, Response, request
from werkzeug.exceptions import HTTPException

from admission.webhook import handlers
from admission.observability import logs
from admission.observability import metrics
from admission.core import kinds
from admission.core import names
from admission.core.decision import Decision, Settings
from admission.webhook.handlers import Handler, Outcome
from admission.webhook.review import AdmissionReview, ReviewError, allowed, complete, errored, parse_review
from admission.clock import utcnow
from admission.store import GateStore, Sources

log = logging.getLogger("admission.decisions")
MAX_BODY = 7 * 1024 * 1024  # the API server's own request limit is 3 MiB; leave room for both objects


def _json(payload: object, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status=status, mimetype="application/json")


def _log_decision(review: AdmissionReview, decision: Decision, response: dict, dry_run: bool) -> None:
    if not (decision.gated or decision.exempt):
        return
    req = review["request"]
    hold = decision.hold
    fields = {
        "object": {"kind": req["kind"]["kind"], "namespace": req.get("namespace", ""), "name": req.get("name", "")},
        "operation": req["operation"] + (f"/{req['subResource']}" if req.get("subResource") else ""),
        "user": req["userInfo"].get("username", ""),
        "uid": req["uid"],
        "verdict": _verdict(decision, response),
        "mode": decision.mode,
        "change": decision.change,
        "held": decision.held_what,  # edit or content (None when nothing is held)
        "dryRun": dry_run,
    }
    if hold is not None:
        fields["gates"] = {
            "require": hold.policy.require,
            "status": [{"gate": s.key, "closed": str(not s.open).lower(), "reason": s.reason} for s in hold.states],
        }
    if decision.exempt:
        fields["exempt"] = decision.exempt
    if decision.message:
        fields["reason"] = decision.message
    logs.emit(log, "admission decision", fields)


def _verdict(decision: Decision, response: dict) -> str:
    if decision.exempt:
        return "exempt"
    if not response.get("allowed"):
        return "error" if response.get("status", {}).get("code") == 500 else "denied"
    if decision.held and decision.mode == "enforce" and decision.allowed:
        return "rewritten"  # the mutating webhook put the served content back
    if decision.held:
        return "audited"
    return "patched" if "patch" in response else "allowed"


def _count(endpoint: str, review: AdmissionReview, outcome: Outcome, settings: Settings, started: float) -> None:
    req = review["request"]
    kind = req["kind"]
    # Only our kinds become label values: anything else could grow the series without bound.
    kind_label = kind["kind"] if kinds.is_gated_kind(kind["group"], kind["kind"]) else "other"
    operation = req["operation"] + ("/status" if req.get("subResource") == "status" else "")
    mode = outcome.decision.mode if outcome.decision.held else settings.mode
    verdict = _verdict(outcome.decision, outcome.response)
    metrics.REVIEWS.labels(endpoint, kind_label, operation, verdict, mode).inc()
    if outcome.decision.held_what and (endpoint == "validate" or verdict == "rewritten"):
        metrics.HOLDS.labels(kind_label, outcome.decision.held_what, verdict).inc()
    metrics.DURATION.labels(endpoint).observe(time.perf_counter() - started)


class Reviews:
    """Decode a review, call a handler, encode the answer: one place for both endpoints."""

    def __init__(self, store: GateStore, settings: Settings, clock: Callable[[], datetime], events=None,
                 sources: Sources | None = None):
        self.store, self.settings, self.clock, self.events = store, settings, clock, events
        self.sources = sources if sources is not None else handlers.NO_SOURCES

    def answer(self, handler: Handler, fail_open: bool, body: bytes) -> tuple[int, bytes]:
        """The HTTP status and JSON body for a review ``body``."""
        started = time.perf_counter()
        try:
            review = parse_review(body)
        except ReviewError as err:
            return 400, orjson.dumps({"error": str(err)})
        now = self.clock()
        try:
            outcome = handler(review["request"], self.store.lookup, now, self.settings, self.sources)
        except RecursionError:
            # orjson decodes 1024 levels; comparing or printing ~1000 exceeds Python's limit.
            return 400, orjson.dumps({"error": "request nests values too deeply to be judged"})
        except Exception as err:  # a bug must not become a 500 or a crashed worker
            log.exception("handler failed", extra={"uid": review["request"]["uid"]})
            response = allowed(warnings=[f"gate-admission could not evaluate this request: {err}"]) if fail_open \
                else errored(f"gate-admission could not evaluate this request: {err}")
            outcome = Outcome(response, Decision(allowed=fail_open))
        endpoint = "validate" if handler is handlers.validate else "mutate"
        if endpoint == "validate" or _verdict(outcome.decision, outcome.response) == "rewritten":
            _log_decision(review, outcome.decision, outcome.response, bool(review["request"].get("dryRun")))
        if endpoint == "validate":
            if self.events is not None and outcome.decision.held and not outcome.decision.allowed:
                self.events.record(review["request"], outcome.decision.message or "", now)
        payload = orjson.dumps(complete(review, outcome.response))
        _count(endpoint, review, outcome, self.settings, started)
        return 200, payload


_STATUS = {200: "200 OK", 400: "400 Bad Request", 405: "405 Method Not Allowed", 413: "413 Request Entity Too Large"}


class ReviewRoutes:
    """WSGI middleware answering POST /validate and /mutate; every other path goes to Flask.

    Flask's per-request machinery (request context, URL adapter, Request and Response
    objects) costs more than judging a review does, and these two endpoints use none of it:
    on the write path of the cluster, that is worth a dozen lines of plain WSGI.
    """

    def __init__(self, fallback: Callable, reviews: Reviews):
        self.fallback = fallback
        # Mutation never blocks (fail open); validation is where a change is refused.
        self.routes = {"/validate": (handlers.validate, False), "/mutate": (handlers.mutate, True)}
        self.reviews = reviews

    def __call__(self, environ: dict, start_response: Callable):
        route = self.routes.get(environ.get("PATH_INFO", ""))
        if route is None:
            return self.fallback(environ, start_response)
        if environ.get("REQUEST_METHOD") != "POST":
            status, payload, headers = 405, orjson.dumps({"error": "use POST with an AdmissionReview"}), [("Allow", "POST")]
        else:
            body = _read_body(environ)
            if body is None:
                status, payload = 413, orjson.dumps({"error": f"body larger than {MAX_BODY} bytes"})
            else:
                status, payload = self.reviews.answer(*route, body)
            headers = []
        start_response(_STATUS[status], [("Content-Type", "application/json"),
                                         ("Content-Length", str(len(payload))), *headers])
        return [payload]


def _read_body(environ: dict) -> bytes | None:
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


def create_app(store: GateStore, settings: Settings | None = None,
               clock: Callable[[], datetime] = utcnow, receiver: Blueprint | None = None,
               events=None, sources: Sources | None = None) -> Flask:
    """Build the app around a gate store; ``clock`` is the one place time is read.
    ``receiver`` adds the open/close hooks (admission.receiver); ``events`` records denials
    as Kubernetes Events (admission.events); ``sources`` are the Flux objects the hold points
    look up (what each source serves, HelmReleases; none when not given)."""
    settings = settings or Settings()
    app = Flask("admission")
    if receiver is not None:
        app.register_blueprint(receiver)
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY
    app.extensions["gate_store"] = store
    app.extensions["gate_settings"] = settings

    app.extensions["gate_sources"] = sources
    trusted_once: list[bool] = []  # set once the Flux object cache has been trusted
    app.wsgi_app = ReviewRoutes(app.wsgi_app, Reviews(store, settings, clock, events, sources))

    @app.get("/healthz")
    def healthz() -> Response:
        return _json({"status": "ok"})

    @app.get("/readyz")
    def readyz() -> Response:
        ready, detail = store.readiness()
        if sources is not None:
            untrusted = sources.untrusted()
            if untrusted is None:
                trusted_once.append(True)
            detail = {**detail, "fluxObjects": {"ready": untrusted is None,
                                                **({"reason": untrusted} if untrusted else {})}}
            # Not ready until the Flux objects are listed once; after that a stale copy is still
            # the best knowledge there is (it only shows what waits and which charts inherit
            # gates), and the gate cache decides readiness (docs/design.md, "Hold points").
            if untrusted is not None and not trusted_once:
                ready = False
                detail.setdefault("reason", untrusted)
        return _json({"ready": ready, **detail}, 200 if ready else 503)

    @app.get("/metrics")
    def prometheus() -> Response:
        payload, content_type = metrics.exposition(store, clock)
        return Response(payload, mimetype=None, content_type=content_type)

    @app.errorhandler(HTTPException)
    def http_error(err: HTTPException) -> Response:
        return _json({"error": err.description or err.name}, err.code or 400)

    @app.errorhandler(Exception)
    def unexpected(err: Exception) -> Response:
        log.exception("unexpected error", extra={"path": request.path})
        return _json({"error": "internal error; see the server log"}, 500)

    return app
