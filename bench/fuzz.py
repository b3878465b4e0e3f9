"""Fuzz /validate and /mutate with 100,000+ generated cases, in process or over TLS.

Usage: python bench/fuzz.py [--cases 100000] [--seed 0] [--server [--workers 2 --threads 4]]

The cases and the properties are those of tests/app/test_fuzz.py (imported, so both stay in
step): malformed bytes, arbitrary JSON, wrong and missing fields, wrong kinds and apiVersions,
surrogates and odd escapes, deep nesting, 1 MiB strings, and well-formed reviews of every gated
Flux kind with random contents. Every case is posted to both /validate and /mutate.

Generation: hypothesis itself, generate phase only, in chunks of ``--chunk`` examples, each a
fresh run seeded from ``--seed`` (``@seed``), so runs repeat and memory stays flat.
The test function records failures instead of raising, so all cases run; hypothesis does not
shrink them. The first ``--show`` distinct failures are then minimised by a greedy shrinker in
this file (drop keys and items, empty containers, halve strings, cut bytes) that keeps the
failure's reason, and printed.

Without ``--server`` the cases go through the Flask test client (create_app over a FileStore
of the test gates, fixed clock; enforce or audit mode per case). With ``--server`` they go
instead to a real ``gate-admission serve`` over TLS (tests/processes.py GateServer, the same
gates, ``--mode``), round-robin over keep-alive connections; at the end the gunicorn master and
worker pids are read from /proc again and must be the ones seen at the start (no crashed worker).
"""

from __future__ import annotations

import argparse
import collections
import copy
import http.client
import json
import logging
import os
import platform
import re
import shlex
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import orjson
from hypothesis import HealthCheck, Phase, given, seed, settings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from admission.webhook.app import MAX_BODY  # noqa: E402
from tests.app.test_fuzz import (  # noqa: E402
    GATES,
    MODES,
    PATHS,
    Case,
    FuzzFailure,
    _expect_for,
    check,
    make_clients,
    post,
    requests,
)
from tests.conftest import write_gates  # noqa: E402
from tests.procfs import children  # noqa: E402

Target = Callable[[Case, str, str], tuple[int, bytes]]  # (case, path, mode) -> (status, body)
# What the server log shows when a worker boots (once each at the start), dies or a handler raises.
LOG_SIGNS = (
    "Booting worker",
    "Worker exiting",
    "WORKER TIMEOUT",
    "was sent SIG",
    "handler failed",
    "unexpected error",
)


# --- targets --------------------------------------------------------------------------------


class LogCounter(logging.Handler):
    """Counts the app's log records by message, instead of printing every traceback."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter = collections.Counter()

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[record.getMessage()] += 1


APP_LOG = LogCounter()


def in_process(directory: Path) -> Target:
    """Post through the Flask test client of the app in the case's mode."""
    logger = logging.getLogger("admission")
    logger.addHandler(APP_LOG)
    logger.propagate = False
    clients = make_clients(directory)
    return lambda case, path, mode: post(clients[mode], case, path)


class ConnectionFailed(Exception):
    """The server closed, reset or garbled a connection instead of answering."""


class OverTLS:
    """Post to a real server over a few keep-alive TLS connections, in turn."""

    def __init__(self, server, connections: int):
        self.server = server
        self.conns = [server.connection(timeout=60) for _ in range(connections)]
        self.turn = 0

    def __call__(self, case: Case, path: str, mode: str) -> tuple[int, bytes]:
        self.turn = (self.turn + 1) % len(self.conns)
        conn = self.conns[self.turn]
        oversized = len(case.body) > MAX_BODY
        try:
            conn.putrequest("POST", path)
            if case.content_type:
                conn.putheader("Content-Type", case.content_type)
            conn.putheader("Content-Length", str(len(case.body)))
            # Over the limit, the answer comes from Content-Length before the body is read, and the
            # server then closes: send a little, as the API server never sends more than 3 MiB.
            conn.endheaders(case.body[:65536] if oversized else case.body)
            resp = conn.getresponse()
            answer = resp.status, resp.read()
        except (OSError, http.client.HTTPException) as err:
            self._reconnect()  # start afresh for the next case; this one is a failure
            raise ConnectionFailed(f"{type(err).__name__} {err}") from None
        if oversized:
            self._reconnect()
        return answer

    def _reconnect(self) -> None:
        self.conns[self.turn].close()
        self.conns[self.turn] = self.server.connection(timeout=60)

    def close(self) -> None:
        for conn in self.conns:
            conn.close()


def gunicorn_pids(master: int) -> tuple[int, tuple[int, ...]]:
    """The master pid and its children's pids, read from /proc."""
    return master, tuple(children(master))


def all_workers(master: int, workers: int) -> tuple[int, tuple[int, ...]] | None:
    """The pids once every worker has been forked, else None."""
    pids = gunicorn_pids(master)
    return pids if len(pids[1]) == workers else None


# --- running ----------------------------------------------------------------------------------


class Tally:
    """Counts and the first failure of each distinct reason."""

    def __init__(self) -> None:
        self.cases = 0
        self.requests = 0
        self.statuses: collections.Counter = collections.Counter()
        self.families: collections.Counter = collections.Counter()
        self.failures: collections.Counter = collections.Counter()
        self.first: dict[str, tuple[Case, str, str, str]] = {}


def signature(message: str) -> str:
    """A failure's stable reason: its first clause, plus the error a handler raised."""
    if message.startswith(("exception escaped", "checker error", "connection error")):
        return ":".join(message.split(":", 2)[:2])  # with the exception's type
    head = message.split(":", 1)[0]
    raised = re.search(r"could not evaluate this request: ([^\"}]*)", message)
    if not raised:
        return head
    # The error without the value it names: "File name too long: '/...aaa'" is one reason.
    error = re.split(r": '| \(", raised.group(1))[0][:60].strip(" ']")
    return f"{head}: {error}"


def attempt(target: Target, case: Case, path: str, mode: str) -> tuple[int | None, str | None]:
    """Run one request; return its status and the failure message, if any."""
    try:
        status, payload = target(case, path, mode)
    except ConnectionFailed as err:
        return None, f"connection error: {err}"
    except Exception as err:  # noqa: BLE001 (an exception that escaped the app: exactly what we look for)
        return None, f"exception escaped: {type(err).__name__}: {err}"
    try:
        check(case, path, mode, status, payload)
    except FuzzFailure as err:
        return status, str(err)
    except Exception as err:  # noqa: BLE001 (a bug in the checker: report it rather than stop the run)
        return status, f"checker error: {type(err).__name__}: {err}"
    return status, None


def run_chunk(target: Target, tally: Tally, size: int, chunk_seed: int, server_mode: str | None) -> None:
    """Let hypothesis generate ``size`` requests and run each; failures are recorded, not raised."""

    @seed(chunk_seed)
    @settings(
        max_examples=size,
        phases=[Phase.generate],
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(requests)
    def one(request):
        case, mode, content_type = request
        case = Case(case.family, case.body, case.expect, content_type)
        mode = server_mode or mode
        tally.cases += 1
        tally.families[case.family] += 1
        for path in PATHS:
            status, failure = attempt(target, case, path, mode)
            tally.requests += 1
            tally.statuses[status] += 1
            if failure:
                reason = signature(failure)
                tally.failures[reason] += 1
                tally.first.setdefault(reason, (case, path, mode, failure))

    one()


# --- minimising a failure ---------------------------------------------------------------------


def _node_paths(doc: object) -> list[tuple]:
    """Every node's path, shallow first (iteratively: documents may be deep)."""
    paths, queue = [], collections.deque([((), doc)])
    while queue:
        path, node = queue.popleft()
        paths.append(path)
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        queue.extend((path + (key,), child) for key, child in items)
    return paths


def _get(doc: object, path: tuple) -> object:
    for key in path:
        doc = doc[key]
    return doc


def _edits(doc: object) -> list[tuple[tuple, str]]:
    """Simplifications to try, coarse ones first."""
    edits = []
    for path in _node_paths(doc):
        node = _get(doc, path)
        if path:
            edits.append((path, "delete"))
        if isinstance(node, (dict, list)) and node:
            edits.append((path, "empty"))
        if isinstance(node, str) and node:
            edits += [(path, "halve")] if len(node) > 1 else [(path, "empty")]
    return edits


def _edited(doc: object, path: tuple, how: str) -> object:
    doc = copy.deepcopy(doc)
    if not path:
        return type(doc)()
    parent, key = _get(doc, path[:-1]), path[-1]
    if how == "delete":
        del parent[key]
    elif how == "empty":
        parent[key] = type(parent[key])()
    else:
        parent[key] = parent[key][: len(parent[key]) // 2]
    return doc


def _written(doc: object) -> bytes:
    # orjson writes at most 255 levels; the standard library writes any, given the stack.
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()


def minimise(target: Target, case: Case, path: str, mode: str, reason: str, budget: int = 3000) -> Case:
    """A smaller case that fails for the same reason (greedy; ``budget`` requests at most)."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20_000))  # copying and writing 1024 levels; post() lowers it again
    try:
        return _minimise(target, case, path, mode, reason, budget)
    finally:
        sys.setrecursionlimit(limit)


def _minimise(target: Target, case: Case, path: str, mode: str, reason: str, budget: int) -> Case:
    def same(candidate: Case) -> bool:
        nonlocal budget
        budget -= 1
        _, failure = attempt(target, candidate, path, mode)
        return failure is not None and signature(failure) == reason

    try:
        doc = orjson.loads(case.body)
    except orjson.JSONDecodeError:
        doc = None
    if doc is not None:
        improved = True
        while improved and budget > 0:  # passes until one changes nothing
            improved, index = False, 0
            while budget > 0:
                edits = _edits(doc)
                if index >= len(edits):
                    break
                candidate_doc = _edited(doc, *edits[index])
                body = _written(candidate_doc)
                candidate = Case(
                    case.family,
                    body,
                    None if case.expect is None else _expect_for(candidate_doc, body),
                    case.content_type,
                )
                if same(candidate):
                    doc, case, improved = candidate_doc, candidate, True  # the next edit is now at ``index``
                else:
                    index += 1
        return case
    body, cut = case.body, max(1, len(case.body) // 2)
    while cut >= 1 and budget > 0:
        start, shrunk = 0, False
        while start < len(body) and budget > 0:
            candidate = Case(case.family, body[:start] + body[start + cut :], case.expect, case.content_type)
            if same(candidate):
                body, shrunk = candidate.body, True
            else:
                start += cut
        cut = cut if shrunk and cut > 1 else cut // 2
    return Case(case.family, body, case.expect, case.content_type)


def shown(body: bytes, limit: int = 1500) -> str:
    """A body for a person: long runs written as ``<'x' * n>``."""
    text = body.decode("utf-8", "backslashreplace")
    text = re.sub(r"[\x00-\x1f\x7f]", lambda m: f"\\x{ord(m.group(0)):02x}", text)  # control bytes, visibly
    text = re.sub(
        r"(.{1,16}?)\1{7,}",
        lambda m: f"<{m.group(1)!r} * {len(m.group(0)) // len(m.group(1))}>",
        text,
        flags=re.S,
    )
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


# --- main -------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chunk", type=int, default=2000, help="examples per hypothesis run")
    parser.add_argument("--show", type=int, default=5, help="distinct failures to minimise and print")
    parser.add_argument("--server", action="store_true", help="post to a real gate-admission serve over TLS")
    parser.add_argument(
        "--mode", choices=MODES, default="enforce", help="the server's --mode (with --server)"
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--connections", type=int, default=4, help="keep-alive connections (with --server)")
    return parser.parse_args(argv)


def fuzz(args: argparse.Namespace, target: Target, tally: Tally) -> float:
    started = time.monotonic()
    next_report, chunk_seed = 10_000, args.seed * 1_000_003
    while tally.cases < args.cases:
        run_chunk(
            target,
            tally,
            min(args.chunk, args.cases - tally.cases),
            chunk_seed,
            args.mode if args.server else None,
        )
        chunk_seed += 1
        if tally.cases >= next_report:
            print(
                f"  {tally.cases} cases, {sum(tally.failures.values())} failures, "
                f"{time.monotonic() - started:.0f}s",
                file=sys.stderr,
                flush=True,
            )
            next_report += 10_000
    return time.monotonic() - started


def report(args: argparse.Namespace, tally: Tally, seconds: float, target: Target) -> None:
    failures = sum(tally.failures.values())
    ok = tally.statuses.get(200, 0)
    client_errors = {
        s: n for s, n in sorted(tally.statuses.items(), key=lambda i: str(i[0])) if s and 400 <= s < 500
    }
    print(f"command: {shlex.join([sys.executable, *sys.argv])}")
    print(f"machine: {os.cpu_count()} cores {platform.machine()}, CPython {platform.python_version()}")
    print(f"target: {'gate-admission serve over TLS' if args.server else 'Flask app in process'}")
    print(f"cases run: {tally.cases} ({tally.requests} requests: each case to /validate and /mutate)")
    print(f"families: {', '.join(f'{k} {v}' for k, v in tally.families.most_common())}")
    print(
        f"responses: 200 {ok}, 4xx {sum(client_errors.values())} "
        f"({', '.join(f'{s}: {n}' for s, n in client_errors.items())}), other {tally.requests - ok - sum(client_errors.values())}"
    )
    print(f"failures seen: {failures} ({len(tally.failures)} distinct)")
    for reason, count in tally.failures.most_common():
        print(f"  {count:>7}  {reason}")
    print(f"duration: {seconds:.1f}s ({tally.cases / seconds:.0f} cases/s)")
    for reason, (case, path, mode, failure) in list(tally.first.items())[: args.show]:
        small = minimise(target, case, path, mode, reason)
        print(
            f"\nreproducer for '{reason}': POST {path} (mode {mode}, {case.family}, "
            f"{len(small.body)} bytes, minimised from {len(case.body)}):\n  {shown(small.body)}\n  -> {failure[:400]}"
        )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        tmp_path = Path(tmp)
        gates = tmp_path / "gates"
        gates.mkdir()
        if not args.server:
            target = in_process(gates)
            seconds = fuzz(args, target, tally)
            report(args, tally, seconds, target)
            print("app log: " + ", ".join(f"'{what}' x{APP_LOG.counts[what]}" for what in LOG_SIGNS[-2:]))
            return 1 if tally.failures else 0

        from tests.polling import wait_for
        from tests.processes import GateServer

        write_gates(gates, GATES)
        server = GateServer(
            tmp_path,
            "--gates-dir",
            str(gates),
            "--mode",
            args.mode,
            "--workers",
            str(args.workers),
            "--threads",
            str(args.threads),
        )
        try:
            server.wait_ready()
            # Ready is one worker answering; the others may still be booting.
            before = wait_for(
                lambda: all_workers(server.pid, args.workers), 30, f"{args.workers} gunicorn workers"
            )
            target = OverTLS(server, args.connections)
            seconds = fuzz(args, target, tally)
            report(args, tally, seconds, target)
            target.close()
            after = gunicorn_pids(server.pid)
            alive = server.alive()
            log_text = server.log()  # before stopping: shutting down logs every worker exiting
        finally:
            server.stop()
        crashed = len(set(before[1]) - set(after[1]))
        print(
            f"\ngunicorn master {before[0]} workers {list(before[1])} at the start; "
            f"master {'alive' if alive else 'GONE'} workers {list(after[1])} at the end: {crashed} crashed workers"
        )
        counts = {what: log_text.count(what) for what in LOG_SIGNS}
        print("server log: " + ", ".join(f"'{what}' x{n}" for what, n in counts.items()))
        return 1 if tally.failures or crashed or not alive or before != after else 0


if __name__ == "__main__":
    sys.exit(main())
