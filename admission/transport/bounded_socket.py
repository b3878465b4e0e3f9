"""The worker's TLS socket: one deadline for a whole request's reads, one for a whole answer's writes."""

from __future__ import annotations

import errno
import ssl
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # typeshed's names for what ssl.SSLSocket reads into and writes
    from _typeshed import ReadableBuffer, WriteableBuffer

T = TypeVar("T")

IO_SECONDS = 10.0  # a thread writes a whole answer within this (a client that stops reading loses it)


class _TooSlow(ConnectionResetError):
    """A client that did not keep up with its deadline is dropped like one that reset: gunicorn
    logs a traceback for other socket errors, and no client may write those into our log at will."""

    def __init__(self) -> None:
        super().__init__(errno.ECONNRESET, "deadline passed")


class BoundedSSLSocket(ssl.SSLSocket):
    """An SSL socket whose blocking mode, the one gunicorn's threads use, has deadlines for the
    whole of a request and of an answer, not a timeout per call that every byte restarts: reads
    end at the request's deadline (``bound``), and an answer is written within ``IO_SECONDS``
    of its first write."""

    collected: bytearray | None = None  # while set, sendall appends here (a review answered in the loop)
    _blocking = False
    _read_by: float | None = None
    _write_by: float | None = None

    def setblocking(self, flag: bool) -> None:
        self._blocking = flag
        self.settimeout(IO_SECONDS if flag else 0.0)

    def bound(self, read_by: float) -> None:
        """The request on this socket must be read by ``read_by`` (monotonic); its answer's
        writes start their clock at the first."""
        self._read_by, self._write_by = read_by, None

    def read(self, len: int = 1024, buffer: WriteableBuffer | None = None) -> Any:  # noqa: A002 - ssl.SSLSocket's
        # bytes, or the count read into ``buffer``: ssl.SSLSocket.read's own two answers
        if not self._blocking or self._read_by is None:
            return super().read(len, buffer)
        return self._by(self._read_by, super().read, len, buffer)

    def send(self, data: ReadableBuffer, flags: int = 0) -> int:
        if not self._blocking:
            return super().send(data, flags)
        if self._write_by is None:
            self._write_by = time.monotonic() + IO_SECONDS
        return self._by(self._write_by, super().send, data, flags)

    def sendall(self, data: ReadableBuffer, flags: int = 0) -> None:
        if self.collected is None:
            return super().sendall(data, flags)  # one send() after another: each bounded above
        self.collected += data
        return None

    def _by(self, deadline: float, call: Callable[..., T], *args: object) -> T:
        left = deadline - time.monotonic()
        if left <= 0:
            raise _TooSlow()
        self.settimeout(left)
        try:
            return call(*args)
        except TimeoutError:
            raise _TooSlow() from None
