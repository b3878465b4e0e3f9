"""Review latency while N idle or slow TLS clients hold connections to the server.

`gate-admission serve --gates-dir examples/gates` (2 workers x 4 threads, the defaults) on a
free loopback port. For each N (rounds alternate: 0, 10, 100, 1000, 0, 10, ...), N connections
are opened and left in the states that used to hold a thread each: a quarter with no TLS
handshake, a quarter handshaken and silent, a quarter with headers cut short, a quarter with a
body cut short. Then 4 client threads post reviews (the example review) on keep-alive
connections and 1 thread on a new connection per review (the path a stalled accept or handshake
would block), and the latencies of both are reported.

    .venv/bin/python bench/slow_clients.py [--rounds 2] [--reviews 400] [--counts 0,10,100,1000]
"""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.reviewclient import EXAMPLE_REVIEW as BODY, median_over_rounds_ms, percentile_ms as pct, timed_review  # noqa: E402
from tests.processes import GateServer  # noqa: E402



def hold(server: GateServer, n: int) -> list:
    held = []
    for i in range(n):
        raw = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        if i % 4 == 0:
            held.append(raw)
            continue
        tls = server.tls().wrap_socket(raw, server_hostname="localhost")
        if i % 4 == 2:
            tls.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Le")
        elif i % 4 == 3:
            tls.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY[:50])
        held.append(tls)
    return held


def measure(server: GateServer, reviews: int) -> tuple[list[float], list[float]]:
    kept, fresh, errors = [], [], []

    def keep_alive():
        conn = server.connection(timeout=60)
        try:
            for _ in range(reviews // 4):
                kept.append(timed_review(conn))
        except Exception as err:  # reported, never hidden
            errors.append(err)
        finally:
            conn.close()

    def new_connections():
        try:
            for _ in range(reviews // 8):
                conn = server.connection(timeout=60)
                started = time.perf_counter()
                timed_review(conn)
                fresh.append(time.perf_counter() - started)
                conn.close()
        except Exception as err:
            errors.append(err)

    threads = [threading.Thread(target=keep_alive) for _ in range(4)] + [threading.Thread(target=new_connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} failed: {errors[0]!r}")
    return kept, fresh


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--reviews", type=int, default=400)
    parser.add_argument("--counts", default="0,10,100,1000")
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    print(f"# .venv/bin/python bench/slow_clients.py --rounds {args.rounds} --reviews {args.reviews} --counts {args.counts}")
    tmp = Path(tempfile.mkdtemp(prefix="slow-clients-"))
    server = GateServer(tmp, "--gates-dir", str(ROOT / "examples" / "gates"))
    results: dict[int, list] = {n: [] for n in counts}
    try:
        server.wait_ready()
        print("| round | idle/slow clients | keep-alive p50 ms | keep-alive p99 ms | new connection p50 ms | new connection p99 ms | max ms |")
        print("|---|---|---|---|---|---|---|")
        for round_ in range(1, args.rounds + 1):
            for n in counts:
                held = hold(server, n)
                try:
                    kept, fresh = measure(server, args.reviews)
                finally:
                    for sock in held:
                        sock.close()
                results[n].append((kept, fresh))
                print(f"| {round_} | {n} | {pct(kept, .5):.1f} | {pct(kept, .99):.1f} | {pct(fresh, .5):.1f} | "
                      f"{pct(fresh, .99):.1f} | {max(kept + fresh) * 1000:.0f} |", flush=True)
        print()
        base = median_over_rounds_ms([k for k, _ in results[counts[0]]], .99)
        for n in counts:
            p99 = median_over_rounds_ms([k for k, _ in results[n]], .99)
            p99_new = median_over_rounds_ms([f for _, f in results[n]], .99)
            print(f"N={n}: median over rounds of keep-alive p99 {p99:.1f} ms ({p99 / base:.2f}x N={counts[0]}), "
                  f"new-connection p99 {p99_new:.1f} ms")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
