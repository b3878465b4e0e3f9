"""Whether two JSON values are the same: the one comparison behind every "did it change".

Python's ``==`` says ``False == 0``, ``True == 1``, ``1 == 1.0`` and ``0.0 == -0.0``; in a
HelmRelease's ``spec.values`` each of these is a different value (Helm renders them
differently), so a closed gate must see the change.
"""

from __future__ import annotations

import marshal
import math

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
        if marshal.dumps(a, 2) == marshal.dumps(b, 2):
            return True
    except ValueError:  # a value marshal cannot write
        pass
    return _walk(a, b)


def _walk(a: object, b: object) -> bool:
    stack = [(a, b)]
    steps = 0
    while stack:
        steps += 1
        if steps > MAX_STEPS:
            return False
        x, y = stack.pop()
        kind = type(x)
        if kind is not type(y):
            return False
        if kind is dict:
            if x.keys() != y.keys():
                return False
            xs, ys = list(x.values()), [y[key] for key in x]
        elif kind in _SEQUENCES:
            if len(x) != len(y):
                return False
            xs, ys = x, y
        elif kind is float:
            if x != y or math.copysign(1.0, x) != math.copysign(1.0, y):
                return False
            continue
        else:
            if x != y:
                return False
            continue
        if list(map(type, xs)) != list(map(type, ys)):
            return False  # a bool for an int, an int for a float: found without a step each
        stack.extend(zip(xs, ys))
    return True
