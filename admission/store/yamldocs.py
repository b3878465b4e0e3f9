"""Objects of multi-document YAML, as kubectl reads them: ``kind: List`` items included."""

from __future__ import annotations

import yaml


def objects(text: str) -> list[object]:
    """Every document of ``text``, with the items of ``*List`` documents in their place;
    raises yaml.YAMLError. Callers decide what to do with documents that are not mappings."""
    found: list[object] = []
    for doc in yaml.safe_load_all(text):
        if doc is None:
            continue
        if isinstance(doc, dict) and str(doc.get("kind", "")).endswith("List"):
            found += doc.get("items") or []
        else:
            found.append(doc)
    return found
