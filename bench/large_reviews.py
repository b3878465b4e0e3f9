"""Review latency while clients post reviews of the largest size the server accepts.

`gate-admission serve --gates-dir examples/gates` (2 workers x 4 threads, the defaults) on a
free loopback port. Rounds alternate between quiet and loaded; loaded, `--large` clients post,
back to back, reviews just under the body limit that cost the most to decode of those the server
accepts (an UPDATE of a Kustomization whose `spec` holds as many empty lists as the review's
limit on arrays and objects allows, then a long string). Meanwhile 4 client threads post the example
review on keep-alive connections for `--seconds`, and the workers' resident memory is sampled.

    .venv/bin/python bench/large_reviews.py [--rounds 3] [--seconds 10] [--large 8]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from admission.webhook.app import MAX_BODY as MAX_REVIEW_BYTES  # noqa: E402
from bench.reviewclient import (
    EXAMPLE_REVIEW,
    keep_alive_reviews,
    median_over_rounds_ms,
    timed_review,
)  # noqa: E402
from bench.reviewclient import (
    percentile_ms as pct,
)
from tests.builders import padded_to_the_limit  # noqa: E402
from tests.processes import GateServer  # noqa: E402
from tests.procfs import rss_mb  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--large", type=int, default=8, help="clients posting the largest reviews")
    args = parser.parse_args()
    print(
        f"# .venv/bin/python bench/large_reviews.py --rounds {args.rounds} --seconds {args.seconds:g} "
        f"--large {args.large}"
    )
    big = padded_to_the_limit(orjson.loads(EXAMPLE_REVIEW))
    print(f"# each large review: {len(big) / 2**20:.2f} MiB (limit {MAX_REVIEW_BYTES / 2**20:.2f} MiB)")
    server = GateServer(
        Path(tempfile.mkdtemp(prefix="large-reviews-")), "--gates-dir", str(ROOT / "examples" / "gates")
    )
    results: dict[str, list[list[float]]] = {"quiet": [], "large": []}
    try:
        server.wait_ready()
        workers = server.children()
        print(
            "| round | large clients | small reviews | p50 ms | p99 ms | max ms | large answered | large p50 s | peak worker RSS MB |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for round_ in range(1, args.rounds + 1):
            for phase in ("quiet", "large"):
                stop = threading.Event()
                large_took: list[float] = []
                peak = [0.0]

                def post_large(stop=stop, large_took=large_took):
                    conn = server.connection(timeout=120)
                    try:
                        while not stop.is_set():
                            large_took.append(timed_review(conn, big))
                    finally:
                        conn.close()

                def sample(stop=stop, peak=peak):
                    while not stop.wait(0.05):
                        peak[0] = max([peak[0]] + [rss_mb(pid) for pid in workers])

                senders = [
                    threading.Thread(target=post_large) for _ in range(args.large if phase == "large" else 0)
                ]
                sampler = threading.Thread(target=sample)
                for t in senders + [sampler]:
                    t.start()
                try:
                    took = keep_alive_reviews(server, args.seconds)
                finally:
                    stop.set()
                    for t in senders + [sampler]:
                        t.join()
                results[phase].append(took)
                large_p50 = f"{sorted(large_took)[len(large_took) // 2]:.2f}" if large_took else "-"
                print(
                    f"| {round_} | {len(senders)} | {len(took)} | {pct(took, 0.5):.2f} | {pct(took, 0.99):.2f} | "
                    f"{max(took) * 1000:.0f} | {len(large_took)} | {large_p50} | {peak[0]:.0f} |",
                    flush=True,
                )
        print()
        for phase, rounds in results.items():
            print(
                f"{phase}: median over rounds of small-review p50 {median_over_rounds_ms(rounds, 0.5):.2f} ms, "
                f"p99 {median_over_rounds_ms(rounds, 0.99):.2f} ms, worst {max(max(t) for t in rounds) * 1000:.0f} ms"
            )
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
