"""A test double of Flux notification-controller's event API: a real HTTP server on loopback.

It reads each POST the way notification-controller does (fluxcd/pkg ``apis/event`` ``Event``,
then its Alert matching and metadata clean-up), but strictly: an unknown or misspelt field, a
severity other than info/error/trace, a timestamp that is not RFC 3339, or a missing required
field is a 400, so a test sees any drift from Flux's JSON. Alerts are plain dicts
``{kind, name, namespace, eventSeverity}``. Used by tests/app/test_flux_notifications.py,
tests/e2e/test_cluster_gates.py and tests/e2e/test_hold_notifications.py.

Proven against the real one: tests/realflux/test_notifications.py sends our controller's events
through the real notification-controller (an Alert and a generic Provider) to an endpoint of
the test's.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

EVENT_FIELDS = {
    "involvedObject",
    "severity",
    "timestamp",
    "message",
    "reason",
    "metadata",
    "reportingController",
    "reportingInstance",
}
REQUIRED = {"involvedObject", "severity", "timestamp", "message", "reason", "reportingController"}
OBJECT_REFERENCE_FIELDS = {"kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath"}
SEVERITIES = {"info", "error", "trace"}


def decode(raw: bytes) -> dict:
    """The event, or ValueError saying what notification-controller would not understand."""
    event = json.loads(raw)
    if not isinstance(event, dict):
        raise ValueError("event must be a JSON object")
    if set(event) - EVENT_FIELDS:
        raise ValueError(f"unknown fields {sorted(set(event) - EVENT_FIELDS)}")
    if REQUIRED - set(event):
        raise ValueError(f"missing fields {sorted(REQUIRED - set(event))}")
    ref = event["involvedObject"]
    if (
        not isinstance(ref, dict)
        or set(ref) - OBJECT_REFERENCE_FIELDS
        or not {"kind", "name", "namespace"} <= set(ref)
    ):
        raise ValueError(f"involvedObject is not an ObjectReference with kind, name, namespace: {ref!r}")
    if event["severity"] not in SEVERITIES:
        raise ValueError(f"severity {event['severity']!r} is not one of {sorted(SEVERITIES)}")
    if not str(event["timestamp"]).endswith("Z"):
        raise ValueError("timestamp must be RFC 3339 in UTC, as metav1.Time marshals")
    datetime.fromisoformat(event["timestamp"][:-1] + "+00:00")
    meta = event.get("metadata", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise ValueError("metadata must map strings to strings")
    return event


def cleanup_metadata(event: dict) -> dict:
    """notification-controller keeps ``revision`` and the keys prefixed with the object's group (prefix removed)."""
    group = event["involvedObject"].get("apiVersion", "").rpartition("/")[0]
    out = {"revision": event["metadata"]["revision"]} if "revision" in event.get("metadata", {}) else {}
    for key, value in (event.get("metadata") or {}).items():
        if group and key.startswith(group + "/") and key != f"{group}/checksum":
            out[key[len(group) + 1 :]] = value
    return out


def matches(alert: dict, event: dict) -> bool:
    """notification-controller's Alert filter: kind, namespace, name (or *), and severity."""
    ref = event["involvedObject"]
    return (
        ref["kind"] == alert["kind"]
        and ref["namespace"] == alert.get("namespace")
        and alert.get("name", "*") in ("*", ref["name"])
        and alert.get("eventSeverity", "info") in ("info", event["severity"])
    )


class NotificationControllerDouble:
    """Records every event it accepted, which Alerts it would dispatch to, and what it refused."""

    def __init__(self, alerts: list[dict] = ()):
        self.alerts = list(alerts)
        self.received: list[dict] = []  # decoded events
        self.dispatched: list[tuple[dict, dict]] = []  # (alert, event with cleaned metadata)
        self.refused: list[str] = []
        double = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    event = decode(raw)
                except ValueError as err:
                    double.refused.append(str(err))
                    self.send_response(400)
                    self.end_headers()
                    return
                double.received.append(event)
                for alert in double.alerts:
                    if matches(alert, event):
                        double.dispatched.append((alert, {**event, "metadata": cleanup_metadata(event)}))
                self.send_response(202)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> NotificationControllerDouble:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
