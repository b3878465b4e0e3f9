"""``POST /hooks/gates/<ns>/<name>/<open|close|approve>``: open, close and approve from CI and ChatOps.

Every call needs ``Authorization: Bearer <token>``; the tokens come from a file (a mounted
Secret), re-read when it changes (a file that is deleted, unreadable, empty or not a file
accepts no token), and are compared in constant time (admission.webhook.receivertokens: one bare
token, or named tokens scoped by namespace, gate and action). The token is checked first; then the
namespace and name must be a Kubernetes namespace's and object's (DNS-1123); then calls are rate
limited per caller (remote address), with failed authentications limited apart, so a flood of
bad calls cannot lock out good ones; then the token's scope must allow the call (403). Under ``serve`` the limits are shared by every worker of
the pod (a table in a file all workers map, under a file lock).
The body is optional JSON: ``{"message": "...", "for": "2h", "requestedBy": "..."}``.
``requestedBy`` is what the caller says and is recorded as such: the token proves the call
came from someone holding it, not who they are (``IDENTITY for 'bob' (unverified)``). A token is
one identity: its approvals count as that one approver, whatever ``requestedBy`` says.
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
from flask import Blueprint, Response, request

from admission.core.base import names
from admission.core.gates import approvals, togglestamp
from admission.core.gates.references import is_namespace, is_object_name
from admission.core.gates.toggles import ACTIONS, refuse_controls, toggle_patch
from admission.store.sharedslots import SharedSlots
from admission.webhook.receivertokens import IDENTITY, ReceiverTokens, Token, TokenFile
from admission.webhook.responses import json_response

__all__ = ["IDENTITY", "ReceiverTokens", "Token", "TokenFile", "blueprint"]

log = logging.getLogger("admission.receiver")
MAX_FIELD = 1024  # characters of each body field: message, for, requestedBy, content
FIELDS = {"message", "for", "requestedBy", "content"}  # content: approve only
APPROVE = "approve"  # approve the exact content that waits (docs/decisions/0057)
MAX_CALLERS = 1024  # rate-limit buckets kept per worker (least recently used go first)


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


class SharedCallerLimits(SharedSlots):
    """Token buckets per caller, as ``template`` (rate and burst), shared by every process that
    opens the same ``path``: gunicorn's workers each answer some calls, and a limit kept per
    worker would let each of them grant the whole burst. The file is a table of ``slots``
    buckets (caller hash, tokens, time); callers whose hashes share a slot share nothing: the
    newer one starts a fresh bucket. ``template.clock`` must be one every process reads alike
    (time.monotonic is, on Linux)."""

    _SLOT = struct.Struct("<Qdd")

    def __init__(self, path: str | os.PathLike[str], template: RateLimit, slots: int = MAX_CALLERS):
        super().__init__(path, self._SLOT, slots)
        self.template = template

    def allow(self, caller: str) -> bool:
        key = int.from_bytes(hashlib.blake2b(caller.encode(), digest_size=8).digest(), "big") or 1
        index = key % self.slots
        rate, burst = self.template.rate, float(self.template.burst)
        with self.locked():
            now = self.template.clock()  # under the lock: no write's time is older than the one it replaces
            stored, tokens, at = self.read(index)
            if stored != key:
                tokens, at = burst, now
            tokens = min(burst, tokens + max(0.0, now - at) * rate)
            allowed = tokens >= 1
            self.write(index, key, tokens - 1 if allowed else tokens, now)
        return bool(allowed)


def _body() -> tuple[dict[str, str], None] | tuple[None, str]:
    """The call's fields, or what is wrong with its body."""
    raw = request.get_data(cache=False)
    if not raw.strip():
        return {}, None
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None, 'body must be JSON such as {"message": "...", "for": "2h"}'
    if not isinstance(body, dict):
        return None, "body must be a JSON object"
    unknown = set(body) - FIELDS
    if unknown:
        return None, f"unknown fields {sorted(unknown)}: use message, for, requestedBy"
    for key in sorted(FIELDS & set(body)):
        if not isinstance(body[key], str) or len(body[key]) > MAX_FIELD:
            return None, f"{key} must be a string of at most {MAX_FIELD} characters"
    try:
        refuse_controls(**{key: body[key] for key in sorted(FIELDS & set(body))})
    except ValueError as err:
        return None, str(err)
    return body, None


def blueprint(
    tokens: ReceiverTokens,
    patch_gate: Callable[[str, str, dict[str, Any]], None],
    clock: Callable[[], datetime],
    limit: RateLimit | None = None,
    record: Callable[[str], None] = lambda result: None,
    limits_dir: str | os.PathLike[str] | None = None,
) -> Blueprint:
    """The receiver's routes; ``patch_gate(namespace, name, patch)`` writes the annotations and
    raises LookupError for a missing gate, PermissionError when we may not write it. With
    ``limits_dir`` (a directory every worker shares) the rate limits hold across processes."""
    hooks = Blueprint("receiver", __name__)
    limit = limit or RateLimit()
    callers: CallerLimits | SharedCallerLimits
    failures: CallerLimits | SharedCallerLimits
    if limits_dir is not None:
        callers = SharedCallerLimits(Path(limits_dir) / "receiver-callers", limit)
        failures = SharedCallerLimits(Path(limits_dir) / "receiver-failures", limit)
    else:
        callers, failures = CallerLimits(limit), CallerLimits(limit)

    @hooks.post("/hooks/gates/<namespace>/<name>/<action>")
    def toggle(namespace: str, name: str, action: str) -> Response:
        def answer(result: str, payload: Mapping[str, object], status: int, **headers: str) -> Response:
            record(result)
            return json_response(payload, status, **headers)

        if action not in ACTIONS and action != APPROVE:
            return answer("not_found", {"error": f"no hook {action!r}: use open, close or approve"}, 404)
        caller = request.remote_addr or "unknown"
        token = tokens.caller(request.headers.get("Authorization"))
        if token is None:
            if not failures.allow(caller):
                return answer(
                    "rate_limited",
                    {"error": "too many requests; try again shortly"},
                    429,
                    **{"Retry-After": "1"},
                )
            return answer(
                "unauthorized",
                {"error": "missing or wrong bearer token"},
                401,
                **{"WWW-Authenticate": 'Bearer realm="gate-admission"'},
            )
        if not (is_namespace(namespace) and is_object_name(name)):
            return answer(
                "bad_request",
                {
                    "error": "namespace and name must be a Gate's (DNS-1123: lower case "
                    "letters, digits, '-', and '.' in names)"
                },
                400,
            )
        if not callers.allow(caller):
            return answer(
                "rate_limited", {"error": "too many requests; try again shortly"}, 429, **{"Retry-After": "1"}
            )
        refused = token.refuses(namespace, name, action)
        if refused:
            return answer("forbidden", {"error": refused}, 403)
        body, problem = _body()
        if body is None:
            return answer("bad_request", {"error": problem}, 400)
        said = body.get("requestedBy")
        if action == APPROVE:
            return approve(namespace, name, body, token, answer)
        requested_by = f"{token.identity} for {said!r} (unverified)" if said else token.identity
        try:
            patch = toggle_patch(action, clock(), body.get("message"), requested_by, body.get("for"))
        except ValueError as err:
            return answer("bad_request", {"error": str(err)}, 400)
        # The token, for our webhook to record beside the account it authenticated (docs/decisions/0096).
        patch["metadata"]["annotations"][names.TOGGLED_BY_ANNOTATION] = togglestamp.relayed(token.identity)
        try:
            patch_gate(namespace, name, patch)
        except LookupError:
            return answer("not_found", {"error": f"gate {namespace}/{name} not found"}, 404)
        except PermissionError as err:
            return answer("error", {"error": f"not allowed to change gate {namespace}/{name}: {err}"}, 502)
        annotations = patch["metadata"]["annotations"]
        verb = "opening" if action == "open" else "closing"
        log.info(
            f"{verb} gate: '{body.get('message') or ''}'",
            extra={
                "closed": str(action == "close").lower(),
                "requestedBy": requested_by,
                "via": "receiver",
                "Gate": {"namespace": namespace, "name": name},
            },
        )
        result = {
            "gate": f"{namespace}/{name}",
            "action": action,
            "requestedAt": annotations[names.OPEN_ANNOTATION if action == "open" else names.CLOSE_ANNOTATION],
        }
        if action == "open" and body.get("for"):
            result["closesAt"] = annotations[names.CLOSE_ANNOTATION]
        return answer("ok", result, 200)

    def approve(
        namespace: str, name: str, body: dict[str, str], token: Token, answer: Callable[..., Response]
    ) -> Response:
        """An approval of ``content`` for ``for`` (Kind/namespace/name, default every object), as
        the receiver: the webhook records "<the token's identity> via <the receiver's service
        account>" when the server lists that account in --approval-relays, else the account
        alone; the caller's ``requestedBy`` is kept beside it, shown and never counted."""
        target, content_text = body.get("for") or approvals.ANY, body.get("content") or ""
        said = body.get("requestedBy") or ""
        value = approvals.value(
            content_text, target, body.get("message") or "", None, token.identity, requested_by=said or None
        )
        why = approvals.refuse(
            value, approvals.Policy(message_required=False)
        )  # the gate's own rule: the webhook
        if why:
            return answer("bad_request", {"error": why}, 400)
        key = names.APPROVAL_ANNOTATION_PREFIX + approvals.new_id(
            content_text, target, f"{token.identity}/{said}@{clock().timestamp()}"
        )
        try:
            patch_gate(namespace, name, {"metadata": {"annotations": {key: value}}})
        except LookupError:
            return answer("not_found", {"error": f"gate {namespace}/{name} not found"}, 404)
        except PermissionError as err:
            return answer("error", {"error": f"approval of gate {namespace}/{name} not recorded: {err}"}, 502)
        log.info(
            "approval written",
            extra={
                "via": "receiver",
                "token": token.name,
                "requestedBy": said,
                "content": content_text,
                "Gate": {"namespace": namespace, "name": name},
            },
        )
        return answer(
            "ok",
            {
                "gate": f"{namespace}/{name}",
                "action": APPROVE,
                "content": content_text,
                "for": target,
                "approval": key,
            },
            200,
        )

    return hooks
