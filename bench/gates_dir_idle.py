"""What an idle ``--gates-dir`` costs a worker: CPU time of the polls while nothing changes.

Writes ``--files`` gates files (one Gate each, in ``--dirs`` subdirectories), starts the file
store as a worker does (``FileStore(dir).start()``, one poll a second) and measures the
process's CPU time over ``--seconds`` of wall clock while no file changes: the share of one
core an idle worker spends watching the directory. Then, to tell the watching from the rest,
the CPU time of one idle ``check()`` (the average of ``--polls`` calls in a row). The last
line is a change: one file rewritten, and the CPU time until the store has read it.

CPU times (``getrusage``), not wall clock: on a shared machine wall-clock figures measure the
neighbours. ``--source DIR`` runs another checkout's ``admission`` package (before/after).

    .venv/bin/python bench/gates_dir_idle.py [--files 10000] [--seconds 20] [--source /tmp/before]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from datetime import UTC
from pathlib import Path


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


GATE = """apiVersion: gating.toolkit.fluxcd.io/v1alpha1
kind: Gate
metadata:
  name: gate-{i}
  namespace: team-{ns}
spec:
  default: {default}
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--dirs", type=int, default=10, help="subdirectories the files are spread over")
    parser.add_argument("--seconds", type=float, default=20.0, help="wall clock of idle polling measured")
    parser.add_argument("--polls", type=int, default=20, help="idle check() calls timed in a row")
    parser.add_argument("--source", help="a checkout whose admission package to measure (default: this one)")
    parser.add_argument(
        "--no-inotify",
        action="store_true",
        help="the store without inotify (FileStore(..., inotify=False)): what a worker does where "
        "it is missing or its limits are reached",
    )
    args = parser.parse_args()
    sys.path.insert(0, str(Path(args.source or Path(__file__).resolve().parents[1]).resolve()))
    from admission.store.files import FileStore

    with tempfile.TemporaryDirectory() as tmp:
        top = Path(tmp) / "gates"
        for i in range(args.files):
            where = top / f"team-{i % args.dirs}"
            where.mkdir(parents=True, exist_ok=True)
            (where / f"gate-{i}.yaml").write_text(GATE.format(i=i, ns=i % args.dirs, default="opened"))
        options = {"inotify": False} if args.no_inotify else {}
        started = cpu()
        store = FileStore(top, **options)
        loaded = cpu() - started
        watch = "inotify" if store._writes is not None and store._writes.pending() is not None else "none"
        store.start()
        time.sleep(2.5)  # past the first polls
        before, wall = cpu(), time.monotonic()
        time.sleep(args.seconds)
        idle_share = (cpu() - before) / (time.monotonic() - wall)
        store.stop()

        store = FileStore(top, **options)
        store.check()
        before = cpu()
        for _ in range(args.polls):
            store.check()
        per_poll = (cpu() - before) / args.polls

        changed = top / "team-0" / "gate-0.yaml"
        changed.write_text(GATE.format(i=0, ns=0, default="closed"))
        before = cpu()
        deadline = time.monotonic() + 30
        while store.lookup("team-0", "gate-0", _now()).open and time.monotonic() < deadline:
            store.check()
            time.sleep(0.05)
        change_cpu = cpu() - before
        seen = not store.lookup("team-0", "gate-0", _now()).open

    print(f"files: {args.files} in {args.dirs} directories; first read {loaded:.2f} s CPU; watch: {watch}")
    print(f"idle worker, one poll a second: {idle_share * 100:.2f}% of a core ({args.seconds:g} s measured)")
    print(f"one idle check(): {per_poll * 1000:.2f} ms CPU (mean of {args.polls})")
    print(
        f"one file rewritten: {'read' if seen else 'NOT read'} after {change_cpu * 1000:.1f} ms CPU of polls"
    )
    print(
        f"command: .venv/bin/python bench/gates_dir_idle.py --files {args.files} --dirs {args.dirs} "
        f"--seconds {args.seconds:g} --polls {args.polls}"
        + (f" --source {args.source}" if args.source else "")
        + (" --no-inotify" if args.no_inotify else "")
    )
    return 0


def _now():
    from datetime import datetime

    return datetime.now(UTC)


if __name__ == "__main__":
    sys.exit(main())
