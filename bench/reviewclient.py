"""What the server benchmarks share: the example review, one timed post, percentiles in ms."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

EXAMPLE_REVIEW = (
    Path(__file__).resolve().parents[1] / "examples" / "reviews" / "kustomization-spec-change.json"
).read_bytes()


def timed_review(conn, body: bytes = EXAMPLE_REVIEW) -> float:
    """POST one review on ``conn`` (an HTTPSConnection, kept alive); seconds until the answer is read."""
    started = time.perf_counter()
    conn.request("POST", "/validate", body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    resp.read()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}")
    return time.perf_counter() - started


def percentile_ms(values: list[float], q: float) -> float:
    """The ``q`` quantile (0-1) of ``values`` in seconds, in milliseconds."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def median_over_rounds_ms(rounds: list[list[float]], q: float) -> float:
    """The median, over rounds of timings in seconds, of each round's ``q`` quantile in milliseconds."""
    return statistics.median(percentile_ms(took, q) for took in rounds)


def keep_alive_reviews(server, seconds: float, clients: int = 4) -> list[float]:
    """Seconds per review of ``clients`` threads posting the example review for ``seconds``, each
    on its own kept-alive connection to ``server`` (a tests.processes.GateServer)."""
    took: list[float] = []
    errors: list[Exception] = []
    deadline = time.monotonic() + seconds

    def client():
        conn = server.connection(timeout=60)
        try:
            while time.monotonic() < deadline:
                took.append(timed_review(conn))
        except Exception as err:  # noqa: BLE001 (reported, never hidden)
            errors.append(err)
        finally:
            conn.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} review clients failed: {errors[0]!r}")
    return took


def reviews_beside(
    server,
    rounds: int,
    seconds: float,
    busy: str,
    helpers: int,
    helper: Callable[[int, threading.Event, dict], None],
) -> None:
    """Reviews timed alone ("quiet") and beside ``helpers`` threads running ``helper(i, stop,
    answers)`` (phase ``busy``), round after round: a table row per phase, then the medians.
    ``answers`` counts what the helpers were answered, by status."""
    results: dict[str, list[list[float]]] = {"quiet": [], busy: []}
    for round_ in range(1, rounds + 1):
        for phase in ("quiet", busy):
            stop, answers = threading.Event(), {}
            threads = [
                threading.Thread(target=helper, args=(i, stop, answers))
                for i in range(helpers if phase == busy else 0)
            ]
            for t in threads:
                t.start()
            try:
                took = keep_alive_reviews(server, seconds)
            finally:
                stop.set()
                for t in threads:
                    t.join()
            results[phase].append(took)
            shown = ", ".join(f"{n} x {status}" for status, n in sorted(answers.items())) or "-"
            print(
                f"| {round_} | {len(threads)} | {len(took)} | {percentile_ms(took, 0.5):.2f} | "
                f"{percentile_ms(took, 0.99):.2f} | {max(took) * 1000:.0f} | {shown} |",
                flush=True,
            )
    print()
    for phase, timed in results.items():
        print(
            f"{phase}: median over rounds of review p50 {median_over_rounds_ms(timed, 0.5):.2f} ms, "
            f"p99 {median_over_rounds_ms(timed, 0.99):.2f} ms"
        )


def gates_dir_server(prefix: str, gates: int, *flags: str, source: Path | None = None):
    """``gate-admission serve --gates-dir`` (2 workers, 4 threads, ``flags``) on the freeze
    calendar bench's ``gates`` gates, from ``source``'s admission package when given; ready."""
    import tempfile

    import yaml

    from bench.freeze_calendar import world
    from tests.processes import GateServer

    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    gates_dir = tmp / "gates"
    gates_dir.mkdir()
    snapshot = world(gates, dense_every=0).snapshot()
    (gates_dir / "gates.yaml").write_text(yaml.safe_dump_all(snapshot[0] + snapshot[1]))
    env = {"PYTHONPATH": str(source.resolve())} if source else None
    server = GateServer(
        tmp, "--gates-dir", str(gates_dir), "--workers", "2", "--threads", "4", *flags, env=env
    )
    server.wait_ready()
    return server
