"""Reading any Kubernetes object's metadata and status, whatever shape the input has: the one accessor."""

# No `from __future__ import annotations` here: it would bind the name `annotations`, which
# this module defines as a function (3.11 evaluates these annotations as they are).
from typing import Any

from admission.core.base.names import DEFAULT_NAMESPACE

Key = tuple[str, str]
Object = dict[str, Any]  # a Kubernetes object, or any JSON object, as decoded


def metadata(obj: Object | None) -> Object:
    """``obj.metadata`` when it is a mapping (the object's own dict), else an empty one."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return meta if isinstance(meta, dict) else {}


def annotations(obj: Object | None) -> Object:
    """``obj.metadata.annotations`` when it is a mapping (the object's own dict), else an empty one."""
    value = metadata(obj).get("annotations")
    return value if isinstance(value, dict) else {}


def label(kind: object, namespace: object, name: object) -> str:
    """``Kind/namespace/name``: how logs, Events and ``kubectl gate`` name one object."""
    return f"{kind}/{namespace}/{name}"


def namespace_of(obj: Object | None) -> str:
    """The object's namespace; a namespaced object without one is in ``default``."""
    return str(metadata(obj).get("namespace") or DEFAULT_NAMESPACE)


def object_key(obj: Object | None) -> Key:
    """(namespace, name); a namespaced object without a namespace is in ``default``."""
    return namespace_of(obj), str(metadata(obj).get("name") or "")


def mapping(value: object) -> Object:
    """``value`` when it is a mapping (a JSON object), else an empty one."""
    return value if isinstance(value, dict) else {}


def status_of(obj: Object | None) -> Object:
    """``obj.status`` when it is a mapping, else an empty one."""
    status = obj.get("status") if isinstance(obj, dict) else None
    return status if isinstance(status, dict) else {}
