"""Review latency while calendar clients fetch GET /calendar.ics from the same server.

`gate-admission serve --gates-dir` (2 workers x 4 threads) with bench/freeze_calendar.py's 100
gates. Rounds alternate: quiet (reviews only) and fetching (F client threads request the feed
ten times a second each, with a different ?days= each time, so that every request asks for a
new build: what a careless script or a hostile client does). In both, 4 threads post the
example review on kept-alive connections for --seconds and the latencies are reported.

    .venv/bin/python bench/calendar_reviews.py [--rounds 3] [--seconds 10] [--fetchers 4]
        [--source DIR]   # run another checkout's admission package (e.g. a worktree of main~1)
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.reviewclient import gates_dir_server, reviews_beside  # noqa: E402
from tests.processes import GateServer  # noqa: E402

PACE = 0.1  # seconds between a fetcher's requests


def fetch_until(server: GateServer, stop: threading.Event, first_days: int, answers: dict) -> None:
    """Ask for a new feed every PACE seconds on one kept-alive connection (the TLS handshakes of
    a client that reconnects would cost the same on any endpoint: this measures the builds)."""
    days, conn = first_days, server.connection(timeout=120)
    try:
        while not stop.wait(PACE):
            conn.request("GET", f"/calendar.ics?days={days}")
            resp = conn.getresponse()
            resp.read()
            answers[resp.status] = answers.get(resp.status, 0) + 1
            days = days % 366 + 1
    finally:
        conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    parser.add_argument("--fetchers", type=int, default=4)
    parser.add_argument("--source", type=Path, help="a checkout whose admission package the server runs")
    args = parser.parse_args()
    source = f" --source {args.source}" if args.source else ""
    print(
        f"# .venv/bin/python bench/calendar_reviews.py --rounds {args.rounds} --seconds {args.seconds:g} "
        f"--fetchers {args.fetchers}{source}"
    )
    server = gates_dir_server("calendar-reviews-", 100, source=args.source)
    try:
        print(
            "| round | calendar fetchers | reviews | review p50 ms | review p99 ms | max ms | calendar answers |"
        )
        print("|---|---|---|---|---|---|---|")
        reviews_beside(
            server,
            args.rounds,
            args.seconds,
            "fetching",
            args.fetchers,
            lambda i, stop, answers: fetch_until(server, stop, 1 + 7 * i, answers),
        )
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
