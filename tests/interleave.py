"""Deterministic interleavings of a writer rewriting a gates file with the store's own work.

The writer rewrites a file in place, the way ``cat new > file`` or an editor saving over it
does: open (truncating), write the content piece by piece, close. Its steps are made either
between the store's actions (polls, reloads, worker starts) or inside one: at a chosen
``os.read`` the store makes (the inotify queue, a file's content), the real system call being
made first. No result is faked: the file system, inotify and leases are the real ones.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from collections.abc import Callable, Iterator


class Writer:
    """``content`` written over ``path`` in place, in pieces cut at byte offsets ``cuts``.

    A step the kernel would make wait (a reader holds a lease on the file: the writer's open
    blocks until it lets go) is not made: ``step`` answers False and the writer tries again at
    its next step, which is what a blocked open amounts to."""

    def __init__(self, path: str | os.PathLike, content: str, cuts: list[int] = ()):
        data = content.encode()
        bounds = [0, *sorted({c for c in cuts if 0 < c < len(data)}), len(data)]
        self.path = os.fspath(path)
        self.pieces = [data[a:b] for a, b in itertools.pairwise(bounds)]
        self.written = 0  # pieces written so far
        self.fd: int | None = None
        self.finished = False

    @property
    def mid_write(self) -> bool:
        """Open for writing: the file may hold part of the new content."""
        return self.fd is not None

    def step(self) -> bool:
        """Make the next step (open, one piece, close); False when blocked or finished."""
        if self.finished:
            return False
        if self.fd is None:
            try:
                self.fd = os.open(self.path, os.O_WRONLY | os.O_TRUNC | os.O_NONBLOCK | os.O_CLOEXEC)
            except BlockingIOError:  # a reader's lease: a blocking open would wait for it
                return False
            return True
        if self.written < len(self.pieces):
            os.write(self.fd, self.pieces[self.written])
            self.written += 1
            return True
        os.close(self.fd)
        self.fd, self.finished = None, True
        return True

    def steps(self, count: int) -> int:
        """Up to ``count`` steps, stopping at the first that cannot be made; how many were made."""
        made = 0
        while made < count and self.step():
            made += 1
        return made

    def finish(self) -> None:
        while not self.finished:
            if not self.step():
                raise RuntimeError(f"the writer of {self.path} is blocked outside any read")

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class Steps:
    """Writer steps to make inside one action of the store: after its ``os.read`` calls
    numbered in ``at`` (from 1), ``per_point`` steps each; a blocked step is tried again at the
    next call. ``reads`` counts the calls the action made."""

    def __init__(self, writer: Writer, at: frozenset[int] | set[int] = frozenset(), per_point: int = 1):
        self.writer, self.at, self.per_point = writer, set(at), per_point
        self.reads = 0
        self.owed = 0

    def __call__(self) -> None:
        self.reads += 1
        if self.reads in self.at:
            self.owed += self.per_point
        if self.owed:
            self.owed -= self.writer.steps(self.owed)


@contextlib.contextmanager
def after_each_read(hook: Callable[[], None]) -> Iterator[None]:
    """Call ``hook`` after every ``os.read`` this thread makes inside the block (returned or
    raised). ``os.read`` is patched for the whole process, but only the reads of the thread that
    runs the store's action count: another thread's (a pipe a leftover server's reader drains)
    would otherwise move the writer at points nobody chose, twice at once."""
    real, owner = os.read, threading.get_ident()

    def read(fd: int, size: int) -> bytes:
        try:
            return real(fd, size)
        finally:
            if threading.get_ident() == owner:
                hook()

    os.read = read
    try:
        yield
    finally:
        os.read = real


def during(writer: Writer, at, action: Callable[[], object], per_point: int = 1) -> object:
    """Run ``action`` (a poll, a reload, a worker start) with the writer's steps made inside it."""
    steps = Steps(writer, at, per_point)
    with after_each_read(steps):
        result = action()
    writer.steps(steps.owed)  # a step a lease held back: the open waited, and goes on now
    return result
