"""Does a gates file rewritten in place ever open a closed gate? Two measures.

``--interleavings N``: N random interleavings (seeded, so repeatable) of a writer rewriting a
gates file in place (open with truncation, the new content in pieces, close) with polls,
reloads and worker starts, writer steps also made inside them at any of their reads (the
machinery of tests/interleave.py; the property of tests/app/test_store.py). Counts the
interleavings in which any store answered what no whole version of the file says: the closed
gate open, or the gate the new content opens open before the file was whole.

``--timed``: the scenario as an operator meets it, in real time, on the real server
(``gate-admission serve --gates-dir``, 2 workers, HTTPS): two ~0.7 MB gates files and one file
holding a closed gate, truncated and written up to ``interval: 30s`` (open by default if read),
then a ``--pause`` before the rest is written. The big files change just before (the workers are
reloading them when the writer starts), and a worker is killed a second into the pause (gunicorn
starts another, which reads the directory while the writer pauses). A review of a Kustomization
held by the closed gate every 50 ms, each on a new connection; counts the allowed ones and how
long any was.

``--source DIR`` runs another checkout's ``admission`` package (before/after).

    .venv/bin/python bench/gates_dir_writers.py --interleavings 2000 [--source /tmp/before]
    .venv/bin/python bench/gates_dir_writers.py --timed [--pause 8] [--source /tmp/before]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def interleavings(count: int, seed: int) -> None:
    from admission.store.files import FileStore
    from tests.app.test_store import HALF, NEW_TEXT, _team_file, _wrong
    from tests.interleave import Writer, during

    rng = random.Random(seed)
    broken: dict[str, int] = {}
    first = None
    actions_run = watched = started = 0
    for case in range(count):
        cuts = [rng.randrange(1, len(NEW_TEXT)) for _ in range(rng.randrange(0, 4))]
        actions = []
        for _ in range(rng.randrange(1, 15)):
            kind = rng.choice(["write", "write", "check", "reload", "start"])
            points = {rng.randrange(1, 11) for _ in range(rng.randrange(0, 4))}
            actions.append((kind, rng.randrange(0, 4), points))
        with tempfile.TemporaryDirectory() as tmp:
            path = _team_file(Path(tmp))
            writer = Writer(path, NEW_TEXT, [HALF, *cuts])
            stores = [FileStore(tmp)]
            wrong = None
            try:
                for kind, which, points in actions:
                    actions_run += 1
                    if kind == "write":
                        writer.step()
                    elif kind == "start":
                        stores.append(during(writer, points, lambda: FileStore(tmp)))
                    else:
                        store = stores[which % len(stores)]
                        during(writer, points, store.check if kind == "check" else store.reload)
                    wrong = next((w for s in stores if (w := _wrong(s)) is not None), None)
                    if wrong is not None:
                        break
                # inotify's per-user limit of instances is shared with every process of the user
                started += len(stores)
                watched += sum(1 for s in stores if s._writes is not None and s._writes.pending() is not None)
            finally:
                writer.close()
                for store in stores:
                    store.stop()
        if wrong is not None:
            broken[wrong] = broken.get(wrong, 0) + 1
            first = first or (case, cuts, actions)
    print(
        f"interleavings: {count} ({actions_run} actions, seed {seed}; {watched} of {started} stores had inotify); "
        f"with a wrong answer: {sum(broken.values())}"
    )
    for what, times in sorted(broken.items(), key=lambda item: -item[1]):
        print(f"  {times:5} x {what}")
    if first is not None:
        print(f"  first: case {first[0]}, cuts {first[1]}, actions {first[2]}")


def timed(pause: float, big_bytes: int, source: str | None) -> None:
    import os
    import signal

    import orjson
    import yaml

    from tests.builders import changed, flux, gate, request, review
    from tests.processes import GateServer

    held = flux(gates="flux-system/bypass-signoff")
    body = orjson.dumps(review(request("UPDATE", changed(held, path="./b"), held)))

    def big(name: str, fill: str) -> str:
        gates, size = [], 0
        while size < big_bytes:
            text = yaml.safe_dump(
                gate(f"{name}-{len(gates)}", "bulk", annotations={"note": fill}), sort_keys=False
            )
            gates.append(text)
            size += len(text) + 4
        return "---\n".join(gates)

    with tempfile.TemporaryDirectory() as tmp:
        top = Path(tmp) / "gates"
        top.mkdir()
        bulk = {name: (big(name, "x" * 40), big(name, "y" * 40)) for name in ("a-bulk", "b-bulk")}
        for name, (text, _) in bulk.items():
            (top / f"{name}.yaml").write_text(text)
        team = top / "team.yaml"
        full = yaml.safe_dump(gate("bypass-signoff", interval="30s", default="closed"), sort_keys=False)
        team.write_text(full)
        half = full[: full.index("default: closed")]  # ends with `interval: 30s`: open by default

        env = {"PYTHONPATH": str(Path(source).resolve())} if source else None
        server = GateServer(Path(tmp), "--gates-dir", str(top), "--workers", "2", env=env)
        results: list[tuple[float, bool]] = []
        events: list[tuple[str, float]] = []
        stop = threading.Event()

        def reviews():
            while not stop.is_set():
                try:  # a new connection each time: the kernel spreads them over the workers
                    status, answer = server.request("POST", "/validate", body)
                    results.append((time.monotonic(), status == 200 and answer["response"]["allowed"]))
                except OSError:
                    pass  # a worker killed mid-request
                stop.wait(0.05)

        try:
            server.wait_ready(60)
            started = time.monotonic()
            thread = threading.Thread(target=reviews)
            thread.start()
            time.sleep(1.5)
            for name, (_, text) in bulk.items():  # a change the workers reload (slowly) next
                (top / f"{name}.yaml").write_text(text)
            time.sleep(1.2)
            writer = open(team, "w")
            writer.write(half)
            writer.flush()
            events.append(("truncated and half written", time.monotonic()))
            time.sleep(1.0)
            os.kill(
                server.children()[0], signal.SIGKILL
            )  # gunicorn starts another worker, which reads the directory
            events.append(("a worker killed (restarted)", time.monotonic()))
            time.sleep(max(0.0, pause - (time.monotonic() - events[0][1])))
            writer.write(full[len(half) :])
            writer.close()
            events.append(("written whole", time.monotonic()))
            time.sleep(3.0)
            stop.set()
            thread.join()
        finally:
            stop.set()
            server.stop()

    allowed = [at for at, ok in results if ok]
    span = f"{allowed[-1] - allowed[0]:.1f} s (from {allowed[0] - started:.1f} s)" if allowed else "never"
    print("timeline: " + ", ".join(f"{what} at {at - started:.1f} s" for what, at in events))
    print(
        f"reviews: {len(results)}, allowed: {len(allowed)}; the closed gate let changes through over {span}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interleavings", type=int, default=0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timed", action="store_true")
    parser.add_argument(
        "--pause", type=float, default=8.0, help="seconds the writer pauses mid-write (--timed)"
    )
    parser.add_argument(
        "--big-bytes", type=int, default=700_000, help="size of each of the two big files (--timed)"
    )
    parser.add_argument("--source", help="a checkout whose admission package to measure (default: this one)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.source:
        sys.path.insert(0, str(Path(args.source).resolve()))
    import admission

    print(f"admission from {Path(admission.__file__).parent.parent}")
    if args.interleavings:
        interleavings(args.interleavings, args.seed)
    if args.timed:
        timed(args.pause, args.big_bytes, args.source)
    print(
        "command: .venv/bin/python bench/gates_dir_writers.py"
        + (f" --interleavings {args.interleavings} --seed {args.seed}" if args.interleavings else "")
        + (f" --timed --pause {args.pause:g}" if args.timed else "")
        + (f" --source {args.source}" if args.source else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
