"""/metrics: counters that move, gauges per gate, bounded labels, and a dashboard that matches."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import orjson
from cryptography import x509

from admission.observability import controllermetrics, metrics
from admission.pki import certs
from admission.store.files import FileStore
from admission.webhook.app import create_app
from tests.builders import changed, flux, gate, request, review
from tests.scrapes import controller_cache_scrape

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
    'gate_admission_reviews_total{kind="Kustomization",mode="enforce",operation="UPDATE",verdict="denied",'
    'webhook="validate"}'
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
        after['gate_admission_gate_open{gate="sre-approval",gate_namespace="flux-system",reason="Default"}']
        == 0.0
    )
    assert (
        after['gate_admission_gate_open{gate="qa-approval",gate_namespace="flux-system",reason="Default"}']
        == 1.0
    )
    assert after["gate_admission_gate_cache_ready"] == 1.0
    assert after['gate_admission_review_duration_seconds_count{webhook="validate"}'] >= 1


def test_kinds_we_do_not_gate_do_not_become_labels(make_client):
    client = make_client()
    doc = review(request("CREATE", flux()))
    doc["request"]["kind"] = {"group": "evil", "version": "v1", "kind": "X" * 50}
    post(client, doc)
    text = client.get("/metrics").get_data(as_text=True)
    assert "X" * 50 not in text and 'kind="other"' in text


def test_every_metric_the_dashboard_queries_is_exported(make_client, gates_dir, tmp_path):
    client = make_client([gate("g")])
    post(client, review(request("CREATE", flux(gates="flux-system/g"))))
    exported = {re.sub(r"\{.*", "", name) for name in samples(client)}
    files, _ = certs.ensure(str(tmp_path), ["localhost"], datetime.now(UTC))
    serving = create_app(FileStore(gates_dir), certfile=str(files.cert)).test_client()
    # The webhook's (with its certificate) and the controller's.
    text = serving.get("/metrics").get_data(as_text=True) + controller_cache_scrape()
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
    text = client.get("/metrics").get_data(as_text=True) + controller_cache_scrape()
    labels: dict[str, set[str]] = {}
    for sample in re.findall(r"^(gate_admission_\w+)\{([^}]*)\}", text, re.M):
        labels.setdefault(_base(sample[0]), set()).update(re.findall(r"(\w+)=", sample[1]))
    for metric in [*vars(metrics).values(), *vars(controllermetrics).values()]:  # none sampled yet
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


# What Prometheus adds to every sample it scrapes from a Pod (the ServiceMonitor's and the
# PodMonitor's target labels): a scraped label of the same name would be renamed exported_<name>.
TARGET_LABELS = {"namespace", "pod", "instance", "job", "service", "container", "endpoint"}


def test_no_label_we_export_is_one_prometheus_gives_the_target(make_client):
    client = make_client([gate("g", namespace="team-a"), gate("g", namespace="team-b")])
    post(client, review(request("CREATE", flux(gates="flux-system/g"))))
    text = client.get("/metrics").get_data(as_text=True)
    used = {
        label
        for labels in re.findall(r"^gate_admission_\w+\{([^}]*)\}", text, re.M)
        for label in re.findall(r"(\w+)=", labels)
    }
    assert used and not used & TARGET_LABELS, sorted(used & TARGET_LABELS)
    # Same-named gates of two namespaces stay two series.
    assert 'gate_admission_gate_open{gate="g",gate_namespace="team-a",reason="Default"} 1.0' in text
    assert 'gate_admission_gate_open{gate="g",gate_namespace="team-b",reason="Default"} 1.0' in text


def test_build_info_names_the_webhook_and_its_version(make_client):
    from admission import __version__

    text = make_client().get("/metrics").get_data(as_text=True)
    [line] = [line for line in text.splitlines() if line.startswith("gate_admission_build_info{")]
    assert 'component="webhook"' in line and f'version="{__version__}"' in line and line.endswith(" 1.0")


class InFlightStore(FileStore):
    """A gates directory that scrapes the in-flight gauge while a review is being answered."""

    seen: list[float]

    def lookup(self, namespace, name, now):
        self.seen.append(metrics.IN_FLIGHT.labels("validate")._value.get())
        return super().lookup(namespace, name, now)


def test_the_in_flight_gauge_counts_a_review_while_it_is_answered(gates_dir):
    store = InFlightStore(gates_dir)
    store.seen = []
    client = create_app(store).test_client()
    obj = flux(gates="flux-system/g")
    post(client, review(request("UPDATE", changed(obj, path="./b"), obj)))
    assert store.seen and set(store.seen) == {1.0}  # (each gate the review names is looked up)
    assert samples(client)['gate_admission_reviews_in_flight{webhook="validate"}'] == 0.0


def test_the_serving_certificate_expiry_is_exported(gates_dir, tmp_path):
    files, _ = certs.ensure(str(tmp_path), ["localhost"], datetime.now(UTC))
    expires = x509.load_pem_x509_certificate(files.cert.read_bytes()).not_valid_after_utc.timestamp()
    client = create_app(FileStore(gates_dir), certfile=str(files.cert)).test_client()
    assert samples(client)["gate_admission_certificate_expiry_timestamp_seconds"] == expires
    unreadable = create_app(FileStore(gates_dir), certfile=str(tmp_path / "missing.crt")).test_client()
    assert "gate_admission_certificate_expiry_timestamp_seconds" not in unreadable.get("/metrics").get_data(
        as_text=True
    )


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
    errors = 'gate_admission_reviews_total{kind="Kustomization",mode="enforce",operation="UPDATE",verdict="error",webhook="validate"}'
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
        f'gate_admission_reviews_total{{kind="Kustomization",'
        f'mode="{mode}",operation="{operation}",verdict="{verdict}",webhook="{endpoint}"}}',
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
        'gate_admission_reviews_total{kind="Kustomization",mode="enforce",'
        'operation="UPDATE",verdict="error",webhook="mutate"}'
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
                    assert 'webhook="validate"' in matchers, (panel["title"], target["expr"])
