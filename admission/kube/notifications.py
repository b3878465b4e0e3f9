"""Events for Flux's notification-controller: the JSON the Flux controllers POST to its event API.

So a user's existing ``Alert`` for a Kustomization, HelmRelease, source or ImagePolicy fires
when a change to it is held or released. The body is Flux's event API (fluxcd/pkg
``apis/event`` ``Event``): ``involvedObject``, ``severity`` (``info``|``error``|``trace``),
``timestamp``, ``message``, ``reason``, ``metadata``, ``reportingController``,
``reportingInstance``. notification-controller keeps only metadata keys prefixed with the
involved object's API group (and strips the prefix), so ours are prefixed that way.

Sending never blocks the caller: events are queued and POSTed by a background thread, and
one object with one message is sent once per ``period`` (as Kubernetes aggregates Events;
notification-controller itself answers 429 to such duplicates within its own window).
"""

from __future__ import annotations

import logging
import queue
import urllib.error
import urllib.request
from datetime import datetime

import orjson

from admission.background import BackgroundThread
from admission.core.base import names
from admission.core.base.objects import Object, label, metadata
from admission.core.base.timefmt import format_time

log = logging.getLogger("admission.notifications")
DEFAULT_ADDRESS = "http://notification-controller.flux-system.svc.cluster.local./"
CONTROLLER = "gate-admission-controller"
MAX_NOTIFICATION_MESSAGE = 39_000  # notification-controller's event API: its documented maximum
INFO = "info"


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0] if "/" in api_version else ""


def event_body(
    obj: Object,
    reason: str,
    message: str,
    details: dict[str, str],
    now: datetime,
    instance: str | None = None,
    severity: str = INFO,
) -> Object:
    """The event notification-controller accepts for ``obj``; ``details`` keys get its group prefix."""
    meta = metadata(obj)
    api_version = str(obj.get("apiVersion") or "")
    group = _group(api_version)
    reference = {
        "apiVersion": api_version,
        "kind": obj.get("kind"),
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "resourceVersion": meta.get("resourceVersion"),
    }
    body = {
        "involvedObject": {k: v for k, v in reference.items() if v},
        "severity": severity,
        "timestamp": format_time(now),
        "message": message[:MAX_NOTIFICATION_MESSAGE],
        "reason": reason,
        "metadata": {f"{group}/{key}" if group else key: value for key, value in details.items()},
        "reportingController": CONTROLLER,
    }
    if instance:
        body["reportingInstance"] = instance
    return body


class FluxNotifier:
    """Aggregates and queues events; a background thread POSTs them to notification-controller."""

    def __init__(
        self,
        address: str = DEFAULT_ADDRESS,
        gates_address: str | None = None,
        instance: str | None = None,
        period: float = 300.0,
        timeout: float = 5.0,
        max_queue: int = 1000,
    ):
        self.address = address
        self.gates_address = gates_address or address
        self.instance = instance
        self.period = period
        self.timeout = timeout
        self.queue: queue.Queue[tuple[str, Object]] = queue.Queue(max_queue)
        self.sent: dict[tuple[object, ...], datetime] = {}  # (object, message) -> when last sent
        self.results = {"sent": 0, "aggregated": 0, "dropped": 0, "failed": 0}
        self._background = BackgroundThread("flux-notifications")

    def notify(
        self,
        obj: Object,
        reason: str,
        message: str,
        details: dict[str, str],
        now: datetime,
        address: str | None = None,
    ) -> bool:
        """Queue one event about ``obj``; False when it repeats one sent within the period, or the queue is full."""
        meta = metadata(obj)
        key = (obj.get("apiVersion"), obj.get("kind"), meta.get("namespace"), meta.get("name"), message)
        last = self.sent.get(key)
        if last is not None and (now - last).total_seconds() < self.period:
            self.results["aggregated"] += 1
            return False
        body = event_body(obj, reason, message, details, now, self.instance)
        try:
            self.queue.put_nowait((address or self.address, body))
        except queue.Full:
            self.results["dropped"] += 1
            return False
        self.sent[key] = now
        if len(self.sent) > 10_000:  # bounded: forget what is older than a period
            self.sent = {k: t for k, t in self.sent.items() if (now - t).total_seconds() < self.period}
        return True

    def gate_transition(
        self, gate: Object, opened: bool, message: str, details: dict[str, str], now: datetime
    ) -> bool:
        """A gate opened or closed (involved object: the Gate)."""
        return self.notify(
            gate,
            names.GATE_OPENED_EVENT if opened else names.GATE_CLOSED_EVENT,
            message,
            details,
            now,
            self.gates_address,
        )

    def post(self, address: str, body: Object) -> int:
        """POST one event; the HTTP status (raises OSError when the address cannot be reached)."""
        request = urllib.request.Request(
            address, data=orjson.dumps(body), method="POST", headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310 (an address we are given)
                status: int = response.status  # urlopen's answer is untyped: an HTTPResponse here
                return status
        except urllib.error.HTTPError as err:
            return err.code

    def run(self) -> None:
        while not self._background.stopped.is_set():
            try:
                address, body = self.queue.get(timeout=0.5)
            except queue.Empty:
                continue
            try:
                status = self.post(address, body)
                # 429: notification-controller already has this event from its own rate limit window.
                ok, failure = status < 300 or status == 429, str(status)
            except (OSError, ValueError) as err:
                ok, failure = False, str(err)
            self.results["sent" if ok else "failed"] += 1
            if not ok:
                log.warning(
                    "notification not delivered",
                    extra={
                        "address": address,
                        "error": failure,
                        "reason": body["reason"],
                        "object": label(
                            *(body["involvedObject"].get(k) for k in ("kind", "namespace", "name"))
                        ),
                    },
                )

    def start(self) -> None:
        self._background.start(self.run)

    def stop(self) -> None:
        self._background.stop()
