"""Gates from YAML files (``--gates-dir``): the default that needs no cluster.

What the store guarantees (docs/design.md, "File store"): a file's content is used only when it
was read as one whole version, which no writer had open and which held still for a poll; a
file that cannot be used never crashes anything or stops the other files being read; and
whatever cannot be known (a file never read whole) closes the gates it may define, never opens one.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from admission.background import BackgroundThread
from admission.core.base import names
from admission.core.base.objects import Key, object_key
from admission.core.gates.gates import GateState
from admission.store.gatesfile import Scope, gates_of, parse
from admission.store.index import GateIndex, Unknowns
from admission.store.writers import BeingWritten, OpenWrites, Version, read_whole, version

log = logging.getLogger(__name__)
SUFFIXES = (".yaml", ".yml", ".json")
MAX_FILE = 1024 * 1024  # bytes per gates file; a larger one is broken (its gates stay closed)
# With inotify, an idle poll reads nothing but the (empty) event queue; the directory is still
# listed whole this often, for what inotify cannot see (a network filesystem's remote writers).
FULL_SCAN_INTERVAL = 60.0


class ScanFailed(Exception):
    """The gates directory changed while it was listed; nothing it held is known for sure."""


@dataclass
class Listing:
    """The gates directory as listed once."""

    files: dict[str, Version] = field(default_factory=dict)  # every gates file, with its version
    unstatable: dict[str, str] = field(default_factory=dict)  # gates files that cannot be looked at, and why
    unlistable: dict[str, str] = field(default_factory=dict)  # directories that cannot be listed, and why


def _why(err: OSError) -> str:
    code = errno.errorcode.get(err.errno or 0, type(err).__name__)
    return f"{code}: {err.strerror or err}"


def _scan(top: str) -> Listing:
    """Every gates file under ``top`` (not in or under a dot-entry; symlinks to files followed,
    to directories not), with its version, and the entries that cannot be looked at.

    An entry that cannot be looked at (ELOOP, EACCES, EIO) stays so until someone mends it: it
    is one broken entry and the rest is listed. A directory gone mid-scan is another matter: it
    would take the files in it out of the listing for a moment, and a GateKeeper that vanishes
    can open a gate, so ScanFailed says that nothing listed is known for sure."""
    found = Listing()
    stack = [top]
    while stack:
        directory = stack.pop()
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    if entry.name.startswith("."):
                        continue
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                            continue
                        if not entry.name.endswith(SUFFIXES):
                            continue
                        st = entry.stat()
                    except FileNotFoundError:  # gone since listed, or a dangling symlink
                        continue
                    except OSError as err:
                        found.unstatable[entry.path] = _why(err)
                        continue
                    if stat.S_ISREG(st.st_mode):
                        found.files[entry.path] = version(st)
        except (FileNotFoundError, NotADirectoryError) as err:
            raise ScanFailed(
                f"gates directory changed while it was read ({type(err).__name__}); "
                "the gates last read are kept until it reads whole"
            ) from None
        except OSError as err:
            found.unlistable[directory] = _why(err)
    return found


# -- the store ---------------------------------------------------------------------------------


class _File:
    """What the store knows of one gates file."""

    __slots__ = ("seen", "read", "read_at", "docs", "problem", "scope", "writing", "from_start")

    def __init__(self, from_start: bool):
        self.seen: Version | None = None  # its version at the latest look
        self.read: Version | None = None  # the version last read whole (usable or not)
        self.read_at = 0  # inotify's sequence number before that read: a later event means read again
        self.docs: list[dict[str, Any]] | None = None  # the Gates and GateKeepers of the last good read
        self.problem: str | None = None  # why the version last read cannot be used
        self.scope: Scope | None = None  # what that version may define (while there is no good read)
        self.writing = False  # being written (or changing) when last looked at: not read
        self.from_start = from_start  # there when the store first listed the directory


class FileStore:
    """Reads every YAML file under a directory, and each file again when it has changed."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        poll_interval: float = 1.0,
        *,
        full_scan_interval: float = FULL_SCAN_INTERVAL,
        inotify: bool = True,
    ):
        self.directory = Path(directory)
        self._top = str(self.directory)
        self.poll_interval = poll_interval
        self.full_scan_interval = full_scan_interval
        self.index = GateIndex()
        self.problems: dict[str, str] = {}
        self.being_written: list[str] = []  # gate files a writer has open (or that changed as they were read)
        self._files: dict[str, _File] = {}
        self._listing: dict[str, Version] | None = None  # None: never listed whole
        self._unstatable: dict[str, str] = {}  # of the latest listing
        self._unlistable: dict[str, str] = {}  # of the latest listing
        self._scan_problem: str | None = None  # why the latest listing failed
        self._unsettled: set[str] = set()  # files to look at again at the next poll
        self._dirty = True  # the index does not reflect _files yet
        self._next_full_scan = 0.0
        self._watcher = BackgroundThread("gates-dir-watch")
        self._inotify = inotify
        self._writes: OpenWrites | None = None
        self.checked_at = time.monotonic()
        self._watch()  # before the first read: a write from then on is seen
        self.reload()

    def lookup(self, namespace: str, name: str, now: datetime) -> GateState:
        return self.index.lookup(namespace, name, now)

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        # Broken files do not make us unready: their gates are closed, and an unready webhook
        # would stop every gated write instead of the few that need those gates (or, with
        # failurePolicy Ignore, let every one through).
        detail = {"store": "files", "directory": self._top, "gates": len(self.index)}
        if self.problems:
            detail["problems"] = dict(self.problems)
        if self.being_written:
            detail["being_written"] = list(self.being_written)
        return True, detail

    def cache_age(self, now_monotonic: float) -> float:
        return max(0.0, now_monotonic - self.checked_at)

    # -- looking at the directory ------------------------------------------------------------

    def _watch(self) -> None:
        """Watch the directory when it exists; again at each full scan while inotify could not
        be set up (its per-user limit may have been reached for a while)."""
        if not self._inotify or not os.path.isdir(self._top):
            return
        if self._writes is None or not self._writes.available and time.monotonic() >= self._next_full_scan:
            self._writes = OpenWrites(self._top)

    def reload(self) -> bool:
        """List the directory and read every changed file now, without waiting for it to hold
        still (at start, and on demand); files being written are still not read. Never raises."""
        return self._look(settle=False, full=True)

    def check(self) -> bool:
        """One poll: read the files that changed, once each has held still since the previous
        poll; return whether the gates were rebuilt.

        A half-written file can parse (a truncated ``spec:`` is an empty spec, which is open by
        default), so a file is read only as one whole version (``writers.read_whole``: under a
        read lease, which the kernel refuses while any process has the file open for writing),
        only when no writer has it open after modifying it (inotify), and only when it is the
        version seen at the previous poll; a read during which it changed is thrown away. Until
        then its gates stay as they were last read. With inotify an idle poll reads only the
        (empty) event queue; the directory is listed when something changed in it."""
        self._watch()
        changed = self._writes.changed() if self._writes is not None else None
        # An entry that cannot be looked at is looked at again at every poll: what mends it (a
        # chmod, a symlink's target created elsewhere) need not be anything inotify reports here.
        full = (
            changed is not False
            or self._listing is None
            or self._scan_problem is not None
            or bool(self._unstatable or self._unlistable)
            or time.monotonic() >= self._next_full_scan
        )
        if not (full or self._unsettled or self._dirty):
            self.checked_at = time.monotonic()
            return False
        return self._look(settle=True, full=full)

    def _look(self, settle: bool, full: bool) -> bool:
        try:
            listing = self._list(full)
        except ScanFailed as err:
            # An empty listing here would drop every gate: keep them, closed or open, as last read.
            if self._scan_problem != str(err):
                log.warning("gates directory not read", extra={"directory": self._top, "error": str(err)})
                self._scan_problem, self._dirty = str(err), True
            listing = None
        except Exception:  # a bug must not stop the store: keep the gates, look again next poll
            log.exception("listing the gates directory failed")
            self._scan_problem, self._dirty, listing = "gates directory could not be listed", True, None
        try:
            if listing is not None:
                if self._scan_problem is not None:
                    self._scan_problem, self._dirty = None, True
                self._update(listing, settle and self._listing is not None)
                self._listing = listing.files
            if self._dirty:
                self._rebuild()
                return True
            return False
        except Exception:  # never raises; _dirty stays set, so the next poll rebuilds again
            log.exception("reloading the gates directory failed")
            return False
        finally:
            self.checked_at = time.monotonic()

    def _list(self, full: bool) -> Listing:
        try:
            if not stat.S_ISDIR(os.stat(self._top).st_mode):
                return Listing()
        except FileNotFoundError:
            return Listing()
        except OSError:
            pass  # (EACCES, ELOOP) listing it says why
        if not full and self._listing is not None:
            # inotify saw nothing since the last listing: only files that had not held still
            # are looked at again (has each held still since?)
            listing = dict(self._listing)
            for path in self._unsettled:
                try:
                    st = os.stat(path)
                except OSError:
                    break
                if not stat.S_ISREG(st.st_mode):
                    break
                listing[path] = version(st)
            else:
                return Listing(listing, dict(self._unstatable), dict(self._unlistable))
        self._next_full_scan = time.monotonic() + self.full_scan_interval
        return _scan(self._top)

    def _update(self, listing: Listing, settle: bool) -> None:
        """Read the files of ``listing`` that changed since they were last read (and, when
        ``settle``, have held still since the previous look) as whole versions; a file that
        cannot be looked at is broken, like one that cannot be read."""
        writes = self._writes
        pending = writes.pending() if writes is not None else None
        first = self._listing is None
        unsettled: set[str] = set()
        candidates = []
        for path, seen in listing.files.items():
            entry = self._files.get(path)
            if entry is None:
                entry = self._files[path] = _File(from_start=first)
                self._dirty = True
            before, entry.seen = entry.seen, seen
            # (A rewrite within one tick of the file system's clock can leave the version as it was.)
            if seen == entry.read and (writes is None or writes.last_event(path) <= entry.read_at):
                if entry.writing:
                    entry.writing, self._dirty = False, True
                continue
            if pending is not None and path in pending or settle and seen != before:
                unsettled.add(path)  # being written, or changed since the previous look
                if pending is not None and path in pending and not entry.writing:
                    entry.writing, self._dirty = True, True
                continue
            candidates.append((path, entry, seen))
        sequence = writes.sequence if writes is not None else 0
        reads: list[tuple[str, _File, Version, bytes | None, str | None]] = []
        for path, entry, seen in candidates:
            try:
                got = read_whole(path, MAX_FILE)
            except BeingWritten:
                unsettled.add(path)
                if not entry.writing:
                    entry.writing, self._dirty = True, True
                continue
            except FileNotFoundError:
                unsettled.add(path)  # gone: the next listing drops it
                continue
            except OSError as err:
                reads.append((path, entry, seen, None, f"{type(err).__name__}: {err.strerror or err}"))
                continue
            if got.version != seen:  # not the version that held still: look again
                entry.seen = got.version
                unsettled.add(path)
                continue
            reads.append((path, entry, seen, got.data, None))
        if writes is not None and reads:
            # Anything that happened to a file while it was read (inotify is asked after the reads):
            # without a lease, this is what tells a torn read.
            pending = writes.pending()
            kept = []
            for read in reads:
                path, entry = read[0], read[1]
                if pending is not None and path in pending or writes.last_event(path) > sequence:
                    unsettled.add(path)
                    if not entry.writing:
                        entry.writing, self._dirty = True, True
                else:
                    kept.append(read)
            reads = kept
        for path, entry, seen, data, failure in reads:
            entry.read_at = sequence
            self._use(path, entry, seen, data, failure)
        for path, why in listing.unstatable.items():
            entry = self._files.get(path)
            if entry is None:
                entry = self._files[path] = _File(from_start=first)
            problem = f"gates file {self._name(path)} cannot be looked at ({why})"
            if entry.problem != problem:
                log.error("gates file is broken", extra={"file": path, "error": problem})
                entry.problem, entry.scope, self._dirty = problem, Scope(everything=True), True
            # Its last good read (if any) stays, closed; once it can be looked at, it is read again.
            entry.seen = entry.read = None
            if entry.writing:
                entry.writing, self._dirty = False, True
        unlisted = tuple(os.path.join(directory, "") for directory in listing.unlistable)
        for path in [
            p
            for p in self._files
            if p not in listing.files and p not in listing.unstatable and not p.startswith(unlisted)
        ]:  # (a file in a directory that cannot be listed is not known gone)
            del self._files[path]
            self._dirty = True
        if (listing.unstatable, listing.unlistable) != (self._unstatable, self._unlistable):
            self._unstatable, self._unlistable, self._dirty = listing.unstatable, listing.unlistable, True
        self._unsettled = unsettled

    def _use(self, path: str, entry: _File, seen: Version, data: bytes | None, failure: str | None) -> None:
        """Take a whole read of a file: its documents, or why it cannot be used."""
        name = self._name(path)
        if failure is None and (data is None or len(data) > MAX_FILE):
            failure = "nothing was read" if data is None else f"file is larger than {MAX_FILE} bytes"
        parsed = None
        if failure is None and data is not None:
            try:
                parsed = parse(data.decode("utf-8"))
            except UnicodeDecodeError:
                failure = "not UTF-8"
            except Exception as err:  # a bug: this file is broken, the others are read
                log.exception("parsing a gates file failed", extra={"file": path})
                failure = f"cannot be parsed ({type(err).__name__})"
        if parsed is not None and parsed.problem is None:
            entry.docs, entry.problem, entry.scope = parsed.docs, None, None
        else:
            why = f"gates file {name} is broken: {failure or (parsed.problem if parsed is not None else '')}"
            entry.problem, entry.scope = why, parsed.scope if parsed is not None else Scope(everything=True)
            log.error("gates file is broken", extra={"file": path, "error": why})
        entry.read, entry.writing, self._dirty = seen, False, True

    def _name(self, path: str) -> str:
        return os.path.relpath(path, self._top)

    def _rebuild(self) -> None:
        """The index, from what is known of every file."""
        problems: dict[str, str] = {}
        if not os.path.isdir(self._top):
            problems[self._top] = "gates directory does not exist: every referenced gate is NotFound"
        if self._scan_problem is not None:
            problems[self._top] = self._scan_problem
        everything: str | None = None
        if self._listing is None and self._scan_problem is not None:
            everything = f"the gates directory was never listed whole: {self._scan_problem}"
        for directory, why in sorted(self._unlistable.items()):
            name = self._top if directory == self._top else self._name(directory)
            problems[directory] = f"gates directory {name} cannot be listed ({why})"
            everything = everything or f"{problems[directory]}; a file in it may define or schedule this gate"
        unknown_ns: dict[str, str] = {}
        unknown_gates: dict[Key, str] = {}
        objects: list[tuple[str, dict[str, Any]]] = []
        broken: dict[Key, str] = {}
        for path in sorted(self._files):
            entry = self._files[path]
            if entry.problem is not None:
                problems[path] = entry.problem
            if entry.docs is not None:
                objects += [(path, doc) for doc in entry.docs]
                if entry.problem is not None:
                    # The gates it defined or scheduled when it last parsed stay, closed, with the reason.
                    for doc in entry.docs:
                        if (gate := gates_of(doc)) is not None:
                            broken[gate] = entry.problem
            elif entry.problem is not None and entry.scope is not None:
                why = f"{entry.problem}; never read whole, it may define or schedule this gate"
                if entry.scope.everything:
                    everything = everything or why
                for namespace in entry.scope.namespaces:
                    unknown_ns.setdefault(namespace, why)
                for key in entry.scope.gates:
                    unknown_gates.setdefault(key, why)
            elif entry.from_start and entry.read is None:
                everything = everything or (
                    f"gates file {self._name(path)} was being written when the store "
                    "started; until it is read whole, it may define or schedule any gate"
                )

        gates: dict[Key, tuple[str, dict[str, Any]]] = {}
        keepers: dict[Key, tuple[str, dict[str, Any]]] = {}
        for path, doc in objects:
            key = object_key(doc)
            seen = gates if doc["kind"] == names.GATE_KIND else keepers
            if key in seen:
                first = seen[key][0]
                where = (
                    f"twice in {self._name(path)}"
                    if first == path
                    else f"in both {self._name(first)} and {self._name(path)}"
                )
                why = f"{doc['kind'].lower()} {key[0]}/{key[1]} is defined {where}"
                problems[f"{key[0]}/{key[1]}" if seen is gates else f"gatekeeper {key[0]}/{key[1]}"] = why
                for dup in (seen[key][1], doc):
                    if (gate := gates_of(dup)) is not None:
                        broken[gate] = why
            seen[key] = (path, doc)
        self.index.replace_all(
            [doc for _, doc in gates.values()],
            [doc for _, doc in keepers.values()],
            broken,
            Unknowns(everything, unknown_ns, unknown_gates),
        )
        for key, (path, _) in sorted(gates.items()):
            compiled = self.index.compiled(*key)
            if key in broken or compiled is None:
                continue
            # Closed (Invalid) already, or input ignored (a toggle that cannot be read): said here
            # too, so that CI (exit 6) and /readyz see what was written wrong.
            where = f"{key[0]}/{key[1]}"
            said = [f"is invalid: {'; '.join(compiled.errors)}"] if compiled.errors else []
            said += (
                [f"has input that is ignored: {'; '.join(compiled.problems)}"] if compiled.problems else []
            )
            if said:
                problems.setdefault(where, f"gate {where} in {self._name(path)} {' and '.join(said)}")
        for where, why in problems.items():
            if self.problems.get(where) != why:
                log.error("gates directory problem", extra={"directory": self._top, "error": why})
        self.problems = problems
        self.being_written = sorted(path for path, entry in self._files.items() if entry.writing)
        self._dirty = False
        log.info(
            "gates loaded",
            extra={
                "directory": self._top,
                "gates": len(gates),
                "gatekeepers": len(keepers),
                "problems": len(problems),
            },
        )

    # -- the watcher thread ------------------------------------------------------------------

    def _run(self) -> None:
        while not self._watcher.wait(self.poll_interval):
            try:
                self.check()
            except Exception:  # a reload must never kill the watcher thread
                log.exception("reloading the gates directory failed")
        if self._writes is not None:
            self._writes.close()

    def start(self) -> None:
        self._watcher.start(self._run)

    def stop(self) -> None:
        self._watcher.stop()
        if not self._watcher.started and self._writes is not None:
            self._writes.close()  # else the watcher thread closes it, never while it reads
