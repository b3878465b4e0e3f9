"""JSON merge patch (RFC 7386), the tests' one implementation: applying one, as the API server
does with an ``application/merge-patch+json`` PATCH (``merged``), and making one, as
fluxcd/pkg runtime/patch does from a before and an after copy (``merge_diff``).

Stands in for the API server's merge-patch handling in every double that stores objects
(tests/doubles/fakekube.py, tests/doubles/apiserver.py) and in tests/matching_cases.py, which
says what object a merge PATCH makes. admission/core/admission/applied.py has the product's own; the
doubles do not use it, so that a mistake in it cannot hide behind a double that shares it.

Proven against the real one: tests/e2e/test_match_conditions.py makes each merge PATCH of
tests/matching_cases.py on a real kube-apiserver and holds what reached our server to the
verdict on ``merged(stored, patch)``; tests/realflux/test_doubles.py holds the status patches
the Flux doubles make with ``merge_diff`` to the real controllers' writes.
"""

from __future__ import annotations

import copy
from typing import Any


def merged(base: Any, patch: Any) -> Any:
    """What the API server makes of ``base`` and a merge PATCH: objects merge key by key, null
    deletes, anything else replaces. Neither argument is changed, nor shared with the result."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(base) if isinstance(base, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merged(out.get(key), value)
    return out


def merge_diff(before: object, after: object) -> object:
    """The JSON merge patch (RFC 7386) that turns ``before`` into ``after``."""
    if not isinstance(before, dict) or not isinstance(after, dict):
        return copy.deepcopy(after)
    out: dict = {}
    for key in before.keys() | after.keys():
        if key not in after:
            out[key] = None
        elif key not in before:
            out[key] = copy.deepcopy(after[key])
        elif before[key] != after[key]:
            out[key] = merge_diff(before[key], after[key])
    return out
