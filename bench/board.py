"""The gate board's cost: one look at 500 gates x 14 days and 2,000 held objects.

Usage: python bench/board.py [--gates 500] [--held 2000] [--rounds 5] [--sizes 100,250] [--read-only]
[--own-schedules] (pin to one core: taskset -c 0 python bench/board.py). Targets: under 1 s of server time and
under 50 MB for the default sizes, the board's default look (14 days, every namespace).

The world, built in process at a fixed instant (2026-12-20 10:00 UTC, in the holiday freezes):
- ``--gates`` Gates, ten to a namespace, each kind of gate with its own GateKeeper schedule:
  minute-match freezes (the holidays, outside business hours in Asia/Tokyo), windows with a
  duration (nightly in America/New_York, the weekend in Europe/Berlin, a 30 min canary pause
  every 4 hours), a release window that opens twice a week, manual gates with no keeper; every
  seventh gate toggled (closed with a message, or opened for 2h with the close planned). The
  gates of one kind have the same schedule, as a team's template copied to each namespace
  (``--own-schedules``: each GateKeeper named after its namespace too, so that no two gates
  share their spans, which the board works out and draws once per schedule). Every
  Gate has the status the controller would write (with the approval key), so approvals read as
  ``kubectl gate`` reads them: verified where the status lists them.
- ``--held`` Flux objects held behind one or two of their namespace's gates, with the hold
  condition the webhook writes (GitRepository, OCIRepository, Bucket, HelmChart, ImagePolicy:
  Blocked; Kustomization, HelmRelease: Approved=False), what waits and what is served; the
  sources the held Kustomizations apply and the HelmCharts of held HelmReleases are there too,
  so approval identities and half-release warnings are computed as in a cluster. Every tenth held
  object has an approval of what waits (half sealed with the key, half not: unverified), every
  tenth object a ``suspendDuring`` annotation.

Measured, on the cluster board's path (``kubectl gate board`` reads the lists and builds a new
GateIndex every look, then ``board.model.build`` and ``board.page.page``), writable (the forms
of every action; ``--read-only`` without them): the index, the model and the render separately
(median of ``--rounds``) of a first look (nothing remembered from an earlier one) and of each
look after it (a new index again: the board remembers each gate's spans and drawn row while they
stay the same, ``core.gates.timeline`` and ``board.timeline``), the page's size, the peak of memory of a
first look (tracemalloc over one index+build+render; RSS growth, VmHWM after one look minus VmRSS
before it, measured first), the cost per gate of a first look (the same held objects with
``--sizes`` gates: the slope), the cost of the held objects (the full gates with none), and
``GET /fragment`` and ``GET /`` through the Flask app's test client (after its first request:
each look after the first).
Times are CPU time of this process (wall time beside): the machine is shared. Each round looks at
every variant in turn, so a slow minute weighs on all of them alike.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import os
import platform
import statistics
import sys
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from admission.board import app as board_app  # noqa: E402
from admission.board import timeline as board_timeline  # noqa: E402
from admission.board.model import Query, Refused, Snapshot, build  # noqa: E402
from admission.board.page import View, page  # noqa: E402
from admission.core.base import names  # noqa: E402
from admission.core.flux.holdmessage import HoldMessage, NewContent, gate_clause  # noqa: E402
from admission.core.gates import approvals
from admission.core.gates.status import gate_status  # noqa: E402
from admission.core.gates.toggles import toggle_patch  # noqa: E402
from admission.core.time.cron import zone  # noqa: E402
from admission.store.index import GateIndex  # noqa: E402

NOW = datetime(2026, 12, 20, 10, 0, tzinfo=UTC)
VIEWER = zone("Europe/Berlin")
KEY = b"bench-approval-key-0123456789abcdef"
OTHER_KEY = b"another-server-key-0123456789abcdef"  # sealed elsewhere: shown unverified
PER_NAMESPACE = 10
API = {
    "GitRepository": "source.toolkit.fluxcd.io/v1",
    "OCIRepository": "source.toolkit.fluxcd.io/v1",
    "Bucket": "source.toolkit.fluxcd.io/v1",
    "HelmChart": "source.toolkit.fluxcd.io/v1",
    "HelmRepository": "source.toolkit.fluxcd.io/v1",
    "Kustomization": "kustomize.toolkit.fluxcd.io/v1",
    "HelmRelease": "helm.toolkit.fluxcd.io/v2",
    "ImagePolicy": "image.toolkit.fluxcd.io/v1",
}

# One of each per namespace: (gate name, Gate spec, GateKeeper time zone, closed, opened).
KINDS_OF_GATE: list[tuple[str, dict[str, Any], str | None, list[Any] | None, list[Any] | None]] = [
    ("change-freeze", {}, "Europe/Berlin", ["* * 20-31 12 *", "* * 1-6 1 *"], None),
    ("release-window", {}, "Europe/Berlin", None, [{"cron": "0 10 * * 2,4", "duration": "2h"}]),
    ("sre-approval", {"approvals": {"required": 1}}, None, None, None),
    ("qa-approval", {"window": "1h"}, None, None, None),
    (
        "night-freeze",
        {"default": "opened"},
        "America/New_York",
        [{"cron": "0 22 * * *", "duration": "8h"}],
        None,
    ),
    (
        "weekend-freeze",
        {"default": "opened"},
        "Europe/Berlin",
        [{"cron": "0 18 * * 5", "duration": "62h"}],
        None,
    ),
    ("holiday-freeze", {"default": "opened"}, "UTC", ["* * 24-26 12 *", "* * 31 12 *"], None),
    ("business-hours", {"default": "opened"}, "Asia/Tokyo", ["* 0-8,18-23 * * 1-5", "* * * * 0,6"], None),
    (
        "db-migrations",
        {"default": "opened"},
        "Europe/London",
        [{"cron": "30 2 * * 3", "duration": "90m"}],
        None,
    ),
    ("canary", {"default": "opened"}, "Europe/Berlin", [{"cron": "0 */4 * * *", "duration": "30m"}], None),
]
SUSPENSIONS = ("* 22-23 * * *", "* 0-6 * * 0,6", "* 12 * * 1-5", "* * 24-26 12 *")


def sha(text: str, length: int = 40) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def namespace_of(i: int) -> str:
    return f"team-{i:03d}"


def gates_world(count: int, own: bool = False) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    gates, keepers = [], []
    for i in range(count):
        ns = namespace_of(i // PER_NAMESPACE)
        name, spec, tz, closed, opened = KINDS_OF_GATE[i % len(KINDS_OF_GATE)]
        meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}", "annotations": {}}
        if i % 7 == 3:
            action = "close" if i % 2 else "open"
            patch = toggle_patch(
                action,
                NOW - timedelta(minutes=40 + i % 50),
                f"INC-{1000 + i}: <b>payments</b> are degraded" if action == "close" else f"hotfix {i}",
                f"user-{i % 13}@example.com",
                "2h" if action == "open" else None,
            )
            meta["annotations"].update({k: v for k, v in patch["metadata"]["annotations"].items() if v})
        gates.append(
            {"apiVersion": names.GATING_API_VERSION, "kind": "Gate", "metadata": meta, "spec": dict(spec)}
        )
        if tz is None:
            continue
        cronjob: dict[str, Any] = {}
        if closed:
            cronjob["closed"] = closed
        if opened:
            cronjob["opened"] = opened
        keepers.append(
            {
                "apiVersion": names.GATING_API_VERSION,
                "kind": "GateKeeper",
                # Named after its namespace too (``own``), no two gates have the same schedule:
                # the messages of their spans name the GateKeeper.
                "metadata": {"name": f"{name}-schedule" + (f"-{ns}" if own else ""), "namespace": ns},
                "spec": {"gate": name, "timeZone": tz, "cronjob": cronjob},
            }
        )
    return gates, keepers


def flux(kind: str, ns: str, name: str, gates: list[str] | None = None, **fields: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if gates:
        meta["annotations"] = {names.GATES_ANNOTATION: ", ".join(gates)}
    return {"apiVersion": API[kind], "kind": kind, "metadata": meta, **fields}


def held(obj: dict[str, Any], gates: list[str], waits: str, serves: str, since: datetime) -> dict[str, Any]:
    """``obj`` with the condition the webhook writes while ``gates`` hold ``waits``."""
    condition = (
        names.APPROVED_CONDITION
        if obj["kind"] in ("Kustomization", "HelmRelease")
        else names.BLOCKED_CONDITION
    )
    message = HoldMessage.of(condition, tuple(gate_clause(g) for g in gates), NewContent(waits, serves))
    status = obj.setdefault("status", {})
    status["conditions"] = [
        {
            "type": "Ready",
            "status": "True",
            "reason": "Succeeded",
            "message": f"stored artifact for revision '{serves}'",
            "lastTransitionTime": "2026-12-01T08:00:00Z",
        },
        {
            "type": condition,
            "status": "True" if condition == names.BLOCKED_CONDITION else "False",
            "reason": names.GATE_CLOSED_REASON,
            "message": message.format(),
            "lastTransitionTime": since.strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
    ]
    return obj


def artifact(revision: str, digest: str) -> dict[str, Any]:
    return {
        "revision": revision,
        "digest": digest,
        "url": f"http://source-controller.flux-system.svc/{sha(revision, 12)}.tar.gz",
        "path": f"x/{sha(revision, 12)}.tar.gz",
        "size": 12345,
        "lastUpdateTime": "2026-12-19T09:00:00Z",
    }


def objects_world(count: int, gate_count: int) -> tuple[list[dict[str, Any]], list[tuple[str, str, str]]]:
    """``count`` held objects and what they need; with each, (gate key, content, target) for
    every tenth: what an approval names."""
    objects: list[dict[str, Any]] = []
    namespaces = max(1, -(-gate_count // PER_NAMESPACE))
    to_approve = []
    for ns_i in range(min(namespaces, count) if count else 0):
        ns = namespace_of(ns_i)
        objects.append(
            flux("HelmRepository", ns, "charts", spec={"interval": "1h", "url": "https://charts.example/"})
        )
    for i in range(count):
        ns_i = i % namespaces
        ns = namespace_of(ns_i)
        in_ns = min(PER_NAMESPACE, gate_count - ns_i * PER_NAMESPACE)
        first = (i // namespaces) % in_ns
        gates = [f"{ns}/{KINDS_OF_GATE[first][0]}"]
        if i % 3 == 0 and in_ns > 1:
            gates.append(f"{ns}/{KINDS_OF_GATE[(first + 1 + i % (in_ns - 1)) % in_ns][0]}")
        since = NOW - timedelta(hours=1 + i % 200, minutes=i % 60)
        name = f"app-{i:04d}"
        slot = i % 20
        if slot < 6:
            new, old = f"main@sha1:{sha(f'new{i}')}", f"main@sha1:{sha(f'old{i}')}"
            obj = flux(
                "GitRepository",
                ns,
                name,
                gates,
                spec={"interval": "1m", "url": f"https://git.example/{ns}/{name}", "ref": {"branch": "main"}},
                status={"artifact": artifact(old, f"sha256:{sha(old, 64)}")},
            )
            content = new
            obj = held(obj, gates, new, old, since)
        elif slot < 8:
            new, old = f"v1.{i}.1@sha256:{sha(f'new{i}', 64)}", f"v1.{i}.0@sha256:{sha(f'old{i}', 64)}"
            obj = flux(
                "OCIRepository",
                ns,
                name,
                gates,
                spec={
                    "interval": "5m",
                    "url": f"oci://registry.example/{ns}/{name}",
                    "ref": {"semver": "1.x"},
                },
                status={"artifact": artifact(old, f"sha256:{sha(old, 64)}")},
            )
            content = new
            obj = held(obj, gates, new, old, since)
        elif slot < 13:
            # The GitRepository it applies serves what waits here; it is gated differently
            # (no gate): the half-release warning pending gives.
            new, old = f"main@sha1:{sha(f'new{i}')}", f"main@sha1:{sha(f'old{i}')}"
            objects.append(
                flux(
                    "GitRepository",
                    ns,
                    f"{name}-source",
                    spec={
                        "interval": "1m",
                        "url": f"https://git.example/{ns}/{name}",
                        "ref": {"branch": "main"},
                    },
                    status={"artifact": artifact(new, f"sha256:{sha(new, 64)}")},
                )
            )
            obj = flux(
                "Kustomization",
                ns,
                name,
                gates,
                spec={
                    "interval": "10m",
                    "path": "./deploy/production",
                    "prune": True,
                    "sourceRef": {"kind": "GitRepository", "name": f"{name}-source"},
                },
                status={"lastAttemptedRevision": new, "lastAppliedRevision": old},
            )
            content = new
            obj = held(obj, gates, new, old, since)
        elif slot < 17:
            chart = {
                "chart": "podinfo",
                "version": "6.x",
                "sourceRef": {"kind": "HelmRepository", "name": "charts"},
            }
            digest = f"sha256:{sha(f'chart{i}', 64)}"
            labels = {names.HELM_NAME_LABEL: name, names.HELM_NAMESPACE_LABEL: ns}
            objects.append(
                flux(
                    "HelmChart",
                    ns,
                    f"{ns}-{name}",
                    spec=dict(chart, interval="1h"),
                    status={"artifact": artifact("6.6.0", digest)},
                )
            )
            objects[-1]["metadata"]["labels"] = labels
            values_new, values_old = (
                f"sha256:{sha(f'values-new{i}', 64)}",
                f"sha256:{sha(f'values-old{i}', 64)}",
            )
            obj = flux(
                "HelmRelease",
                ns,
                name,
                gates,
                spec={"interval": "10m", "chart": {"spec": chart}, "values": {"replicaCount": 2}},
                status={
                    names.LAST_ATTEMPTED_REVISION_FIELD: "6.6.0",
                    names.LAST_ATTEMPTED_CONFIG_DIGEST_FIELD: values_new,
                    "history": [{"chartVersion": "6.5.0", "configDigest": values_old}],
                },
            )
            content = f"chart podinfo 6.6.0@{digest} from HelmRepository/{ns}/charts (values {values_new})"
            obj = held(obj, gates, f"6.6.0 (values {values_new})", f"6.5.0 (values {values_old})", since)
        elif slot == 17:
            new = f"chart nginx 15.{i}.0@sha256:{sha(f'nginx{i}', 64)} from HelmRepository/{ns}/charts"
            old = f"chart nginx 15.0.0@sha256:{sha(f'nginx-old{i}', 64)} from HelmRepository/{ns}/charts"
            obj = flux(
                "HelmChart",
                ns,
                name,
                gates,
                spec={
                    "interval": "1h",
                    "chart": "nginx",
                    "sourceRef": {"kind": "HelmRepository", "name": "charts"},
                },
                status={"artifact": artifact("15.0.0", f"sha256:{sha(f'nginx-old{i}', 64)}")},
            )
            content = new
            obj = held(obj, gates, new, old, since)
        elif slot == 18:
            image = f"registry.example/{ns}/{name}"
            new, old = (
                f"{image}:1.{i}.1@sha256:{sha(f'img{i}', 64)}",
                f"{image}:1.{i}.0@sha256:{sha(f'imgold{i}', 64)}",
            )
            obj = flux(
                "ImagePolicy",
                ns,
                name,
                gates,
                spec={"imageRepositoryRef": {"name": name}, "policy": {"semver": {"range": "1.x"}}},
                status={
                    "latestRef": {
                        "name": image,
                        "tag": f"1.{i}.0",
                        "digest": f"sha256:{sha(f'imgold{i}', 64)}",
                    }
                },
            )
            content = new
            obj = held(obj, gates, new, old, since)
        else:
            new, old = f"sha256:{sha(f'bucket{i}', 64)}", f"sha256:{sha(f'bucketold{i}', 64)}"
            obj = flux(
                "Bucket",
                ns,
                name,
                gates,
                spec={"interval": "5m", "bucketName": name, "endpoint": "s3.example"},
                status={"artifact": artifact(old, old)},
            )
            content = new
            obj = held(obj, gates, new, old, since)
        if i % 10 == 7:
            obj["metadata"].setdefault("annotations", {})[names.SUSPEND_DURING_ANNOTATION] = SUSPENSIONS[
                (i // 10) % len(SUSPENSIONS)
            ]
        if i % 10 == 4:
            to_approve.append((gates[0], content, f"{obj['kind']}/{ns}/{name}"))
        objects.append(obj)
    return objects, to_approve


def world(
    gate_count: int, held_count: int, own: bool = False
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    gates, keepers = gates_world(gate_count, own)
    objects, to_approve = objects_world(held_count, gate_count) if gate_count else ([], [])
    by_key = {f"{g['metadata']['namespace']}/{g['metadata']['name']}": g for g in gates}
    for n, (key, content, target) in enumerate(to_approve):
        gate = by_key[key]
        policy, _ = approvals.parse_policy(gate["spec"])
        annotation = names.APPROVAL_ANNOTATION_PREFIX + approvals.new_id(content, target, str(n))
        raw = approvals.value(content, target, f"CHG-{n}: reviewed", None)
        secret = KEY if n % 2 == 0 else OTHER_KEY
        gate["metadata"]["annotations"][annotation] = approvals.stamp(
            raw,
            f"approver-{n % 7}@example.com",
            NOW - timedelta(minutes=5 + n % 30),
            timedelta(hours=24),
            frozenset(),
            (secret, gate["metadata"]["uid"], annotation),
            under=policy,
        )
    keyed = GateIndex(approval_key=KEY)  # the controller's: it writes every Gate's status
    keyed.replace_all(gates, keepers)
    for gate in gates:
        meta = gate["metadata"]
        state = keyed.lookup(meta["namespace"], meta["name"], NOW - timedelta(seconds=30))
        gate["status"] = {k: v for k, v in gate_status(gate, state, NOW).items() if v is not None}
    return gates, keepers, objects


def look(
    gates: list, keepers: list, objects: list, writable: bool, query: Query
) -> tuple[dict[str, float], str]:
    """A first look on the cluster board's path (a new index, the model, the page; nothing
    remembered), then the next look (a new index again, as each snapshot of the cluster source
    has: what the board remembers between looks is used). Seconds of each, CPU time of this
    process (the machine is shared, so wall time is kept apart, as ``wall``)."""
    clock = time.process_time
    board_timeline.forget()
    w0, t0 = time.perf_counter(), clock()
    index = GateIndex()
    index.replace_all(gates, keepers)
    t1 = clock()
    board = build(Snapshot(index, objects), NOW, query, VIEWER, "context bench", writable)
    t2 = clock()
    html = page(board, View("csrf-token-of-the-session"))
    t3, w3 = clock(), time.perf_counter()
    index = GateIndex()
    index.replace_all(gates, keepers)
    t4 = clock()
    board = build(Snapshot(index, objects), NOW, query, VIEWER, "context bench", writable)
    t5 = clock()
    again = page(board, View("csrf-token-of-the-session"))
    t6 = clock()
    assert again == html, "the next look drew another page of the same world"
    return {
        "index": t1 - t0,
        "build": t2 - t1,
        "render": t3 - t2,
        "wall": w3 - w0,
        "next index": t4 - t3,
        "next build": t5 - t4,
        "next render": t6 - t5,
    }, html


def one_look(gates: list, keepers: list, objects: list, writable: bool) -> str:
    """A first look and nothing else alive beside it: what the memory figures measure (what it
    leaves remembered is counted: it stays)."""
    board_timeline.forget()
    index = GateIndex()
    index.replace_all(gates, keepers)
    return page(
        build(Snapshot(index, objects), NOW, Query(), VIEWER, "context bench", writable), View("csrf")
    )


def medians(rounds: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}


def rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def slope(points: list[tuple[int, float]]) -> float:
    """Least squares: the cost of one more unit."""
    mx = statistics.mean(x for x, _ in points)
    my = statistics.mean(y for _, y in points)
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)


class _Source:
    """The cluster source without the API server: the same lists, a new index every snapshot."""

    where = "context bench"

    def __init__(self, gates: list, keepers: list, objects: list):
        self._lists = gates, keepers, objects

    def snapshot(self) -> Snapshot:
        gates, keepers, objects = self._lists
        index = GateIndex()
        index.replace_all(gates, keepers)
        return Snapshot(index, objects)


class _NoActions:
    def approve(self, *args: str) -> list[str]:
        raise Refused("the bench does not act")

    withdraw = toggle = approve


def through_app(gates: list, keepers: list, objects: list, writable: bool, times: int) -> dict[str, float]:
    actions = _NoActions() if writable else None
    app = board_app.create_app(
        _Source(gates, keepers, objects), actions, VIEWER, lambda: NOW, hosts=frozenset({"127.0.0.1:1"})
    )
    client = app.test_client()
    found: dict[str, list[float]] = {"/fragment": [], "/": []}
    wall: dict[str, list[float]] = {"/fragment": [], "/": []}
    sizes = {}
    for _ in range(times):
        for path in found:
            time.sleep(
                board_app.SNAPSHOT_TTL
            )  # each request reads a new snapshot, as a poll after the TTL does
            start, cpu = time.perf_counter(), time.process_time()
            answer = client.get(path, headers={"Host": "127.0.0.1:1"})
            found[path].append(time.process_time() - cpu)
            wall[path].append(time.perf_counter() - start)
            assert answer.status_code == 200, (path, answer.status_code, answer.data[:300])
            sizes[path] = len(answer.data)
    out = {path: statistics.median(v) for path, v in found.items()}
    out.update({f"{path} bytes": float(size) for path, size in sizes.items()})
    out.update({f"{path} wall": statistics.median(v) for path, v in wall.items()})
    return out


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gates", type=int, default=500)
    parser.add_argument("--held", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5, help="looks timed per size (the median is shown)")
    parser.add_argument(
        "--sizes", default="100,250", help="smaller gate counts for the cost per gate ('' : none)"
    )
    parser.add_argument("--app-requests", type=int, default=3, help="GETs of /fragment and / through the app")
    parser.add_argument(
        "--read-only", action="store_true", help="without the actions' forms (a --gates-dir board)"
    )
    parser.add_argument(
        "--own-schedules",
        action="store_true",
        help="no two gates with the same schedule (each GateKeeper named after its namespace too)",
    )
    args = parser.parse_args()
    writable = not args.read_only
    print(
        f"# {' '.join(['python'] + sys.argv)}  |  {platform.python_implementation()} {platform.python_version()}, "
        f"{platform.machine()}, {os.cpu_count()} cpus, single thread, {'writable' if writable else 'read-only'}"
        f"{', own schedules' if args.own_schedules else ''}"
    )
    load = os.getloadavg()[0]
    gates, keepers, objects = world(args.gates, args.held, args.own_schedules)

    # Memory first, on a process that has not looked yet: RSS growth of one look, then its
    # peak as tracemalloc counts it (which slows the look; not timed).
    gc.collect()
    before = rss_kib("VmRSS")
    one_look(gates, keepers, objects, writable)
    grown = rss_kib("VmHWM") - before
    gc.collect()
    tracemalloc.start()
    one_look(gates, keepers, objects, writable)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    board = build(
        _Source(gates, keepers, objects).snapshot(),
        NOW,
        Query(),
        VIEWER,
        "",
        writable,
    )
    spans = sum(len(r.timeline.spans) for r in board.gates)
    print(
        f"world: {len(board.gates)} gates ({len(keepers)} GateKeepers, {sum(not r.state.open for r in board.gates)} closed now), "
        f"{len(objects)} Flux objects, {len(board.held)} held rows ({sum(r['content'] is not None for r in board.held)} "
        f"approvable, {sum(bool(r['warnings']) for r in board.held)} with warnings, "
        f"{sum(len(r['approvals']) + len(r['unverifiedApprovals']) for r in board.held)} approvals shown), "
        f"{spans} timeline spans, {len(board.suspensions)} suspendDuring rows ({sum(len(s.windows) for s in board.suspensions)} windows)"
    )
    # Every variant is timed in each round, in turn: a slower minute of this shared machine
    # then weighs on all of them alike, and the slopes compare like with like.
    sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()} - {args.gates})
    variants: dict[str, tuple[list, list, list]] = {"full": (gates, keepers, objects)}
    for count in sizes:
        variants[f"{count} gates"] = world(count, args.held, args.own_schedules)
    if sizes:
        variants["no objects"] = (gates, keepers, [])
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    pages: dict[str, int] = {}
    for _ in range(args.rounds):
        for name, (g, k, o) in variants.items():
            gc.collect()
            found, page_html = look(g, k, o, writable, Query())
            rounds[name].append(found)
            pages[name] = len(page_html.encode())
            del page_html
    results = {name: medians(r) for name, r in rounds.items()}
    timed, size = results["full"], pages["full"]
    total = timed["index"] + timed["build"] + timed["render"]
    after = timed["next index"] + timed["next build"] + timed["next render"]
    print(
        f"first look, CPU time, median of {args.rounds}: index {ms(timed['index'])} + model {ms(timed['build'])} + "
        f"render {ms(timed['render'])} = {ms(total)} (wall {ms(timed['wall'])}; rounds {', '.join(ms(r['index'] + r['build'] + r['render']) for r in rounds['full'])})"
    )
    print(
        f"each look after it (a new index, what the board remembers used): index {ms(timed['next index'])} + "
        f"model {ms(timed['next build'])} + render {ms(timed['next render'])} = {ms(after)} "
        f"(rounds {', '.join(ms(r['next index'] + r['next build'] + r['next render']) for r in rounds['full'])})"
    )
    print(
        f"page {size / 1e6:.2f} MB ({size / max(args.gates, 1) / 1024:.1f} KiB a gate overall); memory: tracemalloc peak "
        f"{peak / 1e6:.1f} MB of one look, RSS growth {grown / 1024:.1f} MB (VmHWM after - VmRSS before), "
        f"RSS now {rss_kib('VmRSS') / 1024:.0f} MB"
    )
    if sizes:
        points = [(count, results[f"{count} gates"], pages[f"{count} gates"]) for count in sizes]
        points.append((args.gates, timed, size))
        for count, found, page_size in points:
            print(
                f"  {count:>5} gates, {args.held} held: index {ms(found['index'])}, model {ms(found['build'])}, "
                f"render {ms(found['render'])}, total {ms(found['index'] + found['build'] + found['render'])}, "
                f"page {page_size / 1e6:.2f} MB"
            )
        per = {key: slope([(c, f[key]) for c, f, _ in points]) for key in ("index", "build", "render")}
        print(
            f"per gate (slope over {', '.join(str(c) for c, _, _ in points)} gates): index {per['index'] * 1e6:.0f} us + "
            f"model {per['build'] * 1e6:.0f} us + render {per['render'] * 1e6:.0f} us = "
            f"{sum(per.values()) * 1e3:.2f} ms, {slope([(c, b) for c, _, b in points]) / 1024:.1f} KiB of page"
        )
        none = results["no objects"]
        held_cost = {k: (timed[k] - none[k]) / max(args.held, 1) for k in ("build", "render")}
        print(
            f"per held object ({args.gates} gates with {args.held} vs none): model {held_cost['build'] * 1e6:.0f} us + "
            f"render {held_cost['render'] * 1e6:.0f} us, {(size - pages['no objects']) / max(args.held, 1) / 1024:.1f} KiB of page"
        )
    if args.app_requests:
        found = through_app(gates, keepers, objects, writable, args.app_requests)
        print(
            f"through the app (test client, a new snapshot each, CPU time, median of {args.app_requests}): GET /fragment "
            f"{ms(found['/fragment'])} (wall {ms(found['/fragment wall'])}, {found['/fragment bytes'] / 1e6:.2f} MB), "
            f"GET / {ms(found['/'])} (wall {ms(found['/ wall'])}, {found['/ bytes'] / 1e6:.2f} MB)"
        )
    print(
        f"targets: under 1 s of server time: each look after the first {'met' if after < 1 else 'NOT met'} ({ms(after)}), "
        f"the first {'met' if total < 1 else 'NOT met'} ({ms(total)}); under 50 MB: "
        f"{'met' if max(peak / 1e6, grown / 1024) < 50 else 'NOT met'} (peak {peak / 1e6:.1f} MB, RSS growth {grown / 1024:.1f} MB)"
    )
    print(f"load average (1 min): {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
