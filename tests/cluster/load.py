"""A steady stream of Flux object writes through the real API server, from two identities, each
write judged against the verdict it should get: what an operation costs the people writing."""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from admission.core.base.names import CLOSE_ANNOTATION, OPEN_ANNOTATION
from tests.builders import gate
from tests.e2e.controlplane import ADMIN, ALICE
from tests.e2e.manifests import kustomization
from tests.polling import until

KUSTOMIZATIONS = "/apis/kustomize.toolkit.fluxcd.io/v1/namespaces/{namespace}/kustomizations/{name}"
# What the API server says when it could not get an answer from a webhook (failurePolicy Fail).
WEBHOOK_FAILURE = "failed calling webhook"
# Our reason when a pod's gate cache cannot be trusted (no working watch): the gate counts as closed.
GATE_STATE_UNKNOWN = "gate state unknown"


@dataclass(frozen=True)
class Target:
    """One object the load writes, and whether our webhook should refuse its spec changes."""

    namespace: str
    name: str
    held: bool
    gated: bool  # references a gate, so the API server calls the webhook for it


@dataclass
class Outcome:
    at: float
    target: Target
    status: int
    message: str

    @property
    def kind(self) -> str:
        """ok, wrong (a verdict we should not have given), unknown (refused because the webhook
        could not know the gate's state: failed closed), webhook (the API server could not get
        an answer from the webhook), apiserver (the API server itself did not answer)."""
        if self.status == 0 or self.status in (502, 503, 504) and WEBHOOK_FAILURE not in self.message:
            return "apiserver"
        if WEBHOOK_FAILURE in self.message:
            return "webhook"
        if self.status == 403 and " cannot patch resource " in self.message:
            return "apiserver"  # its authorizer's caches are still filling after a start
        if self.status == 403 and GATE_STATE_UNKNOWN in self.message and not self.target.held:
            return "unknown"  # failed closed: the webhook could not know the gate's state
        if self.target.held:
            return "ok" if self.status == 403 and " is held: " in self.message else "wrong"
        return "ok" if self.status == 200 else "wrong"


@dataclass
class Window:
    """The writes made while one operation ran, and what they saw."""

    name: str
    outcomes: list[Outcome] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    ended: float = 0.0

    def counts(self) -> Counter:
        return Counter(outcome.kind for outcome in self.outcomes)

    def failed(self, *, gated_only: bool = False) -> list[Outcome]:
        return [o for o in self.outcomes if o.kind != "ok" and (o.target.gated or not gated_only)]

    def recovery(self) -> float:
        """Seconds from the operation's start to the last write that did not get its verdict."""
        bad = [o.at for o in self.outcomes if o.kind != "ok"]
        return max(bad) - self.started if bad else 0.0

    def rate(self) -> float:
        return len(self.outcomes) / max(1e-9, (self.ended or time.monotonic()) - self.started)

    def summary(self) -> str:
        counts = self.counts()
        return (
            f"{self.name}: {len(self.outcomes)} writes in {self.ended - self.started:.0f}s "
            f"({self.rate():.1f}/s); webhook failures {counts['webhook']}, wrong verdicts {counts['wrong']}, "
            f"failed closed (gate state unknown) {counts['unknown']}, API server unavailable "
            f"{counts['apiserver']}; recovered {self.recovery():.1f}s after the start"
        )


class Writer(threading.Thread):
    """One identity's writes: a merge patch of ``spec.path`` on each target in turn, at ``rate``/s."""

    def __init__(self, load: WriteLoad, kubeconfig: Path, targets: list[Target], rate: float):
        super().__init__(daemon=True, name=f"writer-{kubeconfig.name}")
        config = yaml.safe_load(kubeconfig.read_text())
        server = config["clusters"][0]["cluster"]["server"]
        self.host, self.port = server.removeprefix("https://").rsplit(":", 1)
        self.tls = ssl.create_default_context(
            cafile=config["clusters"][0]["cluster"]["certificate-authority"]
        )
        self.token = config["users"][0]["user"]["token"]
        self.load, self.targets, self.interval = load, targets, 1.0 / rate
        self.conn: http.client.HTTPSConnection | None = None

    def patch(self, target: Target, path: str) -> tuple[int, str]:
        body = json.dumps({"spec": {"path": path}})
        for _ in range(2):  # a kept connection the API server closed meanwhile: once more on a new one
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPSConnection(
                        self.host, int(self.port), context=self.tls, timeout=30
                    )
                self.conn.request(
                    "PATCH",
                    KUSTOMIZATIONS.format(namespace=target.namespace, name=target.name),
                    body,
                    {"Authorization": f"Bearer {self.token}", "Content-Type": "application/merge-patch+json"},
                )
                response = self.conn.getresponse()
                text = response.read().decode(errors="replace")
                try:
                    message = json.loads(text).get("message", "") if response.status != 200 else ""
                except ValueError:
                    message = text[:500]
                return response.status, message
            except (OSError, http.client.HTTPException) as err:
                if self.conn is not None:
                    self.conn.close()
                self.conn = None
                last = str(err)
        return 0, last

    def run(self) -> None:
        turn = 0
        next_at = time.monotonic()
        while not self.load.stopping.is_set():
            target = self.targets[turn % len(self.targets)]
            status, message = self.patch(target, f"./deploy/{self.name}/{turn}")
            self.load.record(Outcome(time.monotonic(), target, status, message))
            turn += 1
            next_at += self.interval
            self.load.stopping.wait(max(0.0, next_at - time.monotonic()))


class WriteLoad:
    """Writers for two identities; `window(name)` collects what the writes saw meanwhile."""

    def __init__(self, writers: list[tuple[Path, list[Target]]], rate: float):
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.windows: list[Window] = []
        self.writers = [
            Writer(self, kubeconfig, targets, rate / len(writers)) for kubeconfig, targets in writers
        ]

    def record(self, outcome: Outcome) -> None:
        with self.lock:
            for window in self.windows:
                window.outcomes.append(outcome)

    def __enter__(self) -> WriteLoad:
        for writer in self.writers:
            writer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        for writer in self.writers:
            writer.join(60)

    @contextmanager
    def window(self, name: str) -> Iterator[Window]:
        window = Window(name)
        with self.lock:
            self.windows.append(window)
        try:
            yield window
        finally:
            with self.lock:
                self.windows.remove(window)
            window.ended = time.monotonic()


def targets(prefix: str) -> tuple[Target, Target, Target]:
    """Kustomizations in `apps` behind an open gate, behind a closed gate, and behind none."""
    return (
        Target("apps", f"{prefix}-open", held=False, gated=True),
        Target("apps", f"{prefix}-closed", held=True, gated=True),
        Target("apps", f"{prefix}-free", held=False, gated=False),
    )


@contextmanager
def steady_load(cluster, prefix: str, rate: float) -> Iterator[WriteLoad]:
    """The gates and Kustomizations of ``targets(prefix)`` made (the closed gate closed last), then
    writes to them from two identities at ``rate``/s, once every write gets its verdict."""
    opened, closed, free = targets(prefix)
    gates = [gate(t.name, annotations={OPEN_ANNOTATION: "2026-01-01T00:00:00Z"}) for t in (opened, closed)]
    made = until(
        lambda: cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(gates), check=False),
        lambda r: r.returncode == 0,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    for target in (opened, closed, free):
        manifest = kustomization(
            target.name, target.namespace, gates=f"flux-system/{target.name}" if target.gated else None
        )
        applied = until(
            lambda manifest=manifest: cluster.kubectl("apply", "-f", "-", input=manifest, check=False),
            lambda r: r.returncode == 0,
            timeout=60,
        )
        assert applied.returncode == 0, applied.stderr
    cluster.kubectl(
        "annotate",
        "gate",
        closed.name,
        "-n",
        "flux-system",
        "--overwrite",
        f"{OPEN_ANNOTATION}-",
        f"{CLOSE_ANNOTATION}=2026-06-01T00:00:00Z",
    )
    writers = [
        (cluster.kubeconfig(ADMIN), [opened, closed, free]),
        (cluster.kubeconfig(ALICE), [closed, free, opened]),
    ]
    with WriteLoad(writers, rate) as running:
        with running.window("warm-up") as warm:
            settled = until(
                lambda: warm.outcomes[-30:],
                lambda last: len(last) == 30 and all(o.kind == "ok" for o in last),
                timeout=90,
                interval=0.5,
            )
            assert all(o.kind == "ok" for o in settled), [
                (o.target.name, o.status, o.message) for o in settled
            ]
        yield running
