"""Files still being written in a directory tree: modified and not yet closed (Linux inotify)."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
import struct
from pathlib import Path

log = logging.getLogger(__name__)

_MODIFY, _CLOSE_WRITE, _MOVED_FROM, _MOVED_TO = 0x2, 0x8, 0x40, 0x80
_CREATE, _DELETE, _DELETE_SELF, _OVERFLOW, _IGNORED, _ISDIR = 0x100, 0x200, 0x400, 0x4000, 0x8000, 0x40000000
_WATCHED = _MODIFY | _CLOSE_WRITE | _MOVED_FROM | _MOVED_TO | _CREATE | _DELETE | _DELETE_SELF
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of NUL-padded name
MAX_DIRECTORIES = 1024  # watches we add (one per directory); past this, the caller's settle rule alone applies


class OpenWrites:
    """Which files under ``directory`` were modified and not closed since: a writer that pauses
    mid-write keeps its file open, so its half-written content is never mistaken for finished.

    ``pending()`` answers None when it cannot know (no inotify here, the kernel's event queue
    overflowed, too many directories): the caller then relies on its own rule alone."""

    def __init__(self, directory: Path):
        self.directory = directory
        self._dirs: dict[int, Path] = {}
        self._writing: set[Path] = set()
        self._known = False
        self._fd = -1
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            self._add = libc.inotify_add_watch
            self._fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        except (OSError, AttributeError):
            return  # not Linux
        if self._fd < 0:
            log.warning("inotify unavailable: files rewritten in place are trusted once they hold still",
                        extra={"error": errno.errorcode.get(ctypes.get_errno(), "?")})
            return
        self._known = self._watch_tree(directory)

    def _watch_tree(self, top: Path) -> bool:
        try:
            directories = [top] + [p for p in top.rglob("*") if p.is_dir()]
        except OSError:
            return False
        for path in directories:
            if len(self._dirs) >= MAX_DIRECTORIES:
                return False
            wd = self._add(self._fd, os.fsencode(path), _WATCHED)
            if wd < 0:
                return False
            self._dirs[wd] = path
        return True

    def pending(self) -> set[Path] | None:
        """Files written to and not closed, as far as the events read now say; None if unknown."""
        if self._fd < 0:
            return None
        while True:
            try:
                data = os.read(self._fd, 64 * 1024)
            except BlockingIOError:
                break
            except OSError:
                self._known = False
                break
            self._apply(data)
        return set(self._writing) if self._known else None

    def _apply(self, data: bytes) -> None:
        offset = 0
        while offset + _EVENT.size <= len(data):
            wd, mask, _cookie, size = _EVENT.unpack_from(data, offset)
            name = data[offset + _EVENT.size:offset + _EVENT.size + size].rstrip(b"\0")
            offset += _EVENT.size + size
            if mask & _OVERFLOW:
                self._known = False  # events were lost: from now on, unknown
                continue
            parent = self._dirs.get(wd)
            if parent is None:
                continue
            if mask & (_IGNORED | _DELETE_SELF):
                self._dirs.pop(wd, None)
                continue
            path = parent / os.fsdecode(name)
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
