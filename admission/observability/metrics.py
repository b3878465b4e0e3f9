"""Prometheus metrics: counters shared across gunicorn workers, gate gauges read at scrape time.

Counters and the latency histogram use prometheus_client's multiprocess mode when
PROMETHEUS_MULTIPROC_DIR is set (``serve`` sets it before the workers fork), so a scrape
that lands on any worker sees the sum over all of them. Per-gate gauges and the cache age
are computed when scraped, from the answering worker's own cache (every worker caches
every gate). The gate gauges name a gate ``gate_namespace`` and ``gate``: ``namespace`` (and
``pod``, ``instance``, ``job``) are the labels Prometheus gives the scraped target, and a
scraped label of the same name would be renamed ``exported_namespace`` (docs/decisions/0077).
"""

from __future__ import annotations

import functools
import os
import platform
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, Protocol

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily

from admission import __version__
from admission.core.gates.gates import GateState

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# Without this a single process (the controller; the webhook's app in tests) writes each
# counter's creation time as a `_created` series, which Prometheus stores as a gauge of its own.
# (prometheus_client leaves it unannotated.)
disable_created_metrics()  # type: ignore[no-untyped-call]

REVIEWS = Counter(
    "gate_admission_reviews_total",
    "Admission reviews answered.",
    ["webhook", "kind", "operation", "verdict", "mode"],
)
DURATION = Histogram(
    "gate_admission_review_duration_seconds",
    "Time to answer a review, decode to encode.",
    ["webhook"],
    buckets=(0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
)
HOLDS = Counter(
    "gate_admission_holds_total",
    "Held requests: edits of held objects, and new content (artifacts, images, attempts) held back.",
    ["kind", "held", "verdict"],
)  # held: edit|content; verdict: denied|audited|rewritten
RECEIVER = Counter("gate_admission_receiver_calls_total", "Calls to the open/close receiver.", ["result"])
EVENTS = Counter("gate_admission_denial_events_total", "Kubernetes Events for denials.", ["result"])
CALENDAR_BUILDS = Counter(
    "gate_admission_calendar_builds_total",
    "Calendar feeds built for GET /calendar.ics by the workers' builder processes.",
    ["result"],
)
ATTEMPTS_SHOWN = Counter(
    "gate_admission_denied_attempts_shown_total",
    "Denied attempts the webhook showed on their object (Approved=False).",
    ["result"],
)

IN_FLIGHT = Gauge(
    "gate_admission_reviews_in_flight",
    "Admission reviews being answered now, summed over the pod's workers.",
    ["webhook"],
    multiprocess_mode="livesum",
)


@functools.lru_cache(maxsize=1024)
def series(metric: Counter | Gauge | Histogram, *values: str) -> Any:
    """``metric.labels(*values)``, kept: ``labels`` checks each value and takes a lock on every
    call, twice or three times per review. Bounded like the series themselves: every label
    value we give comes from a closed set (kinds we gate, operations, verdicts, modes)."""
    return metric.labels(*values)


def build_info(component: str) -> GaugeMetricFamily:
    """``gate_admission_build_info``: 1, labelled with what runs (the webhook or the controller)."""
    info = GaugeMetricFamily(
        "gate_admission_build_info",
        "1, labelled with the component, its version and the Python it runs on.",
        labels=["component", "version", "python_version"],
    )
    info.add_metric([component, __version__, platform.python_version()], 1.0)
    return info


def certificate_expiry(certfile: str) -> GaugeMetricFamily | None:
    """When the serving certificate in ``certfile`` expires (the file as it is now: a rotation
    shows at the next scrape), or None when it cannot be read."""
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(open(certfile, "rb").read())  # noqa: SIM115
    except (OSError, ValueError):
        return None
    return GaugeMetricFamily(
        "gate_admission_certificate_expiry_timestamp_seconds",
        "When the serving certificate expires (Unix time).",
        value=cert.not_valid_after_utc.timestamp(),
    )


class _States(Protocol):
    def states(self, now: datetime) -> list[GateState]: ...


class Scraped(Protocol):
    """What a scrape reads of a gate store (admission.store.GateStore, a layer above this one)."""

    @property
    def index(self) -> _States: ...

    def readiness(self) -> tuple[bool, dict[str, Any]]: ...

    def cache_age(self, now_monotonic: float) -> float: ...


class GateCollector:
    """Gate state and cache freshness of this worker's store, computed when scraped."""

    def __init__(self, store: Scraped, clock: Callable[[], datetime], certfile: str | None = None):
        self.store, self.clock, self.certfile = store, clock, certfile

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = self.clock()
        yield build_info("webhook")
        if self.certfile:
            expiry = certificate_expiry(self.certfile)
            if expiry is not None:
                yield expiry
        gates = GaugeMetricFamily(
            "gate_admission_gate_open",
            "1 when the gate is open, 0 when closed.",
            labels=["gate_namespace", "gate", "reason"],
        )
        for state in self.store.index.states(now):
            gates.add_metric([state.namespace, state.name, state.reason], 1.0 if state.open else 0.0)
        yield gates
        ready, _ = self.store.readiness()
        yield GaugeMetricFamily(
            "gate_admission_gate_cache_ready",
            "1 when decisions can trust the gate cache.",
            value=1.0 if ready else 0.0,
        )
        yield GaugeMetricFamily(
            "gate_admission_gate_cache_age_seconds",
            "Seconds since the gate cache last heard it is current (watch or file check).",
            value=self.store.cache_age(time.monotonic()),
        )


def exposition(
    store: Scraped, clock: Callable[[], datetime], certfile: str | None = None
) -> tuple[bytes, str]:
    """The text exposition for a scrape: shared counters plus this worker's gate gauges (and the
    expiry of the serving certificate in ``certfile``, when given)."""
    if os.environ.get(MULTIPROC_ENV):
        from prometheus_client import multiprocess

        shared = CollectorRegistry()
        multiprocess.MultiProcessCollector(shared)
    else:
        shared = REGISTRY
    gates = CollectorRegistry()
    gates.register(GateCollector(store, clock, certfile))
    return generate_latest(shared) + generate_latest(gates), CONTENT_TYPE_LATEST


def worker_exited(pid: int) -> None:
    """gunicorn's child_exit hook: let multiprocess files of a dead worker be merged."""
    if os.environ.get(MULTIPROC_ENV):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)
