"""One admission request, read once at the entry: the typed, immutable value the core judges.

Below the entry (``decision.decide``, ``mutation.judge``) nothing reads the raw request or
looks a kind up by its name: the Flux kind's row, the operation, the subresource, the objects
and who asks are fields, and what new content a status write carries is read on first use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from admission.core.admission.review import AdmissionRequest, Subject, subject
from admission.core.base import names
from admission.core.base.objects import Object
from admission.core.flux import kinds
from admission.core.flux.holdmessage import NewContent


@dataclass(frozen=True)
class User:
    """Who asks: the request's userInfo."""

    name: str
    groups: tuple[str, ...]


@dataclass(frozen=True, init=False)
class Admission:
    """A request on a gated Flux kind, as the core reads it."""

    row: kinds.FluxKind
    operation: names.Operation
    sub_resource: str  # "" for the object itself
    old: Object | None
    new: Object | None
    user: User
    request: AdmissionRequest | None  # read again only for ``about`` (None: a request given by its parts)
    # What is read on first use, kept (``about``, ``carried``): most requests are decided before a
    # message or new content is needed. A cache of the fields' pure functions, never a field itself.
    memo: dict[str, Any] = field(repr=False, compare=False)

    def __init__(
        self,
        row: kinds.FluxKind,
        operation: names.Operation,
        sub_resource: str,
        old: Object | None,
        new: Object | None,
        user: User,
        request: AdmissionRequest | None,
        memo: dict[str, Any],
    ):
        # One is built per request: filled at once, as a frozen dataclass's own __init__ (a
        # call per field) takes twice as long. Frozen all the same: no field can be set.
        self.__dict__.update(
            row=row,
            operation=operation,
            sub_resource=sub_resource,
            old=old,
            new=new,
            user=user,
            request=request,
            memo=memo,
        )

    @property
    def kind(self) -> str:
        return self.row.kind

    @property
    def about(self) -> Subject:
        """Which object the request is about (names it in messages)."""
        found: Subject | None = self.memo.get("about")
        if found is None:
            found = self.memo["about"] = subject(self.request) if self.request is not None else NOBODY
        return found

    @property
    def carried(self) -> NewContent | None:
        """``(waits, serves)`` when this write carries new content (a status write's), read once."""
        memo = self.memo
        if "carried" not in memo:
            # Only a status write carries content; a kind without content carries none.
            memo["carried"] = (
                self.row.content.brings(self.old, self.new) if self.sub_resource == "status" else None
            )
        found: NewContent | None = memo["carried"]
        return found

    @property
    def by_kubernetes(self) -> bool:
        """The request is Kubernetes' own controllers' (the garbage collector, the namespace controller)."""
        return self.user.name in names.SYSTEM_DELETERS

    @property
    def status_update(self) -> bool:
        return self.sub_resource == "status" and self.operation == "UPDATE"


def admission_of(request: AdmissionRequest) -> Admission | None:
    """The request read once, or None when its kind is not one we gate."""
    kind = request["kind"]
    row = kinds.BY_GROUP_KIND.get((kind.get("group", ""), kind.get("kind", "")))
    if row is None:
        return None
    user = request["userInfo"]
    return Admission(
        row,
        request["operation"],
        request.get("subResource") or "",
        request.get("oldObject"),
        request.get("object"),
        User(user.get("username", ""), tuple(user.get("groups") or ())),
        request,
        {},
    )


NOBODY = Subject("", "", "", "", "")  # what a request given by its parts is about
