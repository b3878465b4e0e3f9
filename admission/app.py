"""The Flask application: decode a review, call a handler, encode the answer."""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Callable

import orjson
from flask import Blueprint, Flask, Response, request
from werkzeug.exceptions import HTTPException

from . import handlers
from .decision import Decision, Settings
from .handlers import Handler, Outcome
from .review import AdmissionReview, ReviewError, allowed, complete, errored, parse_review
from .store import GateStore

log = logging.getLogger("admission.decisions")
MAX_BODY = 7 * 1024 * 1024  # the API server's own request limit is 3 MiB; leave room for both objects


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def _json(payload: object, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status=status, mimetype="application/json")


def _log_decision(review: AdmissionReview, decision: Decision, dry_run: bool) -> None:
    if not (decision.gated or decision.exempt):
        return
    req = review["request"]
    hold = decision.hold
    fields = {
        "object": {"kind": req["kind"]["kind"], "namespace": req.get("namespace", ""), "name": req.get("name", "")},
        "operation": req["operation"] + (f"/{req['subResource']}" if req.get("subResource") else ""),
        "user": req["userInfo"].get("username", ""),
        "uid": req["uid"],
        "verdict": "exempt" if decision.exempt else ("denied" if not decision.allowed else "audited" if decision.held else "allowed"),
        "mode": decision.mode,
        "change": decision.change,
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
    log.info("admission decision", extra=fields)


def create_app(store: GateStore, settings: Settings | None = None,
               clock: Callable[[], datetime] = utcnow, receiver: Blueprint | None = None) -> Flask:
    """Build the app around a gate store; ``clock`` is the one place time is read.
    ``receiver`` adds the open/close hooks (see admission.receiver)."""
    settings = settings or Settings()
    app = Flask("admission")
    if receiver is not None:
        app.register_blueprint(receiver)
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY
    app.extensions["gate_store"] = store
    app.extensions["gate_settings"] = settings

    def review_view(handler: Handler, fail_open: bool) -> Response:
        review = parse_review(request.get_data(cache=False))
        try:
            outcome = handler(review["request"], store.lookup, clock(), settings)
        except Exception as err:  # a bug must not become a 500 or a crashed worker
            log.exception("handler failed", extra={"uid": review["request"]["uid"]})
            response = allowed(warnings=[f"gate-admission could not evaluate this request: {err}"]) if fail_open \
                else errored(f"gate-admission could not evaluate this request: {err}")
            outcome = Outcome(response, Decision(allowed=fail_open))
        if handler is handlers.validate:
            _log_decision(review, outcome.decision, bool(review["request"].get("dryRun")))
        return _json(complete(review, outcome.response))

    @app.post("/validate")
    def validate() -> Response:
        return review_view(handlers.validate, fail_open=False)

    @app.post("/mutate")
    def mutate() -> Response:
        # Mutation never blocks; validation is where a change is refused.
        return review_view(handlers.mutate, fail_open=True)

    @app.get("/healthz")
    def healthz() -> Response:
        return _json({"status": "ok"})

    @app.get("/readyz")
    def readyz() -> Response:
        ready, detail = store.readiness()
        return _json({"ready": ready, **detail}, 200 if ready else 503)

    @app.errorhandler(ReviewError)
    def bad_review(err: ReviewError) -> Response:
        return _json({"error": str(err)}, 400)

    @app.errorhandler(HTTPException)
    def http_error(err: HTTPException) -> Response:
        return _json({"error": err.description or err.name}, err.code or 400)

    @app.errorhandler(Exception)
    def unexpected(err: Exception) -> Response:
        log.exception("unexpected error", extra={"path": request.path})
        return _json({"error": "internal error; see the server log"}, 500)

    return app
