"""One admission request, read once at the entry: the typed, immutable value the core judges.

Below the entry (``decision.decide``, ``mutation.judge``) nothing reads the raw request or
looks a kind up by its name: the Flux kind's row, the operation, the subresource, the objects
and who asks are fields, and what new content a status write carries is read on first use.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from admission.core.admission.review import AdmissionRequest, Subject, subject
from admission.core.base import names
from admission.core.base.lazy import Lazy
from admission.core.base.objects import Object
from admission.core.flux import kinds
from admission.core.flux.holdmessage import NewContent


@dataclass(frozen=True)
class User:
    """Who asks: the request's userInfo."""

    name: str
    groups: tuple[str, ...]


@dataclass(frozen=True)
class Admission:
    """A request on a gated Flux kind, as the core reads it."""

    row: kinds.FluxKind
    operation: names.Operation
    sub_resource: str  # "" for the object itself
    old: Object | None
    new: Object | None
    user: User
    # Read on first use: most requests are decided before a message or new content is needed.
    _about: Lazy[Subject] = field(repr=False, compare=False)
    _carried: Lazy[NewContent | None] = field(repr=False, compare=False)

    @property
    def kind(self) -> str:
        return self.row.kind

    @property
    def about(self) -> Subject:
        """Which object the request is about (names it in messages)."""
        return self._about.value

    @property
    def carried(self) -> NewContent | None:
        """``(waits, serves)`` when this write carries new content (a status write's), read once."""
        return self._carried.value

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
    old, new = request.get("oldObject"), request.get("object")
    sub_resource = request.get("subResource") or ""

    def carried() -> NewContent | None:
        # Only a status write carries content; a kind without content carries none.
        return row.content.brings(old, new) if sub_resource == "status" else None

    return Admission(
        row=row,
        operation=request["operation"],
        sub_resource=sub_resource,
        old=old,
        new=new,
        user=User(user.get("username", ""), tuple(user.get("groups") or ())),
        _about=Lazy(lambda: subject(request)),
        _carried=Lazy(carried),
    )
