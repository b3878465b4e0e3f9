"""Whether two JSON values are the same: the one comparison behind every "did it change".

Python's ``==`` says ``False == 0``, ``True == 1``, ``1 == 1.0`` and ``0.0 == -0.0``; in a
HelmRelease's ``spec.values`` each of these is a different value (Helm renders them
differently), so a closed gate must see the change.
"""

from __future__ import annotations

import marshal
import math
from collections.abc import Sequence
from typing import TypeAlias, cast

# A value as json.loads gives it (and the API server sends it).
Json: TypeAlias = "None | bool | int | float | str | list[Json] | dict[str, Json]"

# The walk below looks at this many values at most; a pair it cannot settle within that
# counts as different (a change, held by a closed gate): bounded work for any input.
MAX_STEPS = 200_000

_SEQUENCES = (list, tuple)


def same(a: object, b: object) -> bool:
    """Whether ``a`` and ``b`` are the same JSON value: the same type (a bool is not an int,
    an int is not a float) and the same value (``-0.0`` is not ``0.0``), recursively; the order
    of an object's keys does not matter, the order of an array's items does."""
    # Values nested too deep for == raise RecursionError, as before: the webhook answers 400.
    if a != b:
        return False  # the common answer for a real change, at C speed
    try:
        # marshal (version 2: no back-references) writes each type apart and floats bit for bit,
        # so equal bytes are the same value; unequal bytes may only mean keys in another order.
        # Any value is tried: marshal refuses one it cannot write with ValueError.
        if marshal.dumps(cast(Json, a), 2) == marshal.dumps(cast(Json, b), 2):
            return True
    except ValueError:  # a value marshal cannot write
        pass
    return _walk(a, b)


def _walk(a: object, b: object) -> bool:
    stack: list[tuple[object, object]] = [(a, b)]
    steps = 0
    xs: Sequence[object]
    ys: Sequence[object]
    while stack:
        steps += 1
        if steps > MAX_STEPS:
            return False
        x, y = stack.pop()
        kind = type(x)
        if kind is not type(y):
            return False
        # x and y are of the same type here, which `kind` tells (casts: the checker cannot follow it).
        if kind is dict:
            dx, dy = cast("dict[object, object]", x), cast("dict[object, object]", y)
            if dx.keys() != dy.keys():
                return False
            xs, ys = list(dx.values()), [dy[key] for key in dx]
        elif kind in _SEQUENCES:
            xs, ys = cast("Sequence[object]", x), cast("Sequence[object]", y)
            if len(xs) != len(ys):
                return False
        elif kind is float:
            if x != y or math.copysign(1.0, cast(float, x)) != math.copysign(1.0, cast(float, y)):
                return False
            continue
        else:
            if x != y:
                return False
            continue
        if list(map(type, xs)) != list(map(type, ys)):
            return False  # a bool for an int, an int for a float: found without a step each
        stack.extend(zip(xs, ys, strict=True))
    return True
