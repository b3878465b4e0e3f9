"""``GET /calendar.ics``: every gate's closed intervals (``?namespace=``, ``?gate=``, ``?days=``),
read-only, for calendar apps and for spoke clusters' GateKeepers; the bodies come from
``admission.webhook.feeds``."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from flask import Blueprint, Response, request

from admission.core.base.objects import object_key
from admission.observability import metrics
from admission.store import GateStore
from admission.store.calendar import DEFAULT_DAYS, CalendarQuery, calendar_query, to_ics
from admission.webhook.feeds import DEFAULT_QUERY, FIRST_WAIT, RETRY_AFTER, CalendarFeeds, FeedUnavailable
from admission.webhook.receiver import TokenFile
from admission.webhook.responses import json_response

ICS = "text/calendar; charset=utf-8"


def worker_feeds(
    store: GateStore, clock: Callable[[], datetime], first_wait: float = FIRST_WAIT
) -> CalendarFeeds:
    """This worker's own feeds, built by a child process, never in this worker, whose loop
    answers the API server."""
    return CalendarFeeds(
        lambda: store.index,
        clock,
        first_wait=first_wait,
        record=lambda result: metrics.CALENDAR_BUILDS.labels(result).inc(),
    )


def _no_gate(store: GateStore, query: CalendarQuery) -> Response | None:
    """The answer when the query names gates that do not exist; None when some do."""
    namespace, _, gate = query
    if gate and not any(
        name == gate and (not namespace or ns == namespace)
        for ns, name in map(object_key, store.index.gates())
    ):
        # Never an empty calendar: a spoke following a gate that is gone must not read "open".
        return json_response(
            {"error": f"no gate {gate!r}" + (f" in namespace {namespace!r}" if namespace else "")}, 404
        )
    return None


def token_refusal(token: TokenFile | None, authorization: str | None) -> Response | None:
    """None when a request whose ``Authorization`` header is ``authorization`` may read: there is
    no ``token``, or it carries it (bearer, or basic's password: what calendar apps and browsers
    send); else the 401 that asks for it. The calendar's, and the board's beside it."""
    if token is None or token.matches(authorization, basic=True):
        return None
    return json_response(
        {"error": "a valid token is required (Authorization: Bearer, or basic auth)"},
        401,
        **{"WWW-Authenticate": 'Bearer realm="gate calendar", Basic realm="gate calendar"'},
    )


def blueprint(
    store: GateStore, feeds: CalendarFeeds, clock: Callable[[], datetime], token: TokenFile | None = None
) -> Blueprint:
    """The calendar's route; with ``token``, only for callers that carry it (bearer, or basic's
    password). The default feed is built as soon as the store is ready: a fresh server's first
    fetch gets it."""
    feeds.prebuild(DEFAULT_QUERY, lambda: store.readiness()[0])
    route = Blueprint("calendar", __name__)

    @route.get("/calendar.ics")
    def calendar_feed() -> Response:
        """Every gate's closed intervals, as iCalendar."""
        refused = token_refusal(token, request.headers.get("Authorization"))
        if refused is not None:
            return refused
        ready, detail = store.readiness()
        if not ready:
            return json_response(
                {"error": "gate cache not ready; the calendar would be wrong", **detail}, 503
            )
        try:
            query = calendar_query(
                request.args.get("days", str(DEFAULT_DAYS)),
                request.args.get("namespace") or "",
                request.args.get("gate") or "",
            )
        except ValueError as why:
            return json_response({"error": str(why)}, 400)
        missing = _no_gate(store, query)
        if missing is not None:
            return missing
        if (
            query.namespace
            and not query.gate
            and not any(object_key(g)[0] == query.namespace for g in store.index.gates())
        ):
            # No gates there: nothing to build, and no cache entry for whatever a client asks.
            return Response(to_ics([], clock()), content_type=ICS, headers={"Cache-Control": "max-age=60"})
        try:
            body, etag = feeds.tagged(*query)
        except FeedUnavailable as why:
            return json_response({"error": str(why)}, 503, **{"Retry-After": RETRY_AFTER})
        headers = {"Cache-Control": "no-cache", "ETag": etag}  # revalidated each time: a toggle shows at once
        if etag in [tag.strip() for tag in (request.headers.get("If-None-Match") or "").split(",")]:
            return Response(status=304, headers=headers)
        return Response(body, content_type=ICS, headers=headers)

    return route
