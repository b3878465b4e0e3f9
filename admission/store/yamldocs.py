"""Objects of multi-document YAML, as kubectl reads them: ``kind: List`` items included.

Aliases (``*name``) are refused: a few hundred bytes of nested aliases expand to gigabytes
(a "billion laughs"), and Kubernetes manifests have no use for them.
"""

from __future__ import annotations

import yaml
from yaml.composer import ComposerError


class _NoAliasLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses aliases before expanding any, and reads timestamps as strings."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            raise ComposerError(None, None, "aliases (*name) are not accepted", self.peek_event().start_mark)
        return super().compose_node(parent, index)


# kubectl sends an unquoted `requestedAt: 2026-12-22T09:00:00Z` to the API server as a string;
# read it the same, so a gates file means what the same manifest applied to a cluster means.
_NoAliasLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


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
