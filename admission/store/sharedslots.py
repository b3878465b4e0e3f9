"""A table of fixed-size slots in a file, mapped by every process that opens it and changed under one lock."""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


class SharedSlots:
    """``slots`` records laid out as ``slot``, in the file ``path``, shared by every process that
    opens it: gunicorn's workers each see some of the calls, and a table kept per worker would
    let each of them spend a whole budget. What a slot holds and which key lands in it are the
    subclass's; a slot is read and written only inside ``locked()``, so a read and the write
    that follows it are one step for every thread of every process."""

    def __init__(self, path: str | os.PathLike[str], slot: struct.Struct, slots: int) -> None:
        self.path, self.slot, self.slots = Path(path), slot, slots
        self._lock = threading.Lock()  # flock does not exclude threads of one process
        self._pid: int | None = None
        self._fd = -1
        self._map: mmap.mmap | None = None
        size = slot.size * slots
        with open(self.path, "ab") as handle:  # the creator sizes it; every opener checks
            if handle.tell() < size:
                handle.truncate(size)

    def _mapped(self) -> mmap.mmap:
        if self._pid != os.getpid():  # opened in this process: a descriptor inherited over fork
            self._fd = os.open(self.path, os.O_RDWR)  # would share the lock with the parent
            self._map = mmap.mmap(self._fd, self.slot.size * self.slots)
            self._pid = os.getpid()
        assert self._map is not None  # mapped when _pid was set
        return self._map

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the table against every other thread and process that maps it."""
        with self._lock:
            self._mapped()
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def read(self, index: int) -> tuple[Any, ...]:
        """Slot ``index``'s fields (all zero in a new file); inside ``locked()``."""
        return self.slot.unpack_from(self._mapped(), index * self.slot.size)

    def write(self, index: int, *fields: object) -> None:
        """Store ``fields`` in slot ``index``; inside ``locked()``."""
        self.slot.pack_into(self._mapped(), index * self.slot.size, *fields)
