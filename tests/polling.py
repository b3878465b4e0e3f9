"""Polling with a deadline: the only way tests wait (never a bare sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def until(
    action: Callable[[], T], accept: Callable[[T], object], timeout: float = 15.0, interval: float = 0.1
) -> T:
    """Repeat ``action`` until ``accept(result)`` or the deadline; return the last result,
    for the caller to assert on (so a failure shows what was seen last)."""
    deadline = time.monotonic() + timeout
    while True:
        result = action()
        if accept(result) or time.monotonic() >= deadline:
            return result
        time.sleep(
            max(0.0, min(interval, deadline - time.monotonic()))
        )  # the poll interval, never past the deadline


def wait_for(check: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll ``check`` until it returns something truthy; errors count as not yet."""
    last_error: list[BaseException] = []

    def attempt():
        try:
            return check()
        except Exception as err:  # noqa: BLE001 (whatever the thing polled raises until it is up; shown at the deadline)
            last_error[:] = [err]
            return None

    result = until(attempt, bool, timeout, interval)
    if not result:
        raise TimeoutError(f"timed out after {timeout}s waiting for {what}; last error: {last_error[:1]!r}")
    return result
