"""The Flask application: decode a review, call a handler, encode the answer."""

from __future__ import annotations

import logging
import time
from datetime import datetime, timezone
from typing import Callable

import orjson
from flask import Blueprint, Flask, Response, request
from werkzeug.exceptions import HTTPException

from . import handlers, metrics, names
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


def _verdict(decision: Decision, response: dict) -> str:
    if decision.exempt:
        return "exempt"
    if not response.get("allowed"):
        return "error" if response.get("status", {}).get("code") == 500 else "denied"
    if decision.held:
        return "audited"
    return "patched" if "patch" in response else "allowed"


def _count(endpoint: str, review: AdmissionReview, outcome: Outcome, settings: Settings, started: float) -> None:
    req = review["request"]
    kind = req["kind"]
    # Only our kinds become label values: anything else could grow the series without bound.
    kind_label = kind["kind"] if names.is_gated_kind(kind["group"], kind["kind"]) else "other"
    operation = req["operation"] + ("/status" if req.get("subResource") == "status" else "")
    mode = outcome.decision.mode if outcome.decision.held else settings.mode
    metrics.REVIEWS.labels(endpoint, kind_label, operation, _verdict(outcome.decision, outcome.response), mode).inc()
    metrics.DURATION.labels(endpoint).observe(time.perf_counter() - started)


def create_app(store: GateStore, settings: Settings | None = None,
               clock: Callable[[], datetime] = utcnow, receiver: Blueprint | None = None,
               events=None) -> Flask:
    """Build the app around a gate store; ``clock`` is the one place time is read.
    ``receiver`` adds the open/close hooks (admission.receiver); ``events`` records denials
    as Kubernetes Events (admission.events)."""
    settings = settings or Settings()
    app = Flask("admission")
    if receiver is not None:
        app.register_blueprint(receiver)
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY
    app.extensions["gate_store"] = store
    app.extensions["gate_settings"] = settings

    def review_view(handler: Handler, fail_open: bool) -> Response:
        started = time.perf_counter()
        review = parse_review(request.get_data(cache=False))
        now = clock()
        try:
            outcome = handler(review["request"], store.lookup, now, settings)
        except RecursionError:
            # orjson decodes 1024 levels; comparing or printing ~1000 exceeds Python's limit.
            raise ReviewError("request nests values too deeply to be judged") from None
        except Exception as err:  # a bug must not become a 500 or a crashed worker
            log.exception("handler failed", extra={"uid": review["request"]["uid"]})
            response = allowed(warnings=[f"gate-admission could not evaluate this request: {err}"]) if fail_open \
                else errored(f"gate-admission could not evaluate this request: {err}")
            outcome = Outcome(response, Decision(allowed=fail_open))
        endpoint = "validate" if handler is handlers.validate else "mutate"
        if endpoint == "validate":
            _log_decision(review, outcome.decision, bool(review["request"].get("dryRun")))
            if events is not None and outcome.decision.held and not outcome.decision.allowed:
                events.record(review["request"], outcome.decision.message or "", now)
        body = _json(complete(review, outcome.response))
        _count(endpoint, review, outcome, settings, started)
        return body

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

    @app.get("/metrics")
    def prometheus() -> Response:
        payload, content_type = metrics.exposition(store, clock)
        return Response(payload, mimetype=None, content_type=content_type)

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
