"""Reading any Kubernetes object's metadata, whatever shape the input has: the one accessor."""

from __future__ import annotations

from typing import Any

Key = tuple[str, str]
Object = dict[str, Any]  # a Kubernetes object, or any JSON object, as decoded


def metadata(obj: dict | None) -> dict:
    """``obj.metadata`` when it is a mapping (the object's own dict), else an empty one."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return meta if isinstance(meta, dict) else {}


def annotations(obj: dict | None) -> dict:
    """``obj.metadata.annotations`` when it is a mapping (the object's own dict), else an empty one."""
    value = metadata(obj).get("annotations")
    return value if isinstance(value, dict) else {}


def object_key(obj: dict | None) -> Key:
    """(namespace, name); a namespaced object without a namespace is in ``default``."""
    meta = metadata(obj)
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "")
