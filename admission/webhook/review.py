"""AdmissionReview v1/v1beta1: decoding, and response constructors (the shapes: admission.core.admission.review).

Two error families, as in kopf: a bad *operation* is an ordinary response with
``allowed: false``; a bad *review* (not JSON, wrong kind, missing fields) raises
ReviewError, which the HTTP layer answers with 400 and the reason.
"""

from __future__ import annotations

import base64
from typing import Any, cast

import orjson

from admission.core.admission.review import AdmissionResponse, AdmissionReview
from admission.core.base import names
from admission.core.base.names import OPERATIONS

API_VERSIONS = names.ADMISSION_API_VERSIONS
MAX_MESSAGE = 4000  # the API server shows messages whole; keep them bounded
MAX_UID = 256  # the API server's uids are 36
# Arrays and objects in one review. Decoding holds the worker's GIL (orjson) for about 0.3 us
# per container, more as they multiply: a 6 MiB body of empty lists (2 million) held it for
# 0.75 s, stalling every small review of that worker. Real Flux objects carry one container per
# ~90 bytes, so two 3 MiB objects have about 70,000; this leaves room for 3.5 times that.
MAX_CONTAINERS = 256 * 1024
_COUNTED_FROM = 64 * 1024  # a smaller body cannot hold more; counting costs 0.7 ms per MiB


class ReviewError(ValueError):
    """The review itself is malformed; the message says what is wrong."""


def _require(condition: bool, reason: str) -> None:
    if not condition:
        raise ReviewError(reason)


def _optional(request: dict[str, Any], key: str, kind: type | tuple[type, ...], what: str) -> None:
    value = request.get(key)
    if value is not None and not isinstance(value, kind):  # (the message is built only when wrong)
        raise ReviewError(f"request.{key} must be {what}")


# Every review passes these checks: their messages are written once, not per review.
_WRONG_KIND = f"kind must be {names.ADMISSION_REVIEW_KIND}"
_WRONG_API_VERSION = f"apiVersion must be one of {', '.join(API_VERSIONS)}"
_WRONG_OPERATION = f"request.operation must be one of {', '.join(OPERATIONS)}"


def parse_review(body: bytes) -> AdmissionReview:
    """Decode and check an AdmissionReview request body; raise ReviewError."""
    if len(body) > _COUNTED_FROM:
        # An upper bound: brackets inside strings count too, which only errs on the safe side.
        containers = body.count(b"[") + body.count(b"{")
        _require(
            containers <= MAX_CONTAINERS,
            f"body has up to {containers} arrays and objects, more than "
            f"{MAX_CONTAINERS}: a review that costly to decode would stall this server's other reviews",
        )
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as err:
        raise ReviewError(f"body is not valid JSON: {err}") from None
    _require(isinstance(doc, dict), "body must be a JSON object (an AdmissionReview)")
    _require(doc.get("kind") == names.ADMISSION_REVIEW_KIND, _WRONG_KIND)
    _require(doc.get("apiVersion") in API_VERSIONS, _WRONG_API_VERSION)
    request = doc.get("request")
    _require(isinstance(request, dict), "request must be an object")
    uid = request.get("uid")
    _require(isinstance(uid, str) and uid != "", "request.uid must be a non-empty string")
    if len(uid) > MAX_UID:
        raise ReviewError(f"request.uid is {len(uid)} characters long, more than {MAX_UID}")
    gvk = request.get("kind")
    _require(
        isinstance(gvk, dict)
        and all(isinstance(gvk.get(k), str) for k in ("group", "version", "kind"))
        and gvk["kind"] != "",
        "request.kind must have string group, version and kind",
    )
    _require(request.get("operation") in OPERATIONS, _WRONG_OPERATION)
    user = request.get("userInfo")
    _require(isinstance(user, dict), "request.userInfo must be an object")
    _require(isinstance(user.get("username", ""), str), "request.userInfo.username must be a string")
    groups = user.get("groups")
    _require(
        groups is None or (isinstance(groups, list) and all(isinstance(g, str) for g in groups)),
        "request.userInfo.groups must be a list of strings",
    )
    for key in ("object", "oldObject", "options"):
        _optional(request, key, dict, "an object or null")
    for key in ("subResource", "name", "namespace"):
        _optional(request, key, str, "a string")
    _optional(request, "dryRun", bool, "a boolean")
    operation = request["operation"]
    _require(
        operation != "CREATE" or isinstance(request.get("object"), dict), "a CREATE needs request.object"
    )
    _require(
        operation != "UPDATE"
        or (isinstance(request.get("object"), dict) and isinstance(request.get("oldObject"), dict)),
        "an UPDATE needs request.object and request.oldObject",
    )
    return cast(AdmissionReview, doc)


def _bounded(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 1] + "…"


def allowed(*, warnings: list[str] | None = None, audit: dict[str, str] | None = None) -> AdmissionResponse:
    """Let the request through, optionally with warnings kubectl prints and audit annotations."""
    response: AdmissionResponse = {"allowed": True}
    if warnings:
        response["warnings"] = [_bounded(w) for w in warnings]
    if audit:
        response["auditAnnotations"] = {k: _bounded(v) for k, v in audit.items()}
    return response


def denied(message: str, *, code: int = 403, reason: str = "Forbidden") -> AdmissionResponse:
    """Refuse the request with a message a person can act on."""
    return {"allowed": False, "status": {"code": code, "reason": reason, "message": _bounded(message)}}


def patched(operations: list[dict[str, Any]], **kwargs: Any) -> AdmissionResponse:
    """Let the request through, changed by a JSONPatch."""
    response = allowed(**kwargs)
    if operations:
        response["patchType"] = names.JSON_PATCH
        response["patch"] = base64.b64encode(orjson.dumps(operations)).decode("ascii")
    return response


def errored(message: str, *, code: int = 500) -> AdmissionResponse:
    """Refuse the request because we failed to judge it (fail closed)."""
    return denied(message, code=code, reason="InternalError")


def complete(review: AdmissionReview, response: AdmissionResponse) -> dict[str, Any]:
    """The one place a response gets the request's uid and the review's apiVersion."""
    response["uid"] = review["request"]["uid"]
    return {"apiVersion": review["apiVersion"], "kind": names.ADMISSION_REVIEW_KIND, "response": response}
