"""Bounds on what unauthenticated input can make the server do to the API server."""

from __future__ import annotations

import hashlib
import os
import struct
import time
from pathlib import Path

from admission.store.sharedslots import SharedSlots

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


class SharedWindowCounts(SharedSlots):
    """WindowCounts shared by every process that opens the same ``path``: gunicorn's workers
    each take some denials, and a limit kept per worker would let each of them spend it whole.
    The file is a table of ``slots`` counters (key hash, window, count), as the receiver's rate
    limits are (admission.webhook.receiver.SharedCallerLimits); keys whose hashes share a slot
    share nothing: the newer one starts a fresh count. Windows must be numbered alike by every
    process (read_window's time.monotonic is, on Linux)."""

    _SLOT = struct.Struct("<QqI")

    def __init__(self, path: str | os.PathLike[str], limit: int, slots: int = MAX_KEYS):
        super().__init__(path, self._SLOT, slots)
        self.limit = limit

    def charge(self, key: object, window: int) -> bool:
        """Count one for ``key`` in ``window`` for every process; False (nothing counted) at the limit."""
        hashed = int.from_bytes(hashlib.blake2b(repr(key).encode(), digest_size=8).digest(), "big") or 1
        index = hashed % self.slots
        with self.locked():
            stored, at, used = self.read(index)
            if stored != hashed or at != window:
                used = 0
            charged: bool = used < self.limit  # the slot's fields are ints (struct "<QqI")
            self.write(index, hashed, window, used + 1 if charged else used)
        return charged


def window_counts(
    limit: int, limits_dir: str | os.PathLike[str] | None, name: str
) -> WindowCounts | SharedWindowCounts:
    """A limit of ``limit`` per key and window: for the pod, in ``limits_dir/name``, when there is
    a directory every worker shares; else for this process."""
    if limits_dir is None:
        return WindowCounts(limit)
    return SharedWindowCounts(Path(limits_dir) / name, limit)
