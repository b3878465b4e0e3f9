"""Bounds on what unauthenticated input can make the server do to the API server."""

from __future__ import annotations

import time

MAX_KEYS = 4096  # keys counted per window; a new key beyond them is refused
# The GETs a denial may cost: per namespace per window, whatever reviews say; more are dropped.
READ_WINDOW = 10.0  # seconds
READS_PER_NAMESPACE = 20


def read_window() -> int:
    """The number of the read limit's current window."""
    return int(time.monotonic() // READ_WINDOW)


class WindowCounts:
    """How often each key was charged in the current fixed window; bounded in keys."""

    def __init__(self, limit: int, max_keys: int = MAX_KEYS):
        self.limit, self.max_keys = limit, max_keys
        self.window: int | None = None
        self.counts: dict[object, int] = {}

    def charge(self, key: object, window: int) -> bool:
        """Count one for ``key`` in ``window``; False (nothing counted) when it is at the limit."""
        if window != self.window:
            self.window, self.counts = window, {}
        used = self.counts.get(key, 0)
        if used >= self.limit or (used == 0 and len(self.counts) >= self.max_keys):
            return False
        self.counts[key] = used + 1
        return True
