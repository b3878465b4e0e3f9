"""Files still being written in a directory tree, and reads no writer can tear (Linux).

Two sources, each telling something the other cannot:

- inotify (``OpenWrites``): which files were modified and not closed since the watch began, and
  whether anything in the tree changed at all, so an idle poll is one ``read`` that finds nothing.
- file leases (``read_whole``): the kernel refuses a read lease on a file that any process (in any
  container on the node) has open for writing, and while we hold one, a writer's ``open`` waits
  until we let go. A file read under a lease is one whole version; one that cannot get a lease is
  being written, even by a writer that opened it before this process started, which inotify cannot
  know. Leases need the file's owner (or CAP_LEASE) and a filesystem that has them; without them the
  read is still checked (the file's version before and after the read, and inotify's events).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import logging
import os
import signal
import stat
import struct
from dataclasses import dataclass

log = logging.getLogger(__name__)

_MODIFY, _ATTRIB, _CLOSE_WRITE, _MOVED_FROM, _MOVED_TO = 0x2, 0x4, 0x8, 0x40, 0x80
_CREATE, _DELETE, _DELETE_SELF, _MOVE_SELF = 0x100, 0x200, 0x400, 0x800
_OVERFLOW, _IGNORED, _ISDIR = 0x4000, 0x8000, 0x40000000
_WATCHED = (
    _MODIFY | _ATTRIB | _CLOSE_WRITE | _MOVED_FROM | _MOVED_TO | _CREATE | _DELETE | _DELETE_SELF | _MOVE_SELF
)
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of NUL-padded name
MAX_DIRECTORIES = (
    1024  # watches we add (one per directory); past this, the caller's settle rule alone applies
)

Version = tuple[int, int, int, int, int]  # device, inode, size, mtime, ctime (ns): a file's content version


def version(st: os.stat_result) -> Version:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def directories(top: str) -> list[str]:
    """``top`` and every directory under it (symlinks to directories are not followed)."""
    found, stack = [], [top]
    while stack:
        path = stack.pop()
        found.append(path)
        with os.scandir(path) as entries:
            stack += [entry.path for entry in entries if entry.is_dir(follow_symlinks=False)]
    return found


class OpenWrites:
    """Which files under ``directory`` were modified and not closed since: a writer that pauses
    mid-write keeps its file open, so its half-written content is never mistaken for finished.

    ``pending()`` answers None when it cannot know (no inotify here, too many directories): the
    caller then relies on its own rules alone. ``changed()`` says whether anything happened in the
    tree since it was last asked; ``sequence`` and ``last_event(path)`` whether something happened
    to one file while the caller looked at it. Paths are strings joined as ``os.scandir`` joins them.
    """

    def __init__(self, directory: str | os.PathLike[str]):
        self.directory = os.fspath(directory)
        self.sequence = 0  # events seen so far
        self._last: dict[str, int] = {}  # path -> sequence number of the latest event naming it
        self._floor = 0  # paths forgotten from _last count as changed at this sequence number
        self._dirs: dict[int, str] = {}
        self._writing: set[str] = set()
        self._known = False
        self._lost = False  # the kernel's queue overflowed: events were lost, re-arm
        self._fd = -1
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            self._add, self._init = libc.inotify_add_watch, libc.inotify_init1
        except (OSError, AttributeError):
            return  # not Linux
        self._arm()

    def _arm(self) -> None:
        self._fd = self._init(os.O_NONBLOCK | os.O_CLOEXEC)
        if self._fd < 0:
            log.warning(
                "inotify unavailable: files rewritten in place are trusted once they hold still",
                extra={"error": errno.errorcode.get(ctypes.get_errno(), "?")},
            )
            return
        self._known = self._watch_tree(self.directory)

    def _watch_tree(self, top: str) -> bool:
        try:
            found = directories(top)
        except OSError:
            return False
        for path in found:
            if len(self._dirs) >= MAX_DIRECTORIES:
                log.warning(
                    "too many directories to watch: every poll lists the gates directory",
                    extra={"directory": self.directory, "limit": MAX_DIRECTORIES},
                )
                return False
            wd = self._add(self._fd, os.fsencode(path), _WATCHED)
            if wd < 0:
                return False
            self._dirs[wd] = path
        return True

    @property
    def available(self) -> bool:
        """Whether inotify could be set up at all (not on other systems, nor past the user's limit)."""
        return self._fd >= 0

    @property
    def known(self) -> bool:
        """Whether the watch covers the whole tree (else only the caller's own rules apply)."""
        return self._fd >= 0 and self._known

    def changed(self) -> bool | None:
        """Whether anything in the tree changed since the last call (True after lost events);
        None when the watch cannot tell (the caller must look for itself)."""
        if self._fd < 0:
            return None
        before = self.sequence
        self._drain()
        if self._lost:  # re-arm: the tree is watched again from now on
            os.close(self._fd)
            self._dirs.clear()
            self._writing.clear()
            self._lost, self._known = False, False
            self._arm()
            self._bump_all()
            return True if self._known else None
        if not self._known:
            return None
        return self.sequence != before

    def pending(self) -> set[str] | None:
        """Files written to and not closed, as far as the events read now say; None if unknown."""
        if self.changed() is None:
            return None
        return set(self._writing)

    def last_event(self, path: str) -> int:
        """The sequence number of the latest event that named ``path`` (compare with ``sequence``)."""
        return self._last.get(path, self._floor)

    def _bump_all(self) -> None:
        self.sequence += 1
        self._last.clear()
        self._floor = self.sequence

    def _drain(self) -> None:
        while self._fd >= 0:
            try:
                data = os.read(self._fd, 64 * 1024)
            except BlockingIOError:
                return
            except OSError:
                self._lost = True
                return
            self._apply(data)

    def _apply(self, data: bytes) -> None:
        offset = 0
        while offset + _EVENT.size <= len(data):
            wd, mask, _cookie, size = _EVENT.unpack_from(data, offset)
            name = data[offset + _EVENT.size : offset + _EVENT.size + size].rstrip(b"\0")
            offset += _EVENT.size + size
            self.sequence += 1
            if mask & _OVERFLOW:
                self._lost = True  # events were lost: re-armed by the next changed()
                continue
            parent = self._dirs.get(wd)
            if parent is None:
                continue
            if mask & (_IGNORED | _DELETE_SELF | _MOVE_SELF):
                self._dirs.pop(wd, None)
                if mask & _MOVE_SELF and parent == self.directory:
                    self._lost = True  # the tree itself moved: watch the path anew
                continue
            path = os.path.join(parent, os.fsdecode(name))
            self._last[path] = self.sequence
            if len(self._last) > 65536:  # names come and go (editors' swap files): forget them all
                self._bump_all()
            if mask & _ISDIR:
                if mask & (_CREATE | _MOVED_TO) and not self._watch_tree(path):
                    self._known = False
            elif mask & _MODIFY:
                self._writing.add(path)
            elif mask & (_CLOSE_WRITE | _DELETE | _MOVED_FROM | _MOVED_TO):
                self._writing.discard(path)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    __del__ = close


class BeingWritten(Exception):
    """A file that some process has open for writing, or that changed while it was read."""


@dataclass(frozen=True)
class WholeRead:
    data: bytes
    version: Version  # of what was read
    leased: bool  # the kernel vouched that no process had the file open for writing meanwhile


# A lease break signals the lease holder: SIGIO by default, whose default action ends the process.
# SIGURG's default is to ignore it, and nothing here handles it.
_LEASE_SIGNAL = signal.SIGURG
_LEASES = all(hasattr(fcntl, name) for name in ("F_SETLEASE", "F_SETSIG", "F_RDLCK", "F_UNLCK"))


def _lease(fd: int) -> bool:
    """Take a read lease on ``fd``: True when held, False when leases are not to be had here
    (not the owner, a filesystem without them). Raises BeingWritten when a writer has it open."""
    if not _LEASES:
        return False
    try:
        fcntl.fcntl(fd, fcntl.F_SETSIG, _LEASE_SIGNAL)
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
    except OSError as err:
        if err.errno in (errno.EAGAIN, errno.EBUSY):
            raise BeingWritten("open for writing") from None
        return False  # EACCES, EINVAL, ENOLCK...
    return True


def read_whole(path: str, limit: int) -> WholeRead:
    """Read ``path`` (at most ``limit`` + 1 bytes) as one version: under a read lease where the
    kernel grants one, and checked either way. Raises BeingWritten, or OSError."""
    # O_NONBLOCK: a FIFO put in the file's place must not block the open.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        leased = _lease(fd)
        try:
            chunks, size = [], 0
            while size <= limit:
                chunk = os.read(fd, min(256 * 1024, limit + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            after = os.fstat(fd)
        finally:
            if leased:
                fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
    finally:
        os.close(fd)
    if version(before) != version(after) or (size <= limit and size != after.st_size):
        raise BeingWritten("changed while it was read")
    return WholeRead(b"".join(chunks), version(after), leased)
