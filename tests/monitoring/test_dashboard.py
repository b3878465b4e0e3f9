"""The Grafana dashboard's queries, evaluated by promtool over our metrics as Prometheus stores
them: two real scrapes of `gate-admission serve` (each after a denied edit, a mutation and an
allowed creation), each sample given the target labels of two webhook Pods behind the shipped
ServiceMonitor, and two of the controller's, as two controller Pods behind the PodMonitor. The
gate table shows each gate by its own namespace and name, two same-named gates of two
namespaces apart, once however many Pods report them; a failing calendar counts once."""

from __future__ import annotations

import json

import pytest

from tests import ROOT
from tests.monitoring.conftest import run_expression_tests
from tests.scrapes import (
    CONTROLLER_TARGET,
    NAMESPACE,
    WEBHOOK_TARGET,
    as_scraped,
    controller_cache_scrape,
    promtool_value,
    series_selector,
    webhook_scrapes,
)

DASHBOARD = ROOT / "manifests" / "monitoring" / "grafana-dashboard.json"
PODS = ("gate-admission-7d9f-a", "gate-admission-7d9f-b")
CONTROLLER_PODS = ("gate-admission-controller-5c-a", "gate-admission-controller-5c-b")
# Panels a gates directory gives no data to, and why: no receiver is configured, Events need a
# cluster, and nothing failed.
EMPTY = {
    "Receiver calls and Events": "no receiver, no cluster",
    "Errors while judging (validate fails closed, mutate open)": "no review failed",
}
# The panels whose answer is checked whole: the closed-gate count, the gate table, the calendars
# failing (one, reported by both controller Pods).
EXACT = {
    "Closed gates": [{"labels": "{}", "value": 2}],
    "Calendars failing": [{"labels": "{}", "value": 1}],
    "Gates": [
        {"labels": '{gate="freeze",gate_namespace="team-a",reason="Default"}', "value": 0},
        {"labels": '{gate="freeze",gate_namespace="team-b",reason="Default"}', "value": 1},
        {"labels": '{gate="watch",gate_namespace="team-b",reason="Default"}', "value": 0},
    ],
}


def queries() -> list[tuple[str, str]]:
    """(panel title, query) of every target, with the namespace variable set as Grafana sets it."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [
        (panel["title"], target["expr"].replace("$namespace", NAMESPACE))
        for panel in panels
        for target in panel["targets"]
    ]


@pytest.fixture(scope="module")
def input_series(tmp_path_factory) -> list[dict]:
    """Both scrapes of each, one minute apart, as each of two Pods' series."""
    scraped = [
        (WEBHOOK_TARGET, PODS, 9443, webhook_scrapes(tmp_path_factory.mktemp("webhook"))),
        (CONTROLLER_TARGET, CONTROLLER_PODS, 8081, (controller_cache_scrape(), controller_cache_scrape())),
    ]
    series: dict[str, list[str]] = {}
    for given, pods, port, texts in scraped:
        for pod in pods:
            target = {**given, "pod": pod, "instance": f"{pod}:{port}"}
            for minute, text in enumerate(texts):
                for name, labels, value in as_scraped(text, target):
                    values = series.setdefault(series_selector(name, labels), ["_", "_"])
                    values[minute] = promtool_value(value)
    return [{"series": name, "values": " ".join(values)} for name, values in series.items()]


def test_the_dashboard_queries_answer_over_real_scrapes(promtool, tmp_path, input_series):
    tests = []
    for title, expr in queries():
        if title in EXACT:
            tests.append({"expr": expr, "eval_time": "1m", "exp_samples": EXACT[title]})
        elif title in EMPTY:
            tests.append({"expr": expr, "eval_time": "1m", "exp_samples": []})
        else:  # some answer: promtool wants exact samples, so ask whether there is any
            tests.append(
                {
                    "expr": f"count({expr}) > bool 0",
                    "eval_time": "1m",
                    "exp_samples": [{"labels": "{}", "value": 1}],
                }
            )
    assert {t for t, _ in queries()} >= set(EXACT) | set(EMPTY)
    run_expression_tests(promtool, tmp_path, input_series, tests)


def test_no_series_lost_a_label_to_the_target(input_series):
    # Prometheus keeps a clashing label of ours only as exported_<name>; none may clash.
    clashing = [s["series"] for s in input_series if "exported_" in s["series"]]
    assert not clashing, clashing[:3]
