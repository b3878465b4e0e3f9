"""Real scrapes of our /metrics, and what Prometheus makes of them.

``webhook_scrapes`` runs `gate-admission serve` and scrapes it twice around some reviews;
``controller_scrape`` runs `gate-admission controller` (its API server unreachable: what it
serves then is what it always serves, less the gauges read from its caches) and scrapes it;
``controller_cache_scrape`` adds those gauges, from the controller in process with gates,
approvals and calendars in its cache. ``as_scraped`` gives a scrape the labels Prometheus gives
every sample of a target, renaming a scraped label of the same name ``exported_<name>`` as
Prometheus does without ``honorLabels``.
"""

from __future__ import annotations

import http.client
import json
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import orjson
import yaml
from prometheus_client.parser import text_string_to_metric_families

from admission.core.base import names
from tests.builders import changed, flux, gate, keeper, request, review
from tests.polling import wait_for

# The target labels the shipped ServiceMonitor (the webhook) and PodMonitor (the controller) give.
NAMESPACE = "gate-admission-system"
WEBHOOK_TARGET = {
    "job": "gate-admission",
    "namespace": NAMESPACE,
    "service": "gate-admission",
    "endpoint": "https",
    "container": "webhook",
}
CONTROLLER_TARGET = {
    "job": f"{NAMESPACE}/gate-admission-controller",
    "namespace": NAMESPACE,
    "endpoint": "health",
    "container": "controller",
}
# Two same-named gates in two namespaces, one closed: the gate table must keep them apart; and a
# closed gate in audit mode.
GATES = [
    gate("freeze", namespace="team-a", default="closed"),
    gate("freeze", namespace="team-b"),
    gate("watch", namespace="team-b", default="closed", mode="audit"),
]


def _post(server, path: str, doc: dict) -> None:
    status, _ = server.request("POST", path, orjson.dumps(doc))
    assert status == 200


def _reviews(server) -> None:
    """A denied edit (and its mutation) behind team-a's closed gate, an allowed creation behind team-b's,
    an audited edit behind team-b's gate in audit mode."""
    held = flux(namespace="team-a", gates="team-a/freeze")
    _post(server, "/validate", review(request("UPDATE", changed(held, path="./b"), held)))
    _post(server, "/mutate", review(request("UPDATE", changed(held, path="./b"), held)))
    _post(server, "/validate", review(request("CREATE", flux(namespace="team-b", gates="team-b/freeze"))))
    watched = flux(name="shop", namespace="team-b", gates="team-b/watch")
    _post(server, "/validate", review(request("UPDATE", changed(watched, path="./b"), watched)))


def webhook_scrapes(tmp: Path) -> tuple[str, str]:
    """Two scrapes of a real `gate-admission serve` (two workers) over GATES, each after the same
    reviews: every counter is in both, and has moved between them."""
    from tests.processes import serving_gates_dir

    with serving_gates_dir(tmp, GATES, "--workers", "2") as server:
        _reviews(server)
        first = _text(server)
        _reviews(server)
        return first, _text(server)


def _text(server) -> str:
    conn = server.connection()
    try:
        conn.request("GET", "/metrics")
        return conn.getresponse().read().decode()
    finally:
        conn.close()


@contextmanager
def _controller_process(tmp: Path):
    from tests.kube.test_health import controller

    with controller(tmp) as (_, port):
        yield port


def controller_scrape(tmp: Path) -> str:
    """A scrape of a real `gate-admission controller` process."""

    def get(port: int) -> str:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            conn.request("GET", "/metrics")
            response = conn.getresponse()
            assert response.status == 200
            return response.read().decode()
        finally:
            conn.close()

    with _controller_process(tmp) as port:
        return wait_for(lambda: get(port), timeout=30, what="the controller's /metrics")


def controller_cache_scrape() -> str:
    """The controller's exposition with a gate holding a live approval and a GateKeeper whose
    calendar failed after an earlier success, in its cache."""
    from admission.kube.scrape import collector
    from admission.observability import controllermetrics
    from tests.kube.test_approval_requests import setup
    from tests.kube.test_controller import NOW

    kube, ctl, cache = setup()
    kept = keeper("holidays", "freeze", calendars=[{"url": "https://feeds.example/a.ics"}])
    from admission.core.time.subscriptions import parse_calendars

    [cal] = parse_calendars(kept["spec"])
    kept["status"] = {
        "calendars": [
            {
                "url": cal.url,
                "specDigest": cal.digest,
                "lastFetchTime": "2026-06-10T11:59:00Z",
                "lastSuccessTime": "2026-06-10T10:00:00Z",
                "error": "503 Service Unavailable",
            }
        ]
    }
    cache.index.replace_all(kube.of(names.GATE_PLURAL), [kept])
    ctl.reconcile(NOW)
    body, _ = controllermetrics.exposition(
        collector(ctl.store, lambda: True, lambda: NOW + timedelta(seconds=1))
    )
    return body.decode()


def families(*texts: str) -> dict[str, set[str]]:
    """Each metric family's name (a counter's without ``_total``, as its TYPE line names it) and
    the label names its samples carry (a histogram's ``le`` included)."""
    found: dict[str, set[str]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            labels = found.setdefault(family.name, set())
            for sample in family.samples:
                labels.update(sample.labels)
    return found


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Every sample of a scrape: its name (``_total``, ``_bucket``... as exposed), labels, value."""
    return [
        (sample.name, dict(sample.labels), sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]


def as_scraped(text: str, target: dict[str, str]) -> list[tuple[str, dict[str, str], float]]:
    """The samples as Prometheus stores them from ``target``: its labels added, a scraped label
    that clashes with one of them renamed ``exported_<name>``."""
    stored = []
    for name, labels, value in samples(text):
        renamed = {(f"exported_{k}" if k in target else k): v for k, v in labels.items()}
        stored.append((name, {**renamed, **target}, value))
    return stored


def series_selector(name: str, labels: dict[str, str]) -> str:
    """A series as promtool's input_series names it."""
    inner = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def promtool_value(value: float) -> str:
    return "+Inf" if value == float("inf") else repr(float(value))


def prometheus_rule_groups(path: Path) -> dict:
    """A PrometheusRule's spec.groups as a Prometheus rule file."""
    return {"groups": yaml.safe_load(path.read_text())["spec"]["groups"]}
