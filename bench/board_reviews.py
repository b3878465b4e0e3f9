"""Review latency while team screens watch `serve --board` on the same server.

`gate-admission serve --gates-dir --board` (2 workers x 4 threads) with bench/freeze_calendar.py's
gates. Rounds alternate: quiet (reviews only) and watching (S screens poll GET /board/fragment
every --pace seconds with the ETag they last got, as board.js does; with --vary each asks for
another view each time, the whole board under a new ``?v=``, as a hostile client would).
In both, 4 threads post the example review on kept-alive connections for --seconds.

    .venv/bin/python bench/board_reviews.py [--rounds 3] [--seconds 10] [--screens 4]
        [--gates 100] [--pace 1] [--vary]
        [--source DIR]   # run another checkout's admission package (e.g. one drawing without rest)
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


def watch_until(server: GateServer, stop: threading.Event, pace: float, vary: bool, answers: dict) -> None:
    conn, etag, n = server.connection(timeout=120), None, 0
    try:
        while not stop.wait(pace):
            n += 1
            path = f"/board/fragment?v={n}" if vary else "/board/fragment"  # v: ignored, a new view
            conn.request("GET", path, headers={"If-None-Match": etag} if etag and not vary else {})
            resp = conn.getresponse()
            resp.read()
            etag = resp.getheader("ETag") or etag
            answers[resp.status] = answers.get(resp.status, 0) + 1
    finally:
        conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    parser.add_argument("--screens", type=int, default=4)
    parser.add_argument("--gates", type=int, default=100)
    parser.add_argument("--pace", type=float, default=1.0, help="seconds between a screen's polls")
    parser.add_argument("--vary", action="store_true", help="a new view at each poll")
    parser.add_argument("--source", type=Path, help="a checkout whose admission package the server runs")
    args = parser.parse_args()
    print(
        f"# .venv/bin/python bench/board_reviews.py --rounds {args.rounds} --seconds {args.seconds:g} "
        f"--screens {args.screens} --gates {args.gates} --pace {args.pace:g}{' --vary' if args.vary else ''}"
        + (f" --source {args.source}" if args.source else "")
    )
    server = gates_dir_server("board-reviews-", args.gates, "--board", source=args.source)
    try:
        print("| round | screens | reviews | review p50 ms | review p99 ms | max ms | board answers |")
        print("|---|---|---|---|---|---|---|")
        reviews_beside(
            server,
            args.rounds,
            args.seconds,
            "watching",
            args.screens,
            lambda i, stop, answers: watch_until(server, stop, args.pace, args.vary, answers),
        )
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
