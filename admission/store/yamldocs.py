"""Objects of multi-document YAML, as kubectl reads them: ``kind: List`` items included.

Aliases (``*name``) are refused: a few hundred bytes of nested aliases expand to gigabytes
(a "billion laughs"), and Kubernetes manifests have no use for them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeGuard

import yaml
from yaml.composer import ComposerError
from yaml.nodes import Node


class _NoAliasLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses aliases before expanding any, and reads timestamps as strings."""

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]  # untyped in the stubs
            raise ComposerError(None, None, "aliases (*name) are not accepted", mark)
        return super().compose_node(parent, index)


# kubectl sends an unquoted `requestedAt: 2026-12-22T09:00:00Z` to the API server as a string;
# read it the same, so a gates file means what the same manifest applied to a cluster means.
_NoAliasLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def documents(text: str) -> Iterator[tuple[object, int]]:
    """Each document of ``text`` (None for an empty one) with the offset in ``text`` where it ends:
    whatever follows, including a document that cannot be read, lies after it. Raises
    yaml.YAMLError (or RecursionError, for values nested too deeply) at a document it cannot read."""
    loader = _NoAliasLoader(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            assert node is not None  # check_node() said there is one
            yield loader.construct_document(node), node.end_mark.index
    finally:
        loader.dispose()


def is_list(doc: object) -> TypeGuard[dict[str, Any]]:
    """Whether ``doc`` is a ``kind: List`` (or ``*List``) document, as kubectl reads them."""
    return isinstance(doc, dict) and isinstance(doc.get("kind"), str) and doc["kind"].endswith("List")


def objects(text: str) -> list[object]:
    """Every document of ``text``, with the items of ``*List`` documents in their place (a List
    whose ``items`` is not a list stays as it is); raises yaml.YAMLError. Callers decide what to do
    with documents that are not mappings."""
    found: list[object] = []
    for doc, _ in documents(text):
        if doc is None:
            continue
        if is_list(doc) and isinstance(doc.get("items") or [], list):
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
