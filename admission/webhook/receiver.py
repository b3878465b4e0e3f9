"""``POST /hooks/gates/<ns>/<name>/<open|close>``: open and close gates from CI and ChatOps.

Every call needs ``Authorization: Bearer <token>``; the token comes from a file (a mounted
Secret), re-read when it changes (a deleted file accepts no token), and is compared in constant
time. The token is checked first; then calls are rate limited per caller (remote address), with
failed authentications limited apart, so a flood of bad calls cannot lock out good ones.
The body is optional JSON: ``{"message": "...", "for": "2h", "requestedBy": "..."}``.
``requestedBy`` is what the caller says and is recorded as such: the token proves the call
came from someone holding it, not who they are (``IDENTITY for 'bob' (unverified)``).
"""

from __future__ import annotations

import base64
import hmac
import logging
import os
import threading
import time
from collections import OrderedDict
from datetime import datetime
from typing import Callable

import orjson
from flask import Blueprint, Response, request

from admission.core import names
from admission.core.toggles import ACTIONS, toggle_patch

log = logging.getLogger("admission.receiver")
MAX_MESSAGE = 1024
FIELDS = {"message", "for", "requestedBy"}
IDENTITY = "gate-admission-receiver"  # who a toggle made with the receiver's token is recorded as
MAX_CALLERS = 1024  # rate-limit buckets kept per worker (least recently used go first)


class TokenFile:
    """The expected bearer token, from a file re-read when its modification time changes."""

    def __init__(self, path: str):
        self.path = path
        self._stamp: tuple | None = None
        with open(path, "rb") as handle:  # a missing file is an error at start, not later
            self._token = handle.read().strip()
        if not self._token:
            raise ValueError(f"token file {path} is empty")

    def current(self) -> bytes:
        try:
            st = os.stat(self.path)
            stamp = (st.st_mtime_ns, st.st_size)
            if stamp != self._stamp:
                with open(self.path, "rb") as handle:
                    self._token, self._stamp = handle.read().strip(), stamp
        except FileNotFoundError:
            # Deleted: revoked. (The kubelet updates a mounted Secret by swapping a symlink,
            # so the file never goes missing during an update.)
            if self._token:
                log.warning("token file is gone: no token is accepted", extra={"file": self.path})
            self._token, self._stamp = b"", None
        except OSError:
            pass  # unreadable for a moment: keep the last token
        return self._token

    def matches(self, header: str | None, basic: bool = False) -> bool:
        """Whether an Authorization header carries the token: as a bearer token, or (``basic``)
        as the password of basic auth, whatever the user name (calendar apps send only that).
        Compared in constant time."""
        if not header:
            return False
        if header.startswith("Bearer "):
            given = header[len("Bearer "):].strip().encode()
        elif basic and header.startswith("Basic "):
            try:
                given = base64.b64decode(header[len("Basic "):].strip(), validate=True).partition(b":")[2]
            except ValueError:
                return False
        else:
            return False
        expected = self.current()
        return bool(expected) and hmac.compare_digest(given, expected)


class RateLimit:
    """A token bucket: ``rate`` calls a second on average, bursts of ``burst``."""

    def __init__(self, rate: float = 5.0, burst: int = 10, clock: Callable[[], float] = time.monotonic):
        self.rate, self.burst, self.clock = rate, burst, clock
        self._tokens, self._at = float(burst), clock()
        self._lock = threading.Lock()

    def allow(self) -> bool:
        with self._lock:
            now = self.clock()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
            self._at = now
            if self._tokens < 1:
                return False
            self._tokens -= 1
            return True


class CallerLimits:
    """One token bucket per caller, as ``template`` (rate and burst), for the MAX_CALLERS
    callers seen most recently."""

    def __init__(self, template: RateLimit):
        self.template = template
        self._buckets: OrderedDict[str, RateLimit] = OrderedDict()
        self._lock = threading.Lock()

    def allow(self, caller: str) -> bool:
        with self._lock:
            bucket = self._buckets.pop(caller, None)
            if bucket is None:
                bucket = RateLimit(self.template.rate, self.template.burst, self.template.clock)
            self._buckets[caller] = bucket
            while len(self._buckets) > MAX_CALLERS:
                self._buckets.popitem(last=False)
        return bucket.allow()


def _json(payload: dict, status: int, **headers: str) -> Response:
    return Response(orjson.dumps(payload), status=status, mimetype="application/json", headers=headers)


def _body() -> tuple[dict | None, str | None]:
    raw = request.get_data(cache=False)
    if not raw.strip():
        return {}, None
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None, "body must be JSON such as {\"message\": \"...\", \"for\": \"2h\"}"
    if not isinstance(body, dict):
        return None, "body must be a JSON object"
    unknown = set(body) - FIELDS
    if unknown:
        return None, f"unknown fields {sorted(unknown)}: use message, for, requestedBy"
    for key in FIELDS & set(body):
        if not isinstance(body[key], str) or len(body[key]) > MAX_MESSAGE:
            return None, f"{key} must be a string of at most {MAX_MESSAGE} characters"
    return body, None


def blueprint(tokens: TokenFile, patch_gate: Callable[[str, str, dict], None], clock: Callable[[], datetime],
              limit: RateLimit | None = None, record: Callable[[str], None] = lambda result: None) -> Blueprint:
    """The receiver's routes; ``patch_gate(namespace, name, patch)`` writes the annotations and
    raises LookupError for a missing gate, PermissionError when we may not write it."""
    hooks = Blueprint("receiver", __name__)
    limit = limit or RateLimit()
    callers, failures = CallerLimits(limit), CallerLimits(limit)

    @hooks.post("/hooks/gates/<namespace>/<name>/<action>")
    def toggle(namespace: str, name: str, action: str) -> Response:
        def answer(result: str, payload: dict, status: int, **headers: str) -> Response:
            record(result)
            return _json(payload, status, **headers)

        if action not in ACTIONS:
            return answer("not_found", {"error": f"no hook {action!r}: use open or close"}, 404)
        caller = request.remote_addr or "unknown"
        if not tokens.matches(request.headers.get("Authorization")):
            if not failures.allow(caller):
                return answer("rate_limited", {"error": "too many requests; try again shortly"}, 429,
                              **{"Retry-After": "1"})
            return answer("unauthorized", {"error": "missing or wrong bearer token"}, 401,
                          **{"WWW-Authenticate": 'Bearer realm="gate-admission"'})
        if not callers.allow(caller):
            return answer("rate_limited", {"error": "too many requests; try again shortly"}, 429, **{"Retry-After": "1"})
        body, problem = _body()
        if problem:
            return answer("bad_request", {"error": problem}, 400)
        said = body.get("requestedBy")
        requested_by = f"{IDENTITY} for {said!r} (unverified)" if said else IDENTITY
        try:
            patch = toggle_patch(action, clock(), body.get("message"), requested_by, body.get("for"))
        except ValueError as err:
            return answer("bad_request", {"error": str(err)}, 400)
        try:
            patch_gate(namespace, name, patch)
        except LookupError:
            return answer("not_found", {"error": f"gate {namespace}/{name} not found"}, 404)
        except PermissionError as err:
            return answer("error", {"error": f"not allowed to change gate {namespace}/{name}: {err}"}, 502)
        annotations = patch["metadata"]["annotations"]
        verb = "opening" if action == "open" else "closing"
        log.info(f"{verb} gate: '{body.get('message') or ''}'", extra={
            "closed": str(action == "close").lower(), "requestedBy": requested_by, "via": "receiver",
            "Gate": {"namespace": namespace, "name": name}})
        result = {"gate": f"{namespace}/{name}", "action": action,
                  "requestedAt": annotations[names.OPEN_ANNOTATION if action == "open"
                                             else names.CLOSE_ANNOTATION]}
        if action == "open" and body.get("for"):
            result["closesAt"] = annotations[names.CLOSE_ANNOTATION]
        return answer("ok", result, 200)

    return hooks
