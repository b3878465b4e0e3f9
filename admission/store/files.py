"""Gates from YAML files (``--gates-dir``): the default that needs no cluster."""

from __future__ import annotations

import logging
import os
import threading
import time
from datetime import datetime
from pathlib import Path

import yaml

from admission.core import names
from admission.core.gates import GateState
from admission.store.yamldocs import describe_error, objects
from admission.core.objects import Key, object_key
from admission.store.index import GateIndex
from admission.store.writers import OpenWrites

log = logging.getLogger(__name__)
SUFFIXES = (".yaml", ".yml", ".json")
MAX_FILE = 1024 * 1024  # bytes per gates file; a larger one is broken (its gates stay closed)


def _read(path: Path) -> str:
    with open(path, "rb") as handle:
        data = handle.read(MAX_FILE + 1)
    if len(data) > MAX_FILE:
        raise ValueError(f"file is larger than {MAX_FILE} bytes")
    return data.decode("utf-8")


def _documents(text: str) -> list[dict]:
    """Gate and GateKeeper documents of a multi-document YAML text (``kind: List`` too)."""
    found = []
    for item in objects(text):
        if not isinstance(item, dict):
            raise ValueError(f"a document is a {type(item).__name__}, not a mapping")
        if item.get("kind") not in (names.GATE_KIND, names.GATEKEEPER_KIND):
            continue  # other objects may share the directory
        api = item.get("apiVersion")
        if api is not None and api != names.GATING_API_VERSION:
            raise ValueError(f"{item['kind']} has apiVersion {api!r}, want {names.GATING_API_VERSION}")
        meta = item.get("metadata")
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
            raise ValueError(f"a {item['kind']} has no metadata.name")
        if not isinstance(item.get("spec", {}), dict):
            raise ValueError(f"{item['kind']} {meta['name']!r} has a spec that is not a mapping")
        found.append(item)
    return found


class ScanFailed(Exception):
    """The gates directory changed while it was listed; nothing it held is known for sure."""


def _signature_of(files: list[Path]) -> tuple:
    """(path, mtime, size) of each file still there: what tells a poll that something changed."""
    signature = []
    for path in files:
        try:
            st = path.stat()
        except OSError:
            continue
        signature.append((str(path), st.st_mtime_ns, st.st_size))
    return tuple(signature)


class FileStore:
    """Reads every YAML file under a directory; re-reads when any file changes."""

    def __init__(self, directory: str | os.PathLike, poll_interval: float = 1.0):
        self.directory = Path(directory)
        self.poll_interval = poll_interval
        self.index = GateIndex()
        self.problems: dict[str, str] = {}
        self._signature: tuple | None = ()  # None: the last read failed
        self._changing: tuple | None = None  # a new signature seen once, not yet read
        self._last_good: dict[Path, list[dict]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.checked_at = time.monotonic()
        self.being_written: list[str] = []  # gate files a writer has open (modified, not closed)
        self._writes = OpenWrites(self.directory) if self.directory.is_dir() else None
        self.reload()

    def lookup(self, namespace: str, name: str, now: datetime) -> GateState:
        return self.index.lookup(namespace, name, now)

    def readiness(self) -> tuple[bool, dict]:
        # Broken files do not make us unready: their gates are closed, and an unready
        # webhook would stop every gated write instead of the few that need those gates.
        detail = {"store": "files", "directory": str(self.directory), "gates": len(self.index)}
        if self.problems:
            detail["problems"] = dict(self.problems)
        if self.being_written:
            detail["being_written"] = list(self.being_written)
        return True, detail

    def _files(self) -> list[Path]:
        """The gates files under the directory; raise ScanFailed when it changed while listed."""
        if not self.directory.is_dir():
            return []
        try:
            return sorted(p for p in self.directory.rglob("*")
                          if p.suffix in SUFFIXES and p.is_file() and not any(part.startswith(".") for part in p.relative_to(self.directory).parts))
        except OSError as err:  # the directory (or a subdirectory) vanished while it was scanned
            raise ScanFailed(f"gates directory changed while it was read ({type(err).__name__}); "
                             "the gates last read are kept until it reads whole") from None

    def _current_signature(self) -> tuple:
        return _signature_of(self._files())

    def reload(self, unfinished: frozenset[str] = frozenset()) -> None:
        """Read the directory again; a broken file closes the gates it defines, never crashes.
        Files in ``unfinished`` (being written) keep the gates they had when last read."""
        try:
            files = self._files()
        except ScanFailed as err:
            # An empty list here would drop every gate: keep them, closed or open, as last read.
            log.warning("gates directory not read", extra={"directory": str(self.directory), "error": str(err)})
            self.problems = {**self.problems, str(self.directory): str(err)}
            self._signature = None  # unlike any listing: the next polls read it again
            return
        self._signature = tuple(entry for entry in _signature_of(files) if entry[0] not in unfinished)
        problems: dict[str, str] = {}
        if not self.directory.is_dir():
            problems[str(self.directory)] = "gates directory does not exist: every referenced gate is NotFound"
        objects: list[tuple[Path, dict]] = []
        broken: dict[Key, str] = {}
        for path in files:
            if str(path) in unfinished:
                objects += [(path, doc) for doc in self._last_good.get(path, [])]
                continue
            try:
                docs = _documents(_read(path))
            except (OSError, UnicodeDecodeError, yaml.YAMLError, ValueError, RecursionError) as err:
                detail = describe_error(err) if isinstance(err, yaml.YAMLError) else \
                    f"{type(err).__name__}: {err.strerror}" if isinstance(err, OSError) else \
                    "not UTF-8" if isinstance(err, UnicodeDecodeError) else \
                    "nested too deeply" if isinstance(err, RecursionError) else " ".join(str(err).split())
                why = f"gates file {path.name} is broken: {detail}"
                problems[str(path)] = why
                log.error("gates file is broken", extra={"file": str(path), "error": why})
                # The gates it defined when it last parsed stay, closed, with the reason.
                for doc in self._last_good.get(path, []):
                    objects.append((path, doc))
                    if doc["kind"] == names.GATE_KIND:
                        broken[object_key(doc)] = why
                continue
            self._last_good[path] = docs
            objects += [(path, doc) for doc in docs]

        gates: dict[Key, tuple[Path, dict]] = {}
        keepers = []
        for path, doc in objects:
            if doc["kind"] == names.GATEKEEPER_KIND:
                keepers.append(doc)
                continue
            key = object_key(doc)
            if key in gates:
                where = f"twice in {path.name}" if gates[key][0] == path else f"in both {gates[key][0].name} and {path.name}"
                why = f"gate {key[0]}/{key[1]} is defined {where}"
                problems[f"{key[0]}/{key[1]}"] = why
                broken[key] = why
            gates[key] = (path, doc)
        self.index.replace_all([doc for _, doc in gates.values()], keepers, broken)
        self.problems = problems
        log.info("gates loaded", extra={"directory": str(self.directory), "gates": len(gates),
                                        "gatekeepers": len(keepers), "problems": len(problems)})

    def check(self) -> bool:
        """Reload once a change has held still for a poll; return whether it reloaded.

        A half-written file can parse (a truncated ``spec:`` is an empty spec, which is open by
        default), so reading it mid-write could open a closed gate. A file that a writer has
        modified and not closed yet (inotify, where there is one) is not read, however long the
        writer pauses, while the other files are; and a changed file is read only when it has
        been the same (size and mtime) at two polls in a row. Until then its gates stay as they
        were last read."""
        try:
            current = self._current_signature()
        except ScanFailed:  # not a change: listed again at the next poll
            return False
        writing = self._writes.pending() if self._writes is not None else None
        files = {Path(entry[0]) for entry in current}
        self.being_written = sorted(str(path) for path in (writing or ()) if path in files)
        unfinished = frozenset(self.being_written)
        # Files being written are left out: the others reload as usual, and a file whose writer
        # closes it differs from the last signature, so it is read after holding still.
        current = tuple(entry for entry in current if entry[0] not in unfinished)
        reloaded = False
        if current == self._signature:
            self._changing = None
        elif current == self._changing:
            self.reload(unfinished)
            self._changing = None
            reloaded = True
        else:
            self._changing = current
        self.checked_at = time.monotonic()
        return reloaded

    def cache_age(self, now_monotonic: float) -> float:
        return max(0.0, now_monotonic - self.checked_at)

    def _run(self) -> None:
        while not self._stop.wait(self.poll_interval):
            try:
                self.check()
            except Exception:  # a reload must never kill the watcher thread
                log.exception("reloading the gates directory failed")
        if self._writes is not None:
            self._writes.close()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gates-dir-watch", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is None and self._writes is not None:
            self._writes.close()  # else the watcher thread closes it, never while it reads
