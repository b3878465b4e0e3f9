"""Objects of multi-document YAML, as kubectl reads them: ``kind: List`` items included.

Aliases (``*name``) are refused: a few hundred bytes of nested aliases expand to gigabytes
(a "billion laughs"), and Kubernetes manifests have no use for them.
"""

from __future__ import annotations

import yaml
from yaml.composer import ComposerError


class _NoAliasLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses aliases before expanding any."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            raise ComposerError(None, None, "aliases (*name) are not accepted", self.peek_event().start_mark)
        return super().compose_node(parent, index)


def objects(text: str) -> list[object]:
    """Every document of ``text``, with the items of ``*List`` documents in their place;
    raises yaml.YAMLError. Callers decide what to do with documents that are not mappings."""
    found: list[object] = []
    for doc in yaml.load_all(text, Loader=_NoAliasLoader):
        if doc is None:
            continue
        if isinstance(doc, dict) and str(doc.get("kind", "")).endswith("List"):
            found += doc.get("items") or []
        else:
            found.append(doc)
    return found


def describe_error(err: yaml.YAMLError) -> str:
    """Where and what a YAML error is, without the source text it would otherwise quote
    (a file may be a symlink to something secret, and the reason is shown unauthenticated)."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or type(err).__name__
    if mark is None:
        return f"invalid YAML: {problem}"
    return f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: {problem}"
