"""Load through HTTPS: our server against a naive allow-all Flask floor, side by side.

Usage (from the repository root, after `apt-get install -y wrk`):

    .venv/bin/python bench/load/run.py [--rounds 2] [--duration 10] [--connections 16]
                                       [--variants ours,floor,ours-10k] [--ours-args "--threads 16"]

Variants, each a gunicorn master with its workers on a free loopback port, over TLS with a
certificate made by `gate-admission certs`:

  ours      `gate-admission serve --gates-dir examples/gates` with its default settings
            (2 workers x 8 threads) plus --ours-args; the reviews reference the example gates,
            so the full decision path runs, denials included.
  floor     bench/load/naive_app.py (allow-all: get_json + jsonify) under
            `gunicorn --worker-class gthread --workers 2 --threads 8 --certfile --keyfile`,
            every other gunicorn setting at its default.
  ours-10k  like ours, with a generated --gates-dir of 10,000 Gates and 10,000 GateKeepers;
            the reviews are rewritten to reference generated gates.

The request bodies are the captured AdmissionReviews in
../shared/fixtures/admission-reviews-k8s-1.20/*validate*.json (else examples/reviews/*.json),
re-encoded compactly as the API server sends them, and rotated by bench/load/reviews.lua
(POST /validate, keep-alive, N connections). Before measuring, every body is posted once to
every variant and the verdicts are checked against the same app in process.

Each round runs wrk for --warmup seconds (not recorded), then --duration seconds, while the
server's CPU (utime+stime of the master and its workers, from /proc/<pid>/stat), RSS (VmRSS of
each) and the number of wrk's connections each worker holds are sampled. Rounds alternate the
variants: A/B/C/A/B/C. The machine is shared by the load generator and, possibly, other work:
a round waits for the machine to be quiet first, the CPU used by anything else during it is
reported, and a disturbed round is measured again (--redo). Nothing here asserts a figure; the
targets are printed next to the measured ratios, and the exit status is 1 only when a round
saw non-2xx answers, socket errors or a replaced worker.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import re
import resource
import shlex
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # admission/, for certificates, the gate parser and the in-process check
from tests.processes import Process, free_port  # noqa: E402 - processes in their own session, stopped by pid
from tests.procfs import children, rss_mb, socket_inodes  # noqa: E402

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
LUA = HERE / "reviews.lua"
FIXTURES = ROOT.parent / "shared" / "fixtures" / "admission-reviews-k8s-1.20"
EXAMPLE_REVIEWS = ROOT / "examples" / "reviews"
EXAMPLE_GATES = ROOT / "examples" / "gates"
CLK_TCK = os.sysconf("SC_CLK_TCK")
GATING_API = "gating.toolkit.fluxcd.io/v1alpha1"
NS = "flux-system"
VARIANTS = ("ours", "floor", "ours-10k")

# Targets, as ratios measured in the same run.
TARGET_OURS_THROUGHPUT = 1.0  # x floor
TARGET_OURS_P99 = 1.0  # x floor, at most
TARGET_10K_THROUGHPUT = 0.9  # x floor (0.9 of ours' 1.0x target)
TARGET_10K_RSS_MB = 150.0  # per worker


# ---------------------------------------------------------------------------- /proc


def _stat_fields(pid: int) -> list[str]:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2 :].split()  # fields from 3 (state) on


def cpu_ticks(pid: int) -> int:
    fields = _stat_fields(pid)
    return int(fields[11]) + int(fields[12])  # utime (14) + stime (15)


def machine_busy_ticks() -> int:
    """Busy ticks of all CPUs together, from the first line of /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return user + nice + system + irq + softirq + steal


def machine_busy_percent(seconds: float) -> float:
    """CPU used by everything on the machine over ``seconds``, in % of one core."""
    before, started = machine_busy_ticks(), time.monotonic()
    time.sleep(seconds)
    return 100.0 * (machine_busy_ticks() - before) / CLK_TCK / (time.monotonic() - started)


def established(port: int) -> set[int]:
    """Socket inodes of established TCP connections to local ``port`` (IPv4 loopback)."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "01" and int(fields[1].rsplit(":", 1)[1], 16) == port:
            inodes.add(int(fields[9]))
    return inodes


class Sampler:
    """CPU of a process tree over an interval; peak RSS of each of its processes; how many of
    the load generator's connections each process holds."""

    def __init__(self, master: int, port: int, interval: float = 0.25):
        self.master, self.port, self.interval = master, port, interval
        self.peak: dict[int, float] = {}
        self.connections: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _tree(self) -> list[int]:
        return [self.master, *children(self.master)]

    def _ticks(self) -> dict[int, int]:
        out = {}
        for pid in self._tree():
            try:
                out[pid] = cpu_ticks(pid)
            except OSError:
                pass
        return out

    def _sample_rss(self) -> None:
        for pid in self._tree():
            try:
                self.peak[pid] = max(self.peak.get(pid, 0.0), rss_mb(pid))
            except OSError:
                pass

    def _sample_connections(self) -> None:
        try:
            conns = established(self.port)
        except OSError:
            return
        for pid in self._tree():
            try:
                held = len(conns & socket_inodes(pid))
            except OSError:
                continue
            self.connections[pid] = max(self.connections.get(pid, 0), held)

    def _run(self) -> None:
        ticks = 0
        while not self._stop.wait(self.interval):
            self._sample_rss()
            ticks += 1
            if ticks % 4 == 2:  # about once a second: connections stay where they were accepted
                self._sample_connections()

    def start(self) -> None:
        self.start_machine = machine_busy_ticks()
        self.start_ticks, self.start_time = self._ticks(), time.monotonic()
        self._sample_rss()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sample_rss()
        end_ticks, wall = self._ticks(), time.monotonic() - self.start_time
        self.machine_percent = 100.0 * (machine_busy_ticks() - self.start_machine) / CLK_TCK / wall
        common = set(self.start_ticks) & set(end_ticks)
        self.restarted = sorted(set(self.start_ticks) ^ set(end_ticks))  # a worker died or was replaced
        per_pid = {p: 100.0 * (end_ticks[p] - self.start_ticks[p]) / CLK_TCK / wall for p in common}
        self.cpu_percent = sum(per_pid.values())
        workers = sorted(p for p in set(self.peak) | common if p != self.master)
        self.worker_cpu = [per_pid.get(p, 0.0) for p in workers]
        self.worker_connections = [self.connections.get(p, 0) for p in workers]
        self.master_rss = self.peak.get(self.master, 0.0)
        self.worker_rss = [self.peak.get(p, 0.0) for p in workers]


# ---------------------------------------------------------------------------- request bodies


def compact(doc: dict) -> bytes:
    """JSON as the API server sends it: no indentation, no spaces."""
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def review_files(reviews: Path | None) -> list[Path]:
    if reviews is not None:
        files = sorted(reviews.glob("*validate*.json")) or sorted(reviews.glob("*.json"))
    elif FIXTURES.is_dir():
        files = sorted(FIXTURES.glob("*validate*.json"))
    else:
        files = sorted(EXAMPLE_REVIEWS.glob("*.json"))
    if not files:
        sys.exit(f"run.py: no review bodies found ({reviews or FIXTURES} or {EXAMPLE_REVIEWS})")
    return files


def referenced_gates(doc: dict) -> set[tuple[str, str]]:
    """The gates a review's objects reference, read with our own parser."""
    from admission.core.gates.references import policy_of

    req = doc["request"]
    return {
        (r.namespace, r.name) for o in (req.get("object"), req.get("oldObject")) for r in policy_of(o).refs
    }


# Generated gates, by i % 4: 0 opened (closed at Christmas), 1 and 3 closed by default,
# 2 opened but closed Friday 18:00 to Monday 08:00 and at Christmas (Europe/Berlin).
CHRISTMAS = "* * 24-26 12 *"
WEEKEND = {"cron": "0 18 * * 5", "duration": "62h"}


def generated_gate(i: int) -> tuple[dict, dict]:
    gate = {
        "apiVersion": GATING_API,
        "kind": "Gate",
        "metadata": {
            "name": f"g{i:05d}",
            "namespace": NS,
            "annotations": {"gating.toolkit.fluxcd.io/message": "bench"},
        },
        "spec": {"default": "closed" if i % 2 else "opened", "window": "1h", "interval": "1m"},
    }
    closed = [CHRISTMAS] if i % 4 == 0 else [CHRISTMAS, WEEKEND]
    keeper = {
        "apiVersion": GATING_API,
        "kind": "GateKeeper",
        "metadata": {"name": f"k{i:05d}", "namespace": NS},
        "spec": {
            "gate": f"g{i:05d}",
            "type": "cronexpression",
            "timeZone": "Europe/Berlin",
            "cronjob": {"closed": closed},
        },
    }
    return gate, keeper


def write_gates(directory: Path, count: int, per_file: int = 1000) -> None:
    import yaml

    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    directory.mkdir(parents=True)
    for start in range(0, count, per_file):
        docs = [d for i in range(start, min(count, start + per_file)) for d in generated_gate(i)]
        (directory / f"gates-{start // per_file:03d}.yaml").write_text(
            yaml.dump_all(docs, Dumper=dumper, sort_keys=False)
        )


# What the example gates are, so a rewritten review keeps roughly the same verdicts:
# the offset (i % 4) of the generated gate that stands in for each.
STAND_IN = {"sre-approval": 1, "bypass-signoff": 3, "qa-approval": 0, "change-freeze": 2, "maintenance": 0}


def rewrite_for(count: int, copies: int, originals: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """``copies`` of every review, each copy referencing different generated gates."""
    names = sorted({name for _, body in originals for _, name in referenced_gates(json.loads(body))})
    slots = count // 4
    out = []
    for copy in range(copies):
        mapping = {}
        for k, name in enumerate(names):
            j = (copy * 617 + k * 1259 + 11) % slots  # 617 and 1259 spread copies over the set
            mapping[name] = f"g{4 * j + STAND_IN.get(name, k % 4):05d}"
        pattern = re.compile(r"(?<![A-Za-z0-9-])(" + "|".join(map(re.escape, names)) + r")(?![A-Za-z0-9-])")
        for label, body in originals:
            text = (
                pattern.sub(lambda m, mapping=mapping: mapping[m.group(1)], body.decode())
                if names
                else body.decode()
            )
            doc = json.loads(text)
            missing = {
                f"{ns}/{n}"
                for ns, n in referenced_gates(doc)
                if ns != NS or not re.fullmatch(r"g\d{5}", n) or int(n[1:]) >= count
            }
            if missing:
                sys.exit(
                    f"run.py: rewritten {label} references gates not in the generated set: {sorted(missing)}"
                )
            out.append((f"{label}#{copy}", compact(doc)))
    return out


# ---------------------------------------------------------------------------- servers


@dataclass
class Variant:
    name: str
    bodies: list[tuple[str, bytes]]
    body_list: Path = Path()
    process: Process | None = None
    port: int = 0
    gates_dir: Path | None = None
    expected_deny_share: float = 0.0


def start_ours(work: Path, variant: Variant, cert_dir: Path, gates_dir: Path, extra: list[str]) -> None:
    variant.port = free_port()
    args = [
        str(BIN / "gate-admission"),
        "serve",
        "--gates-dir",
        str(gates_dir),
        "--cert-dir",
        str(cert_dir),
        "--address",
        "127.0.0.1",
        "--port",
        str(variant.port),
        *extra,
    ]
    variant.gates_dir = gates_dir
    variant.process = Process(args, work / f"{variant.name}.log")


def start_floor(work: Path, variant: Variant, cert_dir: Path, extra: list[str]) -> None:
    variant.port = free_port()
    args = [
        str(BIN / "gunicorn"),
        "--worker-class",
        "gthread",
        "--workers",
        "2",
        "--threads",
        "8",
        "--certfile",
        str(cert_dir / "tls.crt"),
        "--keyfile",
        str(cert_dir / "tls.key"),
        "--bind",
        f"127.0.0.1:{variant.port}",
        "--chdir",
        str(HERE),
        *extra,
        "naive_app:app",
    ]
    variant.process = Process(args, work / f"{variant.name}.log")


def tls_context(cert_dir: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))


def post(
    port: int, context: ssl.SSLContext, body: bytes, path: str = "/validate", method: str = "POST"
) -> tuple[int, str, bytes]:
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type") or "", resp.read()
    finally:
        conn.close()


def wait_ready(variant: Variant, context: ssl.SSLContext, expected_workers: int, timeout: float) -> None:
    """Up and answering, with every worker started and settled (done loading its app and gates:
    loading is CPU-bound, so a worker that has been idle for half a second has finished)."""
    deadline = time.monotonic() + timeout
    while True:
        if not variant.process.alive():
            sys.exit(f"run.py: {variant.name} exited:\n{variant.process.log()[-3000:]}")
        try:
            path, method, body = (
                ("/readyz", "GET", None)
                if variant.name != "floor"
                else ("/validate", "POST", variant.bodies[0][1])
            )
            ok = post(variant.port, context, body, path, method)[0] == 200
        except (OSError, http.client.HTTPException):
            ok = False
        workers = children(variant.process.pid)
        if ok and len(workers) == expected_workers:
            try:
                before = {pid: cpu_ticks(pid) for pid in workers}
                time.sleep(0.5)
                busy = max((cpu_ticks(pid) - before[pid]) / CLK_TCK / 0.5 for pid in workers)
            except OSError:
                busy = 1.0
            if busy < 0.05 and children(variant.process.pid) == workers:
                return
        if time.monotonic() > deadline:
            sys.exit(
                f"run.py: {variant.name} not ready after {timeout:.0f}s "
                f"(workers {len(workers)}/{expected_workers}):\n{variant.process.log()[-3000:]}"
            )
        time.sleep(0.2)


# ---------------------------------------------------------------------------- sanity


def oracle(gates_dir: Path):
    """The same Flask app, in process, on the same gates: the verdicts the server must give."""
    from admission.core.admission.decision import Settings
    from admission.store.files import FileStore
    from admission.webhook.app import create_app

    return create_app(FileStore(gates_dir), Settings()).test_client()


def check_variant(variant: Variant, context: ssl.SSLContext) -> str:
    """Post every body once; check status, shape, uid and verdict. Return a one-line summary."""
    client = oracle(variant.gates_dir) if variant.gates_dir else None
    denied = 0
    for _attempt in range(2):  # a gate can flip at a minute boundary between server and oracle
        problems, denied = [], 0
        for label, body in variant.bodies:
            review = json.loads(body)
            status, ctype, raw = post(variant.port, context, body)
            if status != 200 or not ctype.startswith("application/json"):
                problems.append(f"{label}: HTTP {status} {ctype} {raw[:200]!r}")
                continue
            out = json.loads(raw)
            response = out.get("response") or {}
            if (out.get("apiVersion"), out.get("kind"), response.get("uid")) != (
                review["apiVersion"],
                "AdmissionReview",
                review["request"]["uid"],
            ):
                problems.append(f"{label}: wrong envelope {raw[:200]!r}")
                continue
            if not isinstance(response.get("allowed"), bool):
                problems.append(f"{label}: no verdict {raw[:200]!r}")
                continue
            denied += not response["allowed"]
            if client is None:
                if not response["allowed"]:
                    problems.append(f"{label}: the floor denied")
                continue
            want = client.post("/validate", data=body, content_type="application/json").get_json()["response"]
            if (response["allowed"], response.get("status")) != (want["allowed"], want.get("status")):
                problems.append(f"{label}: server says {response}, in process {want}")
            if not response["allowed"]:
                message = response.get("status", {}).get("message", "")
                if response["status"].get("code") != 403 or " is held: " not in message:
                    problems.append(f"{label}: denial is not a 403 hold: {response}")
                if "not found" in message.lower():
                    problems.append(f"{label}: references a gate that does not exist: {message}")
        if not problems:
            break
    if client is not None and not (0 < denied < len(variant.bodies)):
        problems.append(
            f"expected both allowed and denied reviews, got {denied} denied of {len(variant.bodies)}"
        )
    if problems:
        sys.exit(f"run.py: {variant.name} failed its sanity check:\n  " + "\n  ".join(problems[:20]))
    variant.expected_deny_share = denied / len(variant.bodies)
    return (
        f"{variant.name}: {len(variant.bodies)} bodies, all HTTP 200, {denied} denied / "
        f"{len(variant.bodies) - denied} allowed" + (", verdicts equal the app in process" if client else "")
    )


# ---------------------------------------------------------------------------- wrk


def run_wrk(variant: Variant, args: argparse.Namespace, duration: float, count: bool) -> tuple[dict, float]:
    """One wrk run; returns its result and wrk's own CPU % (of one core)."""
    cmd = [
        "wrk",
        f"-t{args.threads}",
        f"-c{args.connections}",
        f"-d{duration:g}s",
        "--timeout",
        "5s",
        "-s",
        str(LUA),
        f"https://127.0.0.1:{variant.port}",
        "--",
        str(variant.body_list),
        "count" if count else "nocount",
    ]
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True)
    after, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic() - started
    wrk_cpu = 100.0 * ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) / wall
    lines = [line for line in done.stdout.splitlines() if line.startswith("WRK-RESULT ")]
    if done.returncode != 0 or not lines:
        sys.exit(f"run.py: wrk failed ({done.returncode}): {shlex.join(cmd)}\n{done.stdout}\n{done.stderr}")
    return json.loads(lines[-1][len("WRK-RESULT ") :]), wrk_cpu


@dataclass
class Round:
    variant: str
    number: int
    rps: float
    p50: float
    p95: float
    p99: float
    p999: float
    cpu: float
    worker_cpu: list[float]
    worker_connections: list[int]
    wrk_cpu: float
    other_cpu: float
    master_rss: float
    worker_rss: list[float]
    non_2xx: int
    errors: int
    denied_share: float | None
    restarted: list[int]
    log_mb: float
    raw: dict

    @property
    def cpu_per_request(self) -> float:
        """Server CPU time per answered request, in microseconds: cost, whatever the balance."""
        return self.cpu / 100 * 1e6 / self.rps if self.rps else 0.0


def start_py_spy(variant: Variant, number: int, args: argparse.Namespace) -> list[subprocess.Popen]:
    """py-spy on every worker for the round (collapsed stacks); it slows the server a little."""
    py_spy = shutil.which("py-spy") or str(BIN / "py-spy")
    args.py_spy.mkdir(parents=True, exist_ok=True)
    return [
        subprocess.Popen(
            [
                py_spy,
                "record",
                "--pid",
                str(pid),
                "--duration",
                f"{args.duration:g}",
                "--rate",
                "100",
                "--nonblocking",
                "--format",
                "raw",
                *(["--gil"] if args.py_spy_gil else []),
                "-o",
                str(args.py_spy / f"{variant.name}-r{number}-{pid}.txt"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for pid in children(variant.process.pid)
    ]


def profile_summary(directory: Path, variant: str, top: int = 25) -> str:
    """Where the workers' sampled threads were, inclusive of callees, from py-spy's raw output."""
    inclusive: dict[str, int] = {}
    own: dict[str, int] = {}
    total = 0
    for path in sorted(directory.glob(f"{variant}-r*-*.txt")):
        for line in path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack:
                continue
            n = int(count)
            total += n
            frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")]
            for frame in set(frames):
                inclusive[frame] = inclusive.get(frame, 0) + n
            own[frames[-1]] = own.get(frames[-1], 0) + n
    if not total:
        return f"{variant}: no samples"
    rows = [f"{variant}: {total} samples (all workers, all rounds)", "  inclusive:"]
    rows += [
        f"    {100 * n / total:5.1f}%  {f}" for f, n in sorted(inclusive.items(), key=lambda kv: -kv[1])[:top]
    ]
    rows += ["  self:"]
    rows += [f"    {100 * n / total:5.1f}%  {f}" for f, n in sorted(own.items(), key=lambda kv: -kv[1])[:top]]
    return "\n".join(rows)


def wait_for_quiet(args: argparse.Namespace) -> float:
    """Before a round: wait (up to --wait-idle seconds) while other processes keep the machine busy.
    Returns the last busy figure seen, in % of one core."""
    started = time.monotonic()
    said = -60.0
    while True:
        busy = machine_busy_percent(1.0)
        waited = time.monotonic() - started
        if busy <= args.idle_threshold or waited >= args.wait_idle:
            if busy > args.idle_threshold:
                print(
                    f"# machine still busy ({busy:.0f}% of a core used) after {waited:.0f}s; measuring anyway",
                    file=sys.stderr,
                )
            return busy
        if waited - said >= 60:
            said = waited
            print(
                f"# machine busy ({busy:.0f}% of a core used by other processes); waiting for it to be quiet "
                f"(up to {args.wait_idle:g}s)",
                file=sys.stderr,
            )
        time.sleep(4.0)


def measure(variant: Variant, number: int, args: argparse.Namespace) -> Round:
    wait_for_quiet(args)
    if args.warmup > 0:
        run_wrk(variant, args, args.warmup, count=False)
    log_before = variant.process.log_path.stat().st_size
    sampler = Sampler(variant.process.pid, variant.port)
    sampler.start()
    spies = start_py_spy(variant, number, args) if args.py_spy else []
    result, wrk_cpu = run_wrk(variant, args, args.duration, count=not args.no_count)
    sampler.stop()
    for spy in spies:
        spy.wait(timeout=60)
    log_mb = (variant.process.log_path.stat().st_size - log_before) / 1e6
    lat, errors = result["latency_us"], result["errors"]
    requests = result["requests"]
    # Non-2xx: counted in response() when on; else wrk's own "status > 399" counter.
    non_2xx = result["status_other"] if "status_other" in result else errors["status"]
    verdicts = result.get("allowed", 0) + result.get("denied", 0)
    return Round(
        variant.name,
        number,
        requests / (result["duration_us"] / 1e6),
        lat["p50"] / 1000,
        lat["p95"] / 1000,
        lat["p99"] / 1000,
        lat["p99.9"] / 1000,
        sampler.cpu_percent,
        sampler.worker_cpu,
        sampler.worker_connections,
        wrk_cpu,
        max(0.0, sampler.machine_percent - sampler.cpu_percent - wrk_cpu),
        sampler.master_rss,
        sampler.worker_rss,
        non_2xx,
        errors["connect"] + errors["read"] + errors["write"] + errors["timeout"],
        result["denied"] / verdicts if verdicts else None,
        sampler.restarted,
        log_mb,
        result,
    )


# ---------------------------------------------------------------------------- report


def machine() -> str:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.machine(),
    )
    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    debian = Path("/etc/debian_version").read_text().strip() if Path("/etc/debian_version").exists() else "?"
    wrk = subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout.split("\n")[0].split(" [")[0]
    from importlib.metadata import version

    return (
        f"{os.cpu_count()} cpus ({model}, {platform.machine()}), {mem_gb:.0f} GB RAM, Linux {platform.release()}, "
        f"Debian {debian}; CPython {platform.python_version()}, gunicorn {version('gunicorn')}, "
        f"Flask {version('flask')}; {wrk}; load generator on the same machine"
    )


def code_version() -> str:
    """The commit measured, and whether the server's code differed from it."""
    try:
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", "admission"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return head + (" with uncommitted changes under admission/" if dirty else " (admission/ as committed)")


def ratio(rounds: list[Round], variant: str, base: str, attr: str) -> float | None:
    by = {(r.variant, r.number): getattr(r, attr) for r in rounds}
    values = [
        by[(variant, n)] / by[(base, n)]
        for (v, n) in by
        if v == variant and (base, n) in by and by[(base, n)]
    ]
    return statistics.mean(values) if values else None


def report(
    rounds: list[Round],
    variants: list[Variant],
    args: argparse.Namespace,
    command: str,
    sanity: list[str],
    started: datetime,
    redone: list[str],
    code_version: str,
) -> tuple[str, bool]:
    ok = True
    lines = [
        f"Run {started:%Y-%m-%d %H:%M} UTC; {args.rounds} rounds x {len(variants)} variants, "
        f"wrk -t{args.threads} -c{args.connections} -d{args.duration:g}s after a {args.warmup:g}s warm-up, "
        f"keep-alive, TLS; order " + "/".join(v.name for v in variants) + " per round.",
        "",
        "| variant | round | req/s | p50 ms | p95 ms | p99 ms | p99.9 ms | server CPU % | server CPU µs per request | CPU % per worker "
        "| connections per worker | wrk CPU % | other CPU % | RSS master MB | RSS per worker MB | non-2xx | socket errors "
        "| denied |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rounds:
        bad = r.non_2xx or r.errors or r.restarted
        ok = ok and not bad
        denied = "n/a" if r.denied_share is None else f"{100 * r.denied_share:.0f}%"
        lines.append(
            f"| {r.variant} | {r.number} | {r.rps:,.0f} | {r.p50:.1f} | {r.p95:.1f} | {r.p99:.1f} | "
            f"{r.p999:.1f} | {r.cpu:.0f} | {r.cpu_per_request:.0f} | {' / '.join(f'{c:.0f}' for c in r.worker_cpu)} | "
            f"{' / '.join(map(str, r.worker_connections))} | {r.wrk_cpu:.0f} | {r.other_cpu:.0f} | {r.master_rss:.0f} | "
            f"{' / '.join(f'{m:.0f}' for m in r.worker_rss)} | {r.non_2xx} | {r.errors} | {denied}"
            + (f" (workers replaced: {r.restarted})" if r.restarted else "")
            + " |"
        )
    lines += [
        "",
        "| variant | mean req/s | mean p99 ms | req/s vs floor | p99 vs floor | CPU per request vs floor "
        "| peak RSS per worker MB | bodies (denied) | log written per round |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    names = [v.name for v in variants]
    for v in variants:
        mine = [r for r in rounds if r.variant == v.name]
        thr = ratio(rounds, v.name, "floor", "rps") if "floor" in names else None
        p99 = ratio(rounds, v.name, "floor", "p99") if "floor" in names else None
        cost = ratio(rounds, v.name, "floor", "cpu_per_request") if "floor" in names else None
        lines.append(
            f"| {v.name} | {statistics.mean(r.rps for r in mine):,.0f} | "
            f"{statistics.mean(r.p99 for r in mine):.1f} | {'' if thr is None else f'{thr:.2f}x'} | "
            f"{'' if p99 is None else f'{p99:.2f}x'} | {'' if cost is None else f'{cost:.2f}x'} | {max(max(r.worker_rss, default=0) for r in mine):.0f} | "
            f"{len(v.bodies)} ({100 * v.expected_deny_share:.0f}%) | "
            f"{statistics.mean(r.log_mb for r in mine):.1f} MB |"
        )
    targets = []
    if "floor" in names and "ours" in names:
        thr, p99 = ratio(rounds, "ours", "floor", "rps"), ratio(rounds, "ours", "floor", "p99")
        targets.append(
            f"ours: throughput {thr:.2f}x floor (target >= {TARGET_OURS_THROUGHPUT:.1f}x: "
            f"{'met' if thr >= TARGET_OURS_THROUGHPUT else 'NOT met'}), p99 {p99:.2f}x floor "
            f"(target <= {TARGET_OURS_P99:.1f}x: {'met' if p99 <= TARGET_OURS_P99 else 'NOT met'})"
        )
    if "floor" in names and "ours-10k" in names:
        thr = ratio(rounds, "ours-10k", "floor", "rps")
        vs_ours = ratio(rounds, "ours-10k", "ours", "rps") if "ours" in names else None
        rss = max(max(r.worker_rss, default=0) for r in rounds if r.variant == "ours-10k")
        targets.append(
            f"ours-10k: throughput {thr:.2f}x floor (target >= {TARGET_10K_THROUGHPUT:.1f}x: "
            f"{'met' if thr >= TARGET_10K_THROUGHPUT else 'NOT met'})"
            + (f", {vs_ours:.2f}x ours" if vs_ours is not None else "")
            + f"; peak RSS {rss:.0f} MB per worker (target <= {TARGET_10K_RSS_MB:.0f} MB: "
            f"{'met' if rss <= TARGET_10K_RSS_MB else 'NOT met'})"
        )
    lines += [""] + [f"- {t}" for t in targets]
    lines += [
        "- Ratios are per round (same round, consecutive slots) and then averaged over rounds. "
        "CPU % is of one core (200% = both cores); server CPU is the gunicorn master plus its workers, "
        "and server CPU per request is that CPU time divided by the requests answered (what a request costs, "
        "however the connections fell on the workers); "
        "other CPU is the whole machine's (/proc/stat) minus server and wrk: other processes, "
        "and this script's sampling; RSS is the peak VmRSS sampled every 0.25 s during the round; connections per worker are the "
        "load generator's keep-alive connections each worker held (peak of samples, from /proc/net/tcp "
        "and the workers' file descriptors)."
    ]
    lines += [f"- Sanity before measuring: {s}" for s in sanity]
    if redone:
        counts = {name: redone.count(name) for name in dict.fromkeys(redone)}
        lines.append(
            "- Measured again because other processes were busy during it: "
            + ", ".join(f"{name} ({n}x)" for name, n in counts.items())
            + " "
            "(the table has the last attempt)."
        )
    disturbed = [f"{r.variant} {r.number}" for r in rounds if r.other_cpu > args.idle_threshold]
    if disturbed:
        lines.append(
            f"- **Disturbed**: other processes used more than {args.idle_threshold:g}% of a core during "
            f"round(s) {', '.join(disturbed)}; those figures are not clean."
        )
    if not ok:
        lines.append("- **INVALID**: some round saw non-2xx responses, socket errors or a replaced worker.")
    lines += ["", f"Command: `{command}`", "", f"Machine: {machine()}", "", f"Code: {code_version}"]
    return "\n".join(lines), ok


# ---------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--connections", "-c", type=int, default=16, help="wrk connections (default 16)")
    parser.add_argument("--threads", "-t", type=int, default=2, help="wrk threads (default 2)")
    parser.add_argument(
        "--duration", "-d", type=float, default=10.0, help="seconds measured per round (default 10)"
    )
    parser.add_argument(
        "--warmup", type=float, default=2.0, help="seconds of unrecorded load before each round (default 2)"
    )
    parser.add_argument(
        "--rounds", "-r", type=int, default=2, help="rounds; each runs every variant once (default 2)"
    )
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help=f"comma-separated, in round order (default {','.join(VARIANTS)})",
    )
    parser.add_argument(
        "--ours-args",
        default="",
        help='extra `gate-admission serve` flags for ours and ours-10k, e.g. "--threads 16"',
    )
    parser.add_argument(
        "--floor-args",
        default="",
        help="extra gunicorn flags for the floor, for experiments only (the floor is defined as the defaults)",
    )
    parser.add_argument(
        "--gates",
        type=int,
        default=10000,
        help="Gates (and as many GateKeepers) for ours-10k (default 10000)",
    )
    parser.add_argument(
        "--copies",
        type=int,
        default=32,
        help="ours-10k: copies of every review, each referencing other generated gates (default 32)",
    )
    parser.add_argument(
        "--reviews",
        type=Path,
        help=f"directory of review bodies (default {FIXTURES}, else {EXAMPLE_REVIEWS})",
    )
    parser.add_argument(
        "--no-count",
        action="store_true",
        help="no wrk response() callback: cheaper for wrk, but non-2xx is then wrk's 'status > 399' and no verdict counts",
    )
    parser.add_argument(
        "--wait-idle",
        type=float,
        default=900.0,
        help="before each round, wait up to this many seconds for other processes to leave the "
        "machine quiet (default 900)",
    )
    parser.add_argument(
        "--idle-threshold",
        type=float,
        default=15.0,
        help="quiet means at most this %% of one core busy (default 15)",
    )
    parser.add_argument(
        "--redo",
        type=int,
        default=2,
        help="measure a round again (up to this many times) when other processes used more than "
        "--idle-threshold during it (default 2)",
    )
    parser.add_argument(
        "--py-spy",
        type=Path,
        metavar="DIR",
        help="record every worker with py-spy (collapsed stacks in DIR/<start time>/) and print where time went; "
        "perturbs the figures, so not for the record",
    )
    parser.add_argument(
        "--py-spy-gil",
        action="store_true",
        help="with --py-spy: sample only the thread holding the GIL (where Python CPU goes)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the work directory (server logs, bodies, gates)"
    )
    args = parser.parse_args(argv)
    args.variant_list = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = set(args.variant_list) - set(VARIANTS)
    if unknown or not args.variant_list:
        parser.error(f"unknown variants {sorted(unknown)}; choose from {', '.join(VARIANTS)}")
    if args.gates < 4 or args.gates % 4:
        parser.error("--gates must be a positive multiple of 4")
    return args


def serve_workers(extra: list[str], default: int) -> int:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--workers", "-w", type=int, default=default)
    return parser.parse_known_args(extra)[0].workers


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # run the cleanup in main's finally: stop the servers we started


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _terminate)
    if shutil.which("wrk") is None:
        print("run.py: wrk is not on PATH; install it with: apt-get install -y wrk", file=sys.stderr)
        return 2
    args = parse_args(argv)
    command = (
        shlex.join(
            [
                os.path.relpath(sys.executable) if sys.executable.startswith(os.getcwd()) else sys.executable,
                *sys.argv,
            ]
        )
        if argv is None
        else shlex.join(argv)
    )
    started = datetime.now(UTC)
    code = code_version()  # read before the servers start: what they run
    if args.py_spy:
        args.py_spy = args.py_spy / started.strftime("%Y%m%dT%H%M%SZ")  # this run's stacks only
    extra = shlex.split(args.ours_args)
    work = Path(tempfile.mkdtemp(prefix="bench-load-"))
    variants: list[Variant] = []
    try:
        cert_dir = work / "certs"
        subprocess.run(
            [str(BIN / "gate-admission"), "certs", "--out", str(cert_dir)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        context = tls_context(cert_dir)
        originals = [(p.name, compact(json.loads(p.read_bytes()))) for p in review_files(args.reviews)]
        print(
            f"# {len(originals)} review bodies from {review_files(args.reviews)[0].parent}; work dir {work}",
            file=sys.stderr,
        )
        for name in args.variant_list:
            if name == "ours-10k":
                bodies = rewrite_for(args.gates, args.copies, originals)
            else:
                bodies = list(originals)
            variant = Variant(name, bodies)
            body_dir = work / "bodies" / name
            body_dir.mkdir(parents=True)
            paths = []
            for i, (_, body) in enumerate(bodies):
                path = body_dir / f"{i:05d}.json"
                path.write_bytes(body)
                paths.append(str(path))
            variant.body_list = work / "bodies" / f"{name}.txt"
            variant.body_list.write_text("\n".join(paths) + "\n")
            variants.append(variant)

        for variant in variants:
            if variant.name == "ours":
                start_ours(work, variant, cert_dir, EXAMPLE_GATES, extra)
            elif variant.name == "ours-10k":
                gates_dir = work / "gates-10k"
                print(
                    f"# writing {args.gates} Gates and {args.gates} GateKeepers to {gates_dir}",
                    file=sys.stderr,
                )
                write_gates(gates_dir, args.gates)
                start_ours(work, variant, cert_dir, gates_dir, extra)
            else:
                start_floor(work, variant, cert_dir, shlex.split(args.floor_args))
        for variant in variants:
            workers = (
                serve_workers(shlex.split(args.floor_args), 2)
                if variant.name == "floor"
                else serve_workers(extra, int(os.environ.get("GATE_ADMISSION_WORKERS", 2)))
            )
            wait_ready(variant, context, workers, timeout=300)
        sanity = []
        for variant in variants:
            sanity.append(check_variant(variant, context))
            print(f"# sanity: {sanity[-1]}", file=sys.stderr)

        rounds: list[Round] = []
        redone: list[str] = []
        for number in range(1, args.rounds + 1):
            for variant in variants:
                for attempt in range(args.redo + 1):
                    r = measure(variant, number, args)
                    if r.other_cpu <= args.idle_threshold or attempt == args.redo:
                        break
                    redone.append(f"{variant.name} {number}")
                    print(
                        f"# round {number} {variant.name} disturbed (other processes used {r.other_cpu:.0f}% "
                        f"of a core): measuring it again",
                        file=sys.stderr,
                    )
                rounds.append(r)
                print(
                    f"# round {number} {variant.name}: {r.rps:,.0f} req/s, p99 {r.p99:.1f} ms, "
                    f"CPU {r.cpu:.0f}%, non-2xx {r.non_2xx}",
                    file=sys.stderr,
                )
        text, ok = report(rounds, variants, args, command, sanity, started, redone, code)
        print(text)
        if args.py_spy:
            for variant in variants:
                print("\n" + profile_summary(args.py_spy, variant.name))
        if args.keep:
            (work / "results.json").write_text(json.dumps([r.__dict__ for r in rounds], indent=1))
        return 0 if ok else 1
    finally:
        for variant in variants:
            if variant.process is not None:
                variant.process.stop()
        if args.keep:
            print(f"# kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
