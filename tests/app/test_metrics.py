"""/metrics: counters that move, gauges per gate, bounded labels, and a dashboard that matches."""

from __future__ import annotations

import json
import re
from pathlib import Path

import orjson

from admission.observability import metrics
from admission.store.files import FileStore
from admission.webhook.app import create_app
from tests.builders import changed, flux, gate, request, review

DASHBOARD = Path(__file__).resolve().parents[2] / "manifests" / "monitoring" / "grafana-dashboard.json"


def samples(client) -> dict[str, float]:
    text = client.get("/metrics").get_data(as_text=True)
    return {
        line.rpartition(" ")[0]: float(line.rpartition(" ")[2])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def post(client, doc):
    return client.post("/validate", data=orjson.dumps(doc), content_type="application/json")


DENIED = (
    'gate_admission_reviews_total{endpoint="validate",kind="Kustomization",mode="enforce",'
    'operation="UPDATE",verdict="denied"}'
)


def test_counters_and_gauges(make_client):
    client = make_client([gate("sre-approval", default="closed"), gate("qa-approval")])
    before = samples(client).get(DENIED, 0.0)
    obj = flux(gates="flux-system/sre-approval")
    assert (
        post(client, review(request("UPDATE", changed(obj, path="./b"), obj))).get_json()["response"][
            "allowed"
        ]
        is False
    )
    after = samples(client)
    assert after[DENIED] == before + 1
    assert (
        after['gate_admission_gate_open{name="sre-approval",namespace="flux-system",reason="Default"}'] == 0.0
    )
    assert (
        after['gate_admission_gate_open{name="qa-approval",namespace="flux-system",reason="Default"}'] == 1.0
    )
    assert after["gate_admission_gate_cache_ready"] == 1.0
    assert after['gate_admission_review_duration_seconds_count{endpoint="validate"}'] >= 1


def test_kinds_we_do_not_gate_do_not_become_labels(make_client):
    client = make_client()
    doc = review(request("CREATE", flux()))
    doc["request"]["kind"] = {"group": "evil", "version": "v1", "kind": "X" * 50}
    post(client, doc)
    text = client.get("/metrics").get_data(as_text=True)
    assert "X" * 50 not in text and 'kind="other"' in text


def test_every_metric_the_dashboard_queries_is_exported(make_client):
    client = make_client([gate("g")])
    post(client, review(request("CREATE", flux(gates="flux-system/g"))))
    exported = {re.sub(r"\{.*", "", name) for name in samples(client)}
    text = client.get("/metrics").get_data(as_text=True)
    exported |= set(re.findall(r"^# TYPE (\w+)", text, re.M))
    exprs = [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p["targets"]]
    queried = {name for expr in exprs for name in re.findall(r"gate_admission_\w+", expr)}
    assert queried, "the dashboard queries nothing"
    missing = {
        name
        for name in queried
        if name not in exported and re.sub(r"_(bucket|count|sum|total)$", "", name) not in exported
    }
    assert not missing, f"the dashboard queries metrics we do not export: {sorted(missing)}"


def _base(name: str) -> str:
    return re.sub(r"_(bucket|count|sum|total)$", "", name)


def test_every_label_the_dashboard_groups_or_filters_by_exists(make_client):
    # A panel that groups by a label the metric lacks draws one unlabelled line, silently.
    client = make_client([gate("g")])
    text = client.get("/metrics").get_data(as_text=True)
    labels: dict[str, set[str]] = {}
    for sample in re.findall(r"^(gate_admission_\w+)\{([^}]*)\}", text, re.M):
        labels.setdefault(_base(sample[0]), set()).update(re.findall(r"(\w+)=", sample[1]))
    for metric in vars(metrics).values():  # labelled metrics with no sample yet
        if hasattr(metric, "_labelnames") and hasattr(metric, "_name"):
            labels.setdefault(_base(metric._name), set()).update(metric._labelnames)
    scraped = {"namespace", "pod", "le"}  # added by Prometheus' scrape, or the histogram's own
    checked = 0
    for expr in (t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p["targets"]):
        grouped = {name.strip() for group in re.findall(r"by \(([^)]*)\)", expr) for name in group.split(",")}
        for metric, matchers in re.findall(r"(gate_admission_\w+)(?:\{([^}]*)\})?", expr):
            used = (set(re.findall(r"(\w+)=", matchers)) | grouped) - scraped
            unknown = used - labels.get(_base(metric), set())
            assert not unknown, f"{expr!r}: {metric} has no label {sorted(unknown)}"
            checked += 1
    assert checked


class BrokenStore(FileStore):
    """A gates directory whose lookup fails, as a bug would: the handler raises."""

    def lookup(self, namespace, name, now):
        raise RuntimeError("lookup exploded")


def test_a_failed_handler_is_an_error_fail_closed_on_validate_and_open_on_mutate(gates_dir):
    app = create_app(BrokenStore(gates_dir))
    app.testing = True
    client = app.test_client()
    obj = flux(gates="flux-system/g")
    doc = review(request("UPDATE", changed(obj, path="./b"), obj))
    errors = 'gate_admission_reviews_total{endpoint="validate",kind="Kustomization",mode="enforce",operation="UPDATE",verdict="error"}'
    before = samples(client).get(errors, 0.0)
    answer = post(client, doc).get_json()["response"]
    assert answer["allowed"] is False and answer["status"]["reason"] == "InternalError"
    assert answer["status"]["message"] == "gate-admission could not evaluate this request: lookup exploded"
    assert samples(client)[errors] == before + 1
    mutated = client.post("/mutate", data=orjson.dumps(doc), content_type="application/json").get_json()[
        "response"
    ]
    assert mutated["allowed"] is True and "lookup exploded" in mutated["warnings"][0]


def _reviews(client, endpoint: str, verdict: str, mode: str = "enforce", operation: str = "UPDATE") -> float:
    return samples(client).get(
        f'gate_admission_reviews_total{{endpoint="{endpoint}",kind="Kustomization",'
        f'mode="{mode}",operation="{operation}",verdict="{verdict}"}}',
        0.0,
    )


def test_mutate_counts_what_it_did_a_hold_is_denied_or_audited_once_at_validate(make_client):
    held = flux(gates="flux-system/sre-approval")
    doc = review(request("UPDATE", changed(held, path="./b"), held))
    for mode, validated, mutated in (("enforce", "denied", "allowed"), ("audit", "audited", "patched")):
        client = make_client([gate("sre-approval", default="closed", mode=mode)])
        before = {
            (e, v): _reviews(client, e, v, mode)
            for e in ("validate", "mutate")
            for v in ("denied", "audited", "allowed", "patched")
        }
        post(client, doc)
        client.post("/mutate", data=orjson.dumps(doc), content_type="application/json")
        moved = {key: _reviews(client, *key, mode) - value for key, value in before.items()}
        assert {key for key, delta in moved.items() if delta} == {
            ("validate", validated),
            ("mutate", mutated),
        }, (mode, moved)


def test_a_failed_mutation_counts_as_an_error(gates_dir):
    app = create_app(BrokenStore(gates_dir))
    client = app.test_client()
    obj = flux(gates="flux-system/g")
    doc = review(request("UPDATE", changed(obj, path="./b"), obj))
    errors = (
        'gate_admission_reviews_total{endpoint="mutate",kind="Kustomization",mode="enforce",'
        'operation="UPDATE",verdict="error"}'
    )
    before = samples(client).get(errors, 0.0)
    assert client.post("/mutate", data=orjson.dumps(doc), content_type="application/json").status_code == 200
    assert samples(client)[errors] == before + 1


def test_the_dashboard_counts_each_denied_or_audited_change_once():
    # Both webhooks see a held request; only the validating one decides it.
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel["targets"]:
            for matchers in re.findall(r"gate_admission_reviews_total\{([^}]*)\}", target["expr"]):
                if re.search(r'verdict=~?"[^"]*(denied|audited)', matchers):
                    assert 'endpoint="validate"' in matchers, (panel["title"], target["expr"])
