"""What counts as a change that a closed gate holds back (the table of SPEC §5)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from admission.core.admission.admitted import Admission, User
from admission.core.base import names
from admission.core.base.jsonvalues import same
from admission.core.base.names import Operation
from admission.core.base.objects import Object, metadata
from admission.core.flux import kinds
from admission.core.flux.holdmessage import NewContent
from admission.core.gates.references import Policy, loosens, policy_of

# Fields of spec that are not desired state: suspending is always allowed, and gate
# references are judged as policy (tightening always passes, loosening is held).
_NOT_DESIRED_STATE = ("suspend", "gates")


def desired_spec(obj: Object | None) -> Object:
    """``spec`` without the fields that are not desired state."""
    spec = obj.get("spec") if isinstance(obj, dict) else None
    if not isinstance(spec, dict):
        return {}
    return {k: v for k, v in spec.items() if k not in _NOT_DESIRED_STATE}


MAX_PATHS = 3  # a denial names this many changed paths, then "and N more"
_MAX_VISITS = 100_000  # bounded work for any input


def _key(key: str) -> str:
    return f".{key}" if key.replace("-", "").replace("_", "").isalnum() else f"[{key!r}]"


def changed_paths(old: object, new: object, prefix: str = "spec") -> tuple[list[str], int]:
    """The first few paths where ``old`` and ``new`` differ (``spec.values.podAnnotations``),
    and how many differ in all (counted up to a bound), visiting each value at most once.
    Values differ as ``jsonvalues.same`` says: ``debug: false`` -> ``debug: 0`` is a change."""
    found: list[str] = []
    count = 0
    # (path, old, new, inside): inside a pair that == calls equal but ``same`` does not, every
    # value is looked at (a bool may hide anywhere below), without asking ``same`` again.
    stack: list[tuple[str, object, object, bool]] = [(prefix, old, new, False)]
    visits = 0
    while stack and visits < _MAX_VISITS:
        path, a, b, inside = stack.pop()
        visits += 1
        if isinstance(a, dict) and isinstance(b, dict):
            keys = list(b) + [k for k in a if k not in b]
            pairs = [(key, a.get(key, _ABSENT), b.get(key, _ABSENT)) for key in keys]
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            pairs = list(zip(range(len(b)), a, b, strict=True))
        else:
            if not (inside and same(a, b)):
                count += 1
                if len(found) < MAX_PATHS:
                    found.append(path)
            continue
        for key, x, y in reversed(pairs):  # the stack pops the first key first
            if inside or x is _ABSENT or y is _ABSENT or x != y:
                below = inside
            elif not same(x, y):
                below = True
            else:
                continue
            stack.append((f"{path}[{key}]" if isinstance(a, list) else path + _key(str(key)), x, y, below))
    return found, count


_ABSENT = object()


def describe_paths(paths: list[str], count: int) -> str:
    """``spec.a, spec.b and 2 more``."""
    text = ", ".join(paths)
    return text + (f" and {count - len(paths)} more" if count > len(paths) else "")


SPEC_CHANGE = "spec change"
OWNERS_CHANGE = "owner references change"


# ---- the change a request makes: one of a closed set, each with its words ----------------------


@dataclass(frozen=True)
class Creation:
    text: ClassVar[str] = "creation"

    def explain(self, message: str) -> str:
        """The held message, with what this change adds to it (nothing: the operation says it)."""
        return message


@dataclass(frozen=True)
class Deletion:
    text: ClassVar[str] = "deletion"

    def explain(self, message: str) -> str:
        return message


@dataclass(frozen=True)
class SpecChange:
    """The desired state changes: a denial names the paths (a label-only apply can also drop a null)."""

    old: Object | None
    new: Object | None
    text: ClassVar[str] = SPEC_CHANGE

    def paths(self) -> tuple[list[str], int]:
        """The first few changed paths of ``spec``, and how many changed in all."""
        return changed_paths(desired_spec(self.old), desired_spec(self.new))

    def explain(self, message: str) -> str:
        return message + "; changed: " + describe_paths(*self.paths())


@dataclass(frozen=True)
class OwnersChange:
    """A metadata write held: it says which, or it would look like a label edit."""

    text: ClassVar[str] = OWNERS_CHANGE

    def explain(self, message: str) -> str:
        return message + "; changed: metadata.ownerReferences"


@dataclass(frozen=True)
class PolicyLoosened:
    """The gate policy asks less of the gates, as written (``references.loosens``)."""

    text: str

    def explain(self, message: str) -> str:
        return f"{message}; {self.text}"


@dataclass(frozen=True)
class PolicyReleases:
    """The gate policy, however written, would release an object its gates hold (``decision.releases``)."""

    text: str

    def explain(self, message: str) -> str:
        return f"{message}; {self.text}"


@dataclass(frozen=True)
class ContentChange:
    """A status write carries new content: what waits and what is served."""

    carried: NewContent
    text: str  # carried.as_change(), said once

    @classmethod
    def of(cls, carried: NewContent) -> ContentChange:
        return cls(carried, carried.as_change())

    def explain(self, message: str) -> str:
        return self.carried.after(message)


Change = Creation | Deletion | SpecChange | OwnersChange | PolicyLoosened | PolicyReleases | ContentChange


def _owners(obj: Object | None) -> object:
    return metadata(obj).get("ownerReferences")


def owners_change(old: Object | None, new: Object | None) -> bool:
    """Whether an UPDATE changes ``metadata.ownerReferences`` in a way that can get the object
    deleted by the garbage collector: one added or changed (a dangling owner deletes it at
    once), or some removed while others stay (those left may name owners that are gone).
    Removing them all never can: an object without owners is never garbage."""
    after = _owners(new)
    return bool(after) and not same(_owners(old), after)


def classify(admission: Admission, policies: Callable[[], tuple[Policy, Policy]]) -> Change | None:
    """The change a held object may not make, or None when it is never gated. ``policies()``
    gives those of ``old`` and ``new`` (read once by the caller, when needed). Kubernetes' own
    controllers' removal of owners that are gone (the garbage collector) is never held."""
    operation, sub_resource, old, new = (
        admission.operation,
        admission.sub_resource,
        admission.old,
        admission.new,
    )
    if operation == "DELETE" and not sub_resource:
        return Deletion()
    if operation == "CREATE" and not sub_resource:
        return Creation()
    if operation != "UPDATE":
        return None
    if sub_resource == "status":
        carried = admission.carried
        return None if carried is None else ContentChange.of(carried)
    if sub_resource:
        return None
    if not same(desired_spec(old), desired_spec(new)):
        return SpecChange(old, new)
    if not admission.by_kubernetes and owners_change(old, new):
        return OwnersChange()
    loosened = loosens(*policies())
    return PolicyLoosened(loosened) if loosened is not None else None


def gated_change(
    kind: str,
    operation: Operation,
    sub_resource: str,
    old: Object | None,
    new: Object | None,
    *,
    by_kubernetes: bool = False,
) -> str | None:
    """The words of ``classify`` for a request of a gated ``kind`` given by its parts (tests,
    tools): ``by_kubernetes``, the request is Kubernetes' own controllers'."""
    row = kinds.BY_KIND[kind]
    user = User(min(names.SYSTEM_DELETERS) if by_kubernetes else "", ())
    admission = Admission(row, operation, sub_resource, old, new, user, None, {})
    change = classify(admission, lambda: (policy_of(old), policy_of(new)))
    return change.text if change is not None else None
