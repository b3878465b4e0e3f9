"""``kubectl gate check`` against a cluster: each object applied server-side with ``dryRun=All``,
so that the API server merges and defaults it and calls the real webhooks as the real caller,
persisting nothing; the verdict is read from its answer, and who the caller is from a
SelfSubjectReview (docs/decisions/0094-check-asks-the-api-server.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from admission.cli.cluster import Cluster
from admission.core.base import names
from admission.core.flux import kinds

# The verdict tokens (-o json "verdict"): the webhook's three answers, and an object the API
# server did not let the webhook judge (or whose judgement it did not return): never "allowed".
DENIED, AUDITED, ALLOWED, UNJUDGED = "denied", "audited", "allowed", "unjudged"

# What the API server prefixes to our validating webhook's denial (403).
OUR_DENIAL = f'admission webhook "{names.VALIDATE_WEBHOOK}" denied the request: '
# Why an object could not be judged (-o json "reason").
WEBHOOK_DOWN, FORBIDDEN, INVALID, CONFLICT, NOT_FOUND, REFUSED, FAILED = (
    "webhook-unavailable",
    "forbidden",
    "invalid",
    "conflict",
    "not-found",
    "refused",
    "error",
)
# kubectl apply --server-side's own field manager: by default, the dry-run is its apply.
DEFAULT_FIELD_MANAGER = "kubectl"
APPLY_PATCH = "application/apply-patch+yaml"
# A Warning header's value (RFC 7234): code, agent, quoted text (escaped as Go's strconv.Quote).
_WARNING = re.compile(r'^\d{3} \S+ "((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Identity:
    """Who the API server authenticated (SelfSubjectReview's userInfo), None where it cannot say."""

    username: str | None
    groups: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"username": self.username, "groups": list(self.groups)}

    def text(self) -> str:
        if self.username is None:
            return "unknown (the API server answers no SelfSubjectReview: Kubernetes before 1.28)"
        return f"{self.username} (groups: {', '.join(self.groups) or 'none'})"


@dataclass(frozen=True)
class Answer:
    """The API server's answer to one dry-run: the verdict, its message and, when the object
    could not be judged, why (one of the reasons above), with the HTTP status."""

    verdict: str
    message: str | None
    reason: str | None = None
    status: int | None = None
    other_warnings: tuple[str, ...] = ()


def who_am_i(cluster: Cluster) -> Identity:
    """The caller as the API server authenticates it (impersonation included)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    body = client.V1SelfSubjectReview(api_version="authentication.k8s.io/v1", kind="SelfSubjectReview")
    try:
        review = client.AuthenticationV1Api(cluster.api).create_self_subject_review(body=body)
    except ApiException as err:
        if err.status == 404:  # no authentication.k8s.io/v1 SelfSubjectReview before 1.28
            return Identity(None)
        raise
    info = review.status.user_info if review.status else None
    return Identity(
        str(info.username) if info and info.username else None,
        tuple(str(g) for g in (info.groups or ())) if info else (),
    )


def apply_dry_run(cluster: Cluster, obj: dict[str, Any], field_manager: str, force: bool) -> Answer:
    """Server-side apply ``obj`` with dryRun=All, read as the verdict the webhook gave."""
    group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
    found = kinds.lookup(group, str(obj.get("kind", "")))
    assert found is not None  # check sends gated kinds only
    meta = obj["metadata"]
    path = f"/apis/{group}/{version}/namespaces/{meta['namespace']}/{found.plural}/{meta.get('name', '')}"
    # As kubectl apply sends it (its --validate=strict default): a field the schema lacks is an
    # error, not a warning the webhook would judge past.
    query = [
        ("dryRun", "All"),
        ("fieldManager", field_manager),
        ("force", "true" if force else "false"),
        ("fieldValidation", "Strict"),
    ]
    params = cluster.api.param_serialize(
        method="PATCH",
        resource_path=path,
        query_params=query,
        header_params={"Content-Type": APPLY_PATCH, "Accept": "application/json"},
        body=obj,
        auth_settings=["BearerToken"],
    )
    response = cluster.api.call_api(*params)
    raw = response.read()
    warnings = _warnings(response.headers)
    if 200 <= response.status < 300:
        ours = [w for w in warnings if w.startswith(names.AUDIT_WARNING)]
        others = tuple(w for w in warnings if w not in ours)
        if ours:
            return Answer(AUDITED, "; ".join(ours), other_warnings=others)
        return Answer(ALLOWED, None, other_warnings=others)
    return _refusal(response.status, _status_message(raw, str(response.reason)))


def _refusal(status: int, message: str) -> Answer:
    """A refused dry-run: our webhook's denial, or why the object could not be judged."""
    if status == 403 and message.startswith(OUR_DENIAL):
        return Answer(DENIED, message[len(OUR_DENIAL) :])
    if "failed calling webhook" in message or "failed to call webhook" in message:
        return Answer(UNJUDGED, message, WEBHOOK_DOWN, status)
    if status == 403 and "admission webhook" in message and "denied the request" in message:
        return Answer(UNJUDGED, message, REFUSED, status)  # another webhook refused it first
    reason = {401: FORBIDDEN, 403: FORBIDDEN, 404: NOT_FOUND, 409: CONFLICT, 400: INVALID, 422: INVALID}
    return Answer(UNJUDGED, message, reason.get(status, FAILED), status)


def _status_message(raw: bytes, fallback: str) -> str:
    try:
        said = orjson.loads(raw).get("message")
    except (orjson.JSONDecodeError, AttributeError):
        said = None
    return str(said) if said else fallback


def _warnings(headers: Any) -> list[str]:
    """The texts of the response's Warning headers, each on its own."""
    values = headers.getlist("Warning") if hasattr(headers, "getlist") else []
    found = []
    for value in values:
        match = _WARNING.match(str(value))
        found.append(_unquote(match.group(1)) if match else str(value))
    return found


def _unquote(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), text)
