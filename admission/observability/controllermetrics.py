"""The gate controller's Prometheus metrics, served at /metrics beside its probes.

The controller is one process, so its counters need no shared files; they sit in a registry
of their own, so that a process which also imports the webhook's metrics (the tests) shows each
set only where it belongs. What can be read from the controller's caches (leadership, calendar
freshness, the approvals still waiting to be used) is computed when scraped, as the webhook's
gate gauges are, and every replica reports it, not only the leader. Gates and GateKeepers are
named ``gate_namespace``/``gate`` and ``gatekeeper_namespace``/``gatekeeper``, never
``namespace``: Prometheus gives that label to the scraped Pod (docs/decisions/0077).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from admission.observability.metrics import build_info

REGISTRY = CollectorRegistry(auto_describe=True)

RECONCILE_REQUESTS = Counter(
    "gate_admission_controller_reconcile_requests",
    "Reconcile requests written on Flux objects (a gate opened, approved content, a suspension ended).",
    ["result"],
    registry=REGISTRY,
)  # result: requested|failed
CALENDAR_FETCHES = Counter(
    "gate_admission_controller_calendar_fetches",
    "GateKeeper calendar fetches by this process while it led.",
    ["result"],
    registry=REGISTRY,
)  # result: fetched|not_modified|failed
API_ERRORS = Counter(
    "gate_admission_controller_api_errors",
    "Calls to the API server that failed (network, TLS or an error status), by what they were for.",
    ["operation"],
    registry=REGISTRY,
)  # operation: gate_status|gatekeeper_status|approval_record|event|reconcile_request|secret|lease
APPROVALS = Counter(
    "gate_admission_controller_approvals",
    "Approvals of exact content announced (recorded), ended (used, expired) or withdrawn.",
    ["event"],
    registry=REGISTRY,
)  # event: recorded|used|expired|withdrawn

# Every value of the bounded labels, at 0 from the start: a rate over a series that appears
# only with its first failure misses that failure.
for _counter, _values in (
    (RECONCILE_REQUESTS, ("requested", "failed")),
    (CALENDAR_FETCHES, ("fetched", "not_modified", "failed")),
    (
        API_ERRORS,
        (
            "gate_status",
            "gatekeeper_status",
            "approval_record",
            "event",
            "reconcile_request",
            "secret",
            "lease",
        ),
    ),
    (APPROVALS, ("recorded", "used", "expired", "withdrawn")),
):
    for _value in _values:
        _counter.labels(_value)


def count_fetch(entry: Mapping[str, Any]) -> None:
    """Count one calendar fetch by the status entry it left: parsed at the fetch's own time
    (fetched), kept from before (a 304: not modified), or with an error (failed)."""
    parsed = entry.get("lastParseTime") == entry.get("lastFetchTime")
    CALENDAR_FETCHES.labels("failed" if entry.get("error") else "fetched" if parsed else "not_modified").inc()


@dataclass(frozen=True)
class CalendarFreshness:
    """One GateKeeper calendar as its status says: when it was last fetched well, whether its
    last fetch failed, and how long its intervals count after the last good fetch."""

    gatekeeper_namespace: str
    gatekeeper: str
    calendar: str
    last_success: datetime | None
    failing: bool
    stale_after_seconds: float


@dataclass(frozen=True)
class WaitingApprovals:
    """A gate's live approvals, not used yet, and when the first of them expires."""

    gate_namespace: str
    gate: str
    count: int
    next_expiry: datetime


class ControllerCollector:
    """The gauges read from the controller's state when scraped."""

    def __init__(
        self,
        leader: Callable[[], bool],
        calendars: Callable[[], Iterable[CalendarFreshness]],
        approvals: Callable[[], Iterable[WaitingApprovals]],
        notifications: Callable[[], Mapping[str, int]] | None = None,
    ):
        self.leader, self.calendars, self.approvals = leader, calendars, approvals
        self.notifications = notifications

    def collect(self) -> Iterator[Metric]:
        yield build_info("controller")
        yield GaugeMetricFamily(
            "gate_admission_controller_leader",
            "1 while this replica holds the Lease (acts), 0 while it stands by.",
            value=1.0 if self.leader() else 0.0,
        )
        keeper = ["gatekeeper_namespace", "gatekeeper", "calendar"]
        success = GaugeMetricFamily(
            "gate_admission_controller_calendar_last_success_timestamp_seconds",
            "When the calendar was last fetched and read well (Unix time); absent before the first time.",
            labels=keeper,
        )
        failing = GaugeMetricFamily(
            "gate_admission_controller_calendar_failing",
            "1 when the calendar's last fetch failed.",
            labels=keeper,
        )
        stale = GaugeMetricFamily(
            "gate_admission_controller_calendar_stale_after_seconds",
            "How long after its last good fetch the calendar still counts (its staleAfter); then its gates are Unknown (closed).",
            labels=keeper,
        )
        for cal in self.calendars():
            labels = [cal.gatekeeper_namespace, cal.gatekeeper, cal.calendar]
            if cal.last_success is not None:
                success.add_metric(labels, cal.last_success.timestamp())
            failing.add_metric(labels, 1.0 if cal.failing else 0.0)
            stale.add_metric(labels, cal.stale_after_seconds)
        yield from (success, failing, stale)
        gate = ["gate_namespace", "gate"]
        waiting = GaugeMetricFamily(
            "gate_admission_controller_approvals_waiting",
            "Live approvals not used yet, per gate.",
            labels=gate,
        )
        expiry = GaugeMetricFamily(
            "gate_admission_controller_approval_next_expiry_timestamp_seconds",
            "When the first of the gate's unused approvals expires (Unix time).",
            labels=gate,
        )
        for found in self.approvals():
            waiting.add_metric([found.gate_namespace, found.gate], float(found.count))
            expiry.add_metric([found.gate_namespace, found.gate], found.next_expiry.timestamp())
        yield from (waiting, expiry)
        sent = CounterMetricFamily(
            "gate_admission_controller_notifications",
            "Events for Flux's notification-controller: sent, failed (not delivered), aggregated "
            "(a repeat within the period) or dropped (the queue was full).",
            labels=["result"],
        )
        results = self.notifications() if self.notifications is not None else {}
        for result in ("sent", "failed", "aggregated", "dropped"):
            sent.add_metric([result], float(results.get(result, 0)))
        yield sent


def exposition(collector: ControllerCollector) -> tuple[bytes, str]:
    """The text exposition for a scrape of the controller."""
    scraped = CollectorRegistry()
    scraped.register(collector)
    return generate_latest(REGISTRY) + generate_latest(scraped), CONTENT_TYPE_LATEST
