"""Review latency while N idle or slow TLS clients hold connections to the server.

`gate-admission serve --gates-dir examples/gates` (2 workers x 4 threads, the defaults) on a
free loopback port. Two parts (``--part idle|uploads|both``):

idle: for each N (rounds alternate: 0, 10, 100, 1000, 0, 10, ...), N connections are opened and
left in the states that used to hold a thread each: a quarter with no TLS handshake, a quarter
handshaken and silent, a quarter with headers cut short, a quarter with a body cut short. Then 4
client threads post reviews (the example review) on keep-alive connections and 1 thread on a
new connection per review (the path a stalled accept or handshake would block), and the
latencies of both are reported.

uploads: for each M (``--misbehaving``, rounds alternate: 0, 8, 100, 0, ...), a separate process
keeps M uploads going that announce a 1,000,000-byte review: half send nothing more (a stalled
one the server closes is replaced at once), half send one more byte every 0.5 s (trickling).
Meanwhile one client posts a 132 KB Kustomization status review of a gated object (1,200
inventory entries, tests.builders.kustomization_status_review) to /validate, back to back on a
kept-alive connection, for ``--seconds``: the time to judge it, and how many took longer than
the API server waits (3 s, timeoutSeconds of the status webhooks).

    .venv/bin/python bench/slow_clients.py [--part both] [--rounds 2] [--reviews 400] [--counts 0,10,100,1000]
                                           [--misbehaving 0,8,100] [--seconds 10]
"""

from __future__ import annotations

import argparse
import multiprocessing
import socket
import ssl
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.reviewclient import (
    EXAMPLE_REVIEW as BODY,
)  # noqa: E402
from bench.reviewclient import (
    median_over_rounds_ms,
    timed_review,
)
from bench.reviewclient import (
    percentile_ms as pct,
)
from tests.builders import kustomization_status_review  # noqa: E402
from tests.processes import GateServer  # noqa: E402

API_SERVER_WAITS = 3.0  # timeoutSeconds of the status webhooks (manifests/webhooks)
STALLED_UPLOAD = (
    b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: 1000000\r\n\r\n{"
)


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
            tls.sendall(
                b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY[:50]
            )
        held.append(tls)
    return held


def measure(server: GateServer, reviews: int) -> tuple[list[float], list[float]]:
    kept, fresh, errors = [], [], []

    def keep_alive():
        conn = server.connection(timeout=60)
        try:
            for _ in range(reviews // 4):
                kept.append(timed_review(conn))
        except Exception as err:  # noqa: BLE001 (reported, never hidden)
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
        except Exception as err:  # noqa: BLE001 (reported, never hidden)
            errors.append(err)

    threads = [threading.Thread(target=keep_alive) for _ in range(4)] + [
        threading.Thread(target=new_connections)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} failed: {errors[0]!r}")
    return kept, fresh


def _gone(sock: ssl.SSLSocket) -> bool:
    """Whether the server answered (408, 503) or closed the connection."""
    sock.setblocking(False)
    try:
        sock.recv(1)
        return True
    except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
        return False
    except OSError:
        return True


def misbehave(server: GateServer, count: int, stop) -> None:
    """Keep ``count`` uploads going until ``stop``: half stalled, half trickling (a child process)."""
    socks: list = [None] * count
    context = server.tls()
    while not stop.is_set():
        for i in range(count):
            try:
                if socks[i] is None or _gone(socks[i]):
                    if socks[i] is not None:
                        socks[i].close()
                    socks[i] = context.wrap_socket(
                        socket.create_connection(("127.0.0.1", server.port), timeout=30),
                        server_hostname="localhost",
                    )
                    socks[i].sendall(STALLED_UPLOAD)
                elif i % 2:
                    socks[i].setblocking(True)
                    socks[i].sendall(b" ")
            except OSError:
                socks[i] = None
        stop.wait(0.5)
    for sock in socks:
        if sock is not None:
            sock.close()


def status_reviews(server: GateServer, body: bytes, seconds: float) -> tuple[list[float], int]:
    """Seconds per 132 KB status review, posted back to back on a kept-alive connection (a new
    one after a failure), and how many failed (an error or no 200: the time until then counts)."""
    took: list[float] = []
    failed = 0
    deadline = time.monotonic() + seconds
    conn = server.connection(timeout=60)
    try:
        while time.monotonic() < deadline:
            started = time.perf_counter()
            try:
                timed_review(conn, body)
            except Exception:  # noqa: BLE001 (counted, never hidden)
                failed += 1
                conn.close()
                conn = server.connection(timeout=60)
            took.append(time.perf_counter() - started)
    finally:
        conn.close()
    return took, failed


def uploads_part(server: GateServer, args) -> None:
    counts = [int(c) for c in args.misbehaving.split(",")]
    body = kustomization_status_review()
    print(
        f"# {len(body):,}-byte status review; uploads announcing 1,000,000 bytes: half stalled, half trickling"
    )
    print(
        f"| round | misbehaving uploads | status reviews | p50 ms | p99 ms | max ms | over {API_SERVER_WAITS:g} s | failed |"
    )
    print("|---|---|---|---|---|---|---|---|")
    results: dict[int, list] = {n: [] for n in counts}
    for round_ in range(1, args.rounds + 1):
        for n in counts:
            stop = multiprocessing.Event()
            child = multiprocessing.Process(target=misbehave, args=(server, n, stop))
            child.start()
            try:
                if n:
                    time.sleep(1.0)  # the uploads open first
                took, failed = status_reviews(server, body, args.seconds)
            finally:
                stop.set()
                child.join()
            results[n].append(took)
            late = sum(t > API_SERVER_WAITS for t in took)
            print(
                f"| {round_} | {n} | {len(took)} | {pct(took, 0.5):.1f} | {pct(took, 0.99):.1f} | "
                f"{max(took) * 1000:.0f} | {late} | {failed} |",
                flush=True,
            )
    print()
    for n in counts:
        rounds = results[n]
        print(
            f"M={n}: median over rounds of p50 {median_over_rounds_ms(rounds, 0.5):.1f} ms, "
            f"p99 {median_over_rounds_ms(rounds, 0.99):.1f} ms, slowest {max(max(t) for t in rounds) * 1000:.0f} ms, "
            f"{sum(sum(t > API_SERVER_WAITS for t in took) for took in rounds)} over {API_SERVER_WAITS:g} s "
            f"of {sum(len(t) for t in rounds)}"
        )


def idle_part(server: GateServer, args) -> None:
    counts = [int(c) for c in args.counts.split(",")]
    results: dict[int, list] = {n: [] for n in counts}
    print(
        "| round | idle/slow clients | keep-alive p50 ms | keep-alive p99 ms | new connection p50 ms | new connection p99 ms | max ms |"
    )
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
            print(
                f"| {round_} | {n} | {pct(kept, 0.5):.1f} | {pct(kept, 0.99):.1f} | {pct(fresh, 0.5):.1f} | "
                f"{pct(fresh, 0.99):.1f} | {max(kept + fresh) * 1000:.0f} |",
                flush=True,
            )
    print()
    base = median_over_rounds_ms([k for k, _ in results[counts[0]]], 0.99)
    for n in counts:
        p99 = median_over_rounds_ms([k for k, _ in results[n]], 0.99)
        p99_new = median_over_rounds_ms([f for _, f in results[n]], 0.99)
        print(
            f"N={n}: median over rounds of keep-alive p99 {p99:.1f} ms ({p99 / base:.2f}x N={counts[0]}), "
            f"new-connection p99 {p99_new:.1f} ms"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("idle", "uploads", "both"), default="both")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--reviews", type=int, default=400)
    parser.add_argument("--counts", default="0,10,100,1000")
    parser.add_argument("--misbehaving", default="0,8,100")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    print(
        f"# .venv/bin/python bench/slow_clients.py --part {args.part} --rounds {args.rounds} --reviews {args.reviews} "
        f"--counts {args.counts} --misbehaving {args.misbehaving} --seconds {args.seconds:g}"
    )
    tmp = Path(tempfile.mkdtemp(prefix="slow-clients-"))
    server = GateServer(tmp, "--gates-dir", str(ROOT / "examples" / "gates"))
    try:
        server.wait_ready()
        if args.part in ("idle", "both"):
            idle_part(server, args)
        if args.part in ("uploads", "both"):
            uploads_part(server, args)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
