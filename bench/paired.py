"""The in-process figures of two or more trees, measured in turns so a drifting machine slows them alike.

Usage: python bench/paired.py [--rounds 30] [--instructions] TREE [TREE ...]
A TREE is a checkout of the project (say, ``git archive <rev> | tar -x -C /tmp/<rev>``); the first
is the baseline. One worker process per tree, pinned to CPU 0, imports that tree's own code and
keeps ``bench/decisions.py``'s decision (a spec edit of a Kustomization with three gates) and
``bench/status_profile.py``'s four status writes (bytes in, bytes out) warm; the workers take
turns of 0.25 s, the order flipped each round, and each round's rate is divided by the
baseline's of the same round. Printed: the median rate and the median ratio (with quartiles).

``--instructions`` counts instead, with valgrind's callgrind where installed: the CPU
instructions of one decision and of one status review, from a run of 3,000 less a run of none
(start-up cancels out). Counts do not drift with the machine's load, so a change of a few
percent shows; a timing on a shared machine varies by a factor of two within a minute.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

WORKLOADS = ("decide", "status")
SLICE = 0.25  # seconds per turn


def _load(tree: str) -> dict[str, Callable[[], None]]:
    """The two workloads, built from ``tree``'s own modules (its paths before ours)."""
    sys.path[:0] = [tree, os.path.join(tree, "bench")]
    os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", "")
    import logging

    import decisions  # type: ignore[import-not-found]  # (the tree's bench/decisions.py)
    import orjson
    import status_profile  # type: ignore[import-not-found]

    try:
        from admission.core.admission.decision import Context, Settings, decide
    except ImportError:  # a tree from before the core's inner plan (docs/decisions/0083)
        from admission.core.decision import Context, Settings, decide  # type: ignore[no-redef]
    from admission.webhook.app import MUTATE, VALIDATE, Reviews

    logging.disable(logging.INFO)
    index, request, settings = decisions.world(), decisions.review()["request"], Settings()
    context = Context(index.lookup, decisions.NOW, settings)
    cases = status_profile.CASES
    loaded = {
        label: orjson.loads((status_profile.FIXTURES / name).read_bytes())
        for label, (name, _) in cases.items()
    }
    store, sources = status_profile.world(list(loaded.values()))
    reviews = Reviews(store, Settings(), lambda: status_profile.NOW, None, sources)
    routes = {"mutate": MUTATE, "validate": VALIDATE}
    bodies = [(routes[cases[label][1]], orjson.dumps(review)) for label, review in loaded.items()]

    def status() -> None:
        for route, body in bodies:
            reviews.answer(route, body)

    return {"decide": lambda: decide(request, context), "status": status}


def worker(tree: str) -> None:
    """Answer each workload's name on stdin with its rate per second (a status write each)."""
    work = _load(tree)
    for line in sys.stdin:
        name = line.strip()
        calls = 0
        started = now = time.perf_counter()
        while now - started < SLICE:
            for _ in range(50):
                work[name]()
            calls += 50
            now = time.perf_counter()
        per_call = 4 if name == "status" else 1  # (the status workload is four reviews)
        print(calls * per_call / (now - started), flush=True)


def count(tree: str, name: str, calls: int) -> None:
    """Run ``name`` ``calls`` times (under callgrind, which counts)."""
    work = _load(tree)
    for _ in range(calls):
        work[name]()


def timed(trees: list[str], rounds: int) -> None:
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    procs = {
        tree: subprocess.Popen(
            [*pin, sys.executable, __file__, "--worker", tree],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for tree in trees
    }
    rates: dict[tuple[str, str], list[float]] = {(t, w): [] for t in trees for w in WORKLOADS}
    for turn in range(rounds):
        for name in WORKLOADS:
            for tree in trees if turn % 2 == 0 else trees[::-1]:
                proc = procs[tree]
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(name + "\n")
                proc.stdin.flush()
                rates[(tree, name)].append(float(proc.stdout.readline()))
    for proc in procs.values():
        proc.terminate()
    base = trees[0]
    for name in WORKLOADS:
        for tree in trees:
            ratios = [b / a for a, b in zip(rates[(base, name)], rates[(tree, name)], strict=True)]
            low, _, high = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (1.0, 1.0, 1.0)
            print(
                f"{name:7} {tree:28} median {statistics.median(rates[(tree, name)]):>9,.0f}/s  "
                f"vs the first: {statistics.median(ratios):.3f} (quartiles {low:.3f}-{high:.3f})"
            )


def instructions(trees: list[str]) -> None:
    if not shutil.which("valgrind"):
        raise SystemExit("--instructions needs valgrind (apt: valgrind)")

    def collected(tree: str, name: str, calls: int) -> int:
        out = subprocess.run(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
            + [sys.executable, __file__, "--count", name, str(calls), tree],
            capture_output=True,
            text=True,
            check=True,
        ).stderr
        found = re.search(r"Collected : (\d+)", out)
        if found is None:
            raise SystemExit(f"callgrind printed no count:\n{out}")
        return int(found.group(1))

    for name in WORKLOADS:
        per = 4 if name == "status" else 1
        for tree in trees:
            each = (collected(tree, name, 3000) - collected(tree, name, 0)) / 3000 / per
            print(
                f"{name:7} {tree:28} {each:>11,.0f} instructions per {'review' if per == 4 else 'decision'}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+", help="checkouts of the project; the first is the baseline")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--instructions", action="store_true", help="count CPU instructions (valgrind)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--count", nargs=2, metavar=("WORKLOAD", "CALLS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    trees = [str(Path(t).resolve()) for t in args.trees]
    if args.worker:
        return worker(trees[0])
    if args.count:
        return count(trees[0], args.count[0], int(args.count[1]))
    flags = f"--rounds {args.rounds}" if not args.instructions else "--instructions"
    print(f"# python bench/paired.py {flags} {' '.join(args.trees)}")
    if args.instructions:
        instructions(trees)
    else:
        timed(trees, args.rounds)


if __name__ == "__main__":
    main()
