"""What the benches through a real kube-apiserver share: the Go floor (bench/floor, an allow-all
webhook pair), switching the registered webhooks between none, the floor and ours, the API
server's and our server's latency histograms, and the header every such bench prints (the exact
command, date, commit, API server and etcd versions, machine load).

The floor is built once per source and Go version into ~/.cache/flux-gate-admission/tools
(``$XDG_CACHE_HOME`` if set) with the installed go command: standard library only, so the build
runs with ``GOPROXY=off`` and ``GOTOOLCHAIN=local`` and never downloads anything.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import ssl
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.e2e.conftest import SENTINEL, register_webhooks
from tests.e2e.controlplane import ADMIN
from tests.polling import until
from tests.processes import Process, free_port

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
FLOOR_SOURCE = HERE / "floor"
VARIANTS = ("none", "floor", "ours")


def tools_dir() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "flux-gate-admission" / "tools"


def _go_env() -> dict[str, str]:
    return {
        **os.environ,
        "GOPROXY": "off",
        "GOTOOLCHAIN": "local",
        "GOFLAGS": "-buildvcs=false",
        "CGO_ENABLED": "0",
        "GO111MODULE": "on",
    }


def build_floor() -> Path:
    """The floor's binary, built here if this source and Go version have none cached yet."""
    go_version = subprocess.run(
        ["go", "env", "GOVERSION"], check=True, capture_output=True, text=True, env=_go_env()
    ).stdout.strip()
    digest = hashlib.sha256(go_version.encode())
    for name in ("go.mod", "main.go"):
        digest.update(name.encode() + b"\0" + (FLOOR_SOURCE / name).read_bytes())
    out = tools_dir() / f"admission-floor-{digest.hexdigest()[:12]}" / "admission-floor"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f"admission-floor.partial-{os.getpid()}")
    started = time.monotonic()
    subprocess.run(
        ["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(partial), "."],
        check=True,
        cwd=FLOOR_SOURCE,
        env=_go_env(),
    )
    partial.rename(out)
    print(
        f"# built the Go floor with {go_version} in {time.monotonic() - started:.1f} s: {out}",
        file=sys.stderr,
    )
    return out


class Floor(Process):
    """The Go floor on a free loopback port, serving ``cert_dir``'s certificate (our server's)."""

    def __init__(self, workdir: Path, cert_dir: Path):
        self.port, self.cert_dir = free_port(), cert_dir
        super().__init__(
            [
                str(build_floor()),
                "-addr",
                f"127.0.0.1:{self.port}",
                "-cert",
                str(cert_dir / "tls.crt"),
                "-key",
                str(cert_dir / "tls.key"),
            ],
            workdir / "floor.log",
        )
        if not until(self._answers, bool, timeout=10):
            self.stop()
            raise RuntimeError(f"the Go floor does not answer: {self.log()[-2000:]}")

    def count(self) -> int:
        """Reviews the floor has answered."""
        context = ssl.create_default_context(cafile=str(self.cert_dir / "ca.crt"))
        with urllib.request.urlopen(
            f"https://127.0.0.1:{self.port}/count", context=context, timeout=2
        ) as resp:
            return int(resp.read())

    def _answers(self) -> bool:
        try:
            self.count()
            return True
        except OSError:
            return False


def switch(plane, server, floor: Floor, variant: str) -> None:
    """Register ``variant``'s webhooks (manifests/webhooks; only the URL differs between the floor
    and ours) and wait until the API server calls them, or, for "none", until it no longer does."""
    plane.kubectl(
        "delete",
        "validatingwebhookconfiguration,mutatingwebhookconfiguration",
        "gate-admission",
        "--ignore-not-found",
    )

    def held() -> bool:
        return (
            "is held"
            in plane.kubectl("apply", "--dry-run=server", "-f", "-", input=SENTINEL, check=False).stderr
        )

    if variant == "none":
        ok = not until(held, lambda h: not h, timeout=30)
    else:
        register_webhooks(plane, server, port=floor.port if variant == "floor" else None)
        if variant == "ours":
            ok = until(held, bool, timeout=30)
        else:
            before = floor.count()
            ok = until(lambda: (held(), floor.count())[1], lambda n: n > before, timeout=30) > before
    if not ok:
        raise RuntimeError(f"the API server did not switch to {variant!r} webhooks within 30 s")


def rotated(round_index: int) -> tuple[str, ...]:
    """The variants in the order round ``round_index`` measures them: rotated each round, so that
    none of them is always measured first or last while the machine's load drifts."""
    shift = round_index % len(VARIANTS)
    return VARIANTS[shift:] + VARIANTS[:shift]


def metric_sums(text: str, name: str, label: str) -> dict[str, tuple[float, float]]:
    """(sum, count) of histogram ``name`` per value of ``label``, added over other labels."""
    out: dict[str, list[float]] = {}
    for line in text.splitlines():
        for suffix, slot in (("_sum", 0), ("_count", 1)):
            if line.startswith(name + suffix + "{"):
                found = re.search(label + r'="([^"]*)"', line)
                key = found.group(1) if found else ""
                out.setdefault(key, [0.0, 0.0])[slot] += float(line.rsplit(" ", 1)[1])
    return {k: (v[0], v[1]) for k, v in out.items()}


def _apiserver_get(plane, path: str) -> bytes:
    request = urllib.request.Request(
        f"{plane.server}{path}", headers={"Authorization": f"Bearer {ADMIN.token}"}
    )
    with urllib.request.urlopen(request, context=ssl._create_unverified_context(), timeout=10) as resp:
        return resp.read()


def apiserver_webhooks(plane) -> dict[str, tuple[float, float]]:
    """The API server's own latency of webhook calls, (sum s, count) per webhook type."""
    return metric_sums(
        _apiserver_get(plane, "/metrics").decode(),
        "apiserver_admission_webhook_admission_duration_seconds",
        "type",
    )


def ours_handler(server) -> dict[str, tuple[float, float]]:
    """Our server's decode-to-encode time, (sum s, count) per endpoint."""
    with urllib.request.urlopen(f"{server.url}/metrics", context=server.tls(), timeout=10) as resp:
        return metric_sums(resp.read().decode(), "gate_admission_review_duration_seconds", "webhook")


class CallTimes:
    """Mean time per webhook call over the measured writes: as the API server sees it, per
    variant and webhook type, and (for ours) in our handler, per endpoint."""

    def __init__(self, plane, server):
        self.plane, self.server = plane, server
        self.sums: dict[tuple[str, str], list[float]] = {}

    def measure(self, variant: str):
        return _Window(self, variant)

    def _add(self, variant: str, before: dict, after: dict) -> None:
        for key, (total, count) in after.items():
            seen = self.sums.setdefault((variant, key), [0.0, 0.0])
            seen[0] += total - before.get(key, (0, 0))[0]
            seen[1] += count - before.get(key, (0, 0))[1]

    def report(self) -> None:
        print("mean time per webhook call, as the API server sees it, and in our handler:")
        for (variant, key), (total, count) in sorted(self.sums.items()):
            if count:
                where = "our handler, decode->encode" if variant == "handler" else f"API server -> {variant}"
                print(f"  {where:<30} {key:<10} {total / count * 1000:7.2f} ms  ({int(count)} calls)")


class _Window:
    def __init__(self, times: CallTimes, variant: str):
        self.times, self.variant = times, variant

    def __enter__(self):
        self.apiserver = apiserver_webhooks(self.times.plane)
        self.handler = ours_handler(self.times.server) if self.variant == "ours" else {}
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self.times._add(self.variant, self.apiserver, apiserver_webhooks(self.times.plane))
            if self.variant == "ours":
                self.times._add("handler", self.handler, ours_handler(self.times.server))


def command_line() -> str:
    """The command that is running, as typed from the repository's root."""
    python = Path(sys.executable)
    try:
        python = python.relative_to(Path.cwd())
    except ValueError:
        pass
    return shlex.join([str(python), *sys.argv])


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def versions(plane) -> str:
    import json

    apiserver = json.loads(_apiserver_get(plane, "/version")).get("gitVersion", "?")
    etcd = subprocess.run([str(plane.assets / "etcd"), "--version"], capture_output=True, text=True).stdout
    found = re.search(r"etcd Version:\s*(\S+)", etcd)
    return f"kube-apiserver {apiserver} + etcd v{found.group(1) if found else '?'} on loopback"


def commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "?"
    return head + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def print_header(plane, what: str, started_load: str) -> None:
    print(f"# command: {command_line()}")
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M %Z')}, code {commit()}, {os.cpu_count()} cpus, {versions(plane)}; {what}"
    )
    print(f"# load at start: {started_load}")
    print(f"# load at end:   {uptime()}")


def ratio(ours: float, floor: float) -> str:
    """``ours`` over ``floor`` as printed in the figures, or n/a when the floor added nothing."""
    return f"{ours / floor:.2f}x" if floor > 0 else "n/a"


def median_ratio(pairs: list[tuple[float, float]]) -> str:
    """The median of ``ours / floor`` over (ours, floor) pairs, as printed."""
    ratios = [ours / floor for ours, floor in pairs if floor > 0]
    return f"{statistics.median(ratios):.2f}x" if ratios else "n/a"
