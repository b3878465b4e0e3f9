"""A value computed on first use, then kept: what deciding does not need is not computed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Lazy(Generic[T]):
    """A value computed on first use, then kept; equal when the values are.

    Threads that race both compute it: the computations are pure, so they agree."""

    __slots__ = ("_compute", "_value")
    _value: T  # unset (an AttributeError) until known: read per request, so no flag to test first

    def __init__(self, compute: Callable[[], T]):
        self._compute = compute

    @classmethod
    def of(cls, value: T) -> Lazy[T]:
        """A value known already."""
        known = cls(lambda: value)
        known._value = value
        return known

    @property
    def value(self) -> T:
        try:
            return self._value
        except AttributeError:
            self._value = self._compute()
            return self._value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Lazy) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return repr(self.value)
