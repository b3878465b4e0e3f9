"""AdmissionReview shapes as the API server sends them (TypedDicts over plain dicts), and the request's subject.

``Required`` marks what ``admission.webhook.review.parse_review`` checks before any handler
sees a request: the rest may be absent (or null), and is read with ``.get``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Required, TypedDict

from admission.core.base.names import AdmissionApiVersion, AdmissionReviewKind, Operation, PatchType
from admission.core.base.objects import metadata


class GroupVersionKind(TypedDict):
    group: str
    version: str
    kind: str


class UserInfo(TypedDict, total=False):
    username: str
    uid: str
    groups: list[str]
    extra: dict[str, list[str]]


class AdmissionRequest(TypedDict, total=False):
    uid: Required[str]  # not empty, at most MAX_UID characters
    kind: Required[GroupVersionKind]  # kind not empty
    resource: dict[str, str]
    subResource: str
    name: str
    namespace: str
    operation: Required[Operation]  # a CREATE has object, an UPDATE object and oldObject
    userInfo: Required[UserInfo]
    object: dict[str, Any] | None
    oldObject: dict[str, Any] | None
    dryRun: bool
    options: dict[str, Any] | None


class AdmissionReview(TypedDict):
    apiVersion: AdmissionApiVersion  # the answer is sent back in the same
    kind: AdmissionReviewKind
    request: AdmissionRequest


class Status(TypedDict, total=False):
    code: int
    reason: str
    message: str


class AdmissionResponse(TypedDict, total=False):
    uid: str
    allowed: bool
    status: Status
    patch: str  # base64 of the JSON patch
    patchType: PatchType
    warnings: list[str]
    auditAnnotations: dict[str, str]


@dataclass(frozen=True)
class Subject:
    """Which object a request is about, as far as the request says."""

    kind: str
    namespace: str
    name: str  # "" for a CREATE with only generateName
    generate_name: str
    uid: str  # the stored object's: a CREATE's object is not stored yet, so its uid names nothing

    @property
    def shown_name(self) -> str:
        """The name a message gives it: a CREATE may only have generateName."""
        return self.name or self.generate_name


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def subject(request: AdmissionRequest) -> Subject:
    """The request's own namespace and name first (the API server sets them), then the object's:
    the new one, or the old one when there is none (DELETE). The uid is the stored object's,
    the old one's (UPDATE, DELETE)."""
    old, new = request.get("oldObject"), request.get("object")
    meta = metadata(new if isinstance(new, dict) else old)
    stored = metadata(old or new)
    kind = request.get("kind")
    return Subject(
        kind=_text(kind.get("kind")) if isinstance(kind, dict) else "",
        namespace=_text(request.get("namespace")) or _text(meta.get("namespace")),
        name=_text(request.get("name")) or _text(meta.get("name")),
        generate_name=_text(meta.get("generateName")),
        uid=_text(stored.get("uid")),
    )
