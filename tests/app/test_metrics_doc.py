"""docs/operations.md, "Metrics and alerts", against what is exposed: every metric the webhook's
app and the controller serve is listed with its labels, nothing else is, and every alert of the
PrometheusRule has its paragraph saying what to do."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import yaml

from admission.pki import certs
from admission.store.files import FileStore
from admission.webhook.app import create_app
from tests import ROOT
from tests.builders import gate
from tests.conftest import write_gates
from tests.scrapes import controller_cache_scrape, families

OPERATIONS = ROOT / "docs" / "operations.md"
RULES = ROOT / "manifests" / "monitoring" / "prometheusrule.yaml"


def section() -> str:
    return OPERATIONS.read_text().split("\n## Metrics and alerts\n", 1)[1].split("\n## ", 1)[0]


def documented(which: str) -> dict[str, set[str]]:
    """The table after "The <which>'s:": each metric (its family name) and its labels."""
    table = section().split(f"\nThe {which}'s:\n", 1)[1].strip().split("\n\n", 1)[0]
    rows: dict[str, set[str]] = {}
    labels: set[str] = set()
    for line in table.splitlines()[2:]:
        name, given, _ = (cell.strip() for cell in line.strip("|").split("|"))
        if given != "as above":  # a label's values are said in brackets
            labels = set(re.findall(r"`(\w+)`", re.sub(r"\([^)]*\)", "", given)))
        rows[re.sub(r"_total$", "", name.strip("`"))] = labels
    return rows


def exposed_by_the_webhook(gates_dir, tmp_path) -> dict[str, set[str]]:
    write_gates(gates_dir, [gate("g")])
    files, _ = certs.ensure(str(tmp_path / "certs"), ["localhost"], datetime.now(UTC))
    client = create_app(FileStore(gates_dir), certfile=str(files.cert)).test_client()
    client.post("/validate", data=b"{}", content_type="application/json")
    found = families(client.get("/metrics").get_data(as_text=True))
    # prometheus_client's own process_* and python_* of the default registry: only in a single
    # process (these tests); the server's workers count into files, which carry ours alone.
    return {name: labels for name, labels in found.items() if name.startswith("gate_admission_")}


def _compare(doc: dict[str, set[str]], exposed: dict[str, set[str]]) -> None:
    assert sorted(doc) == sorted(exposed), "docs/operations.md lists other metrics than are exposed"
    for name, labels in exposed.items():
        if labels:  # a labelled metric without a sample yet shows no labels to compare
            assert doc[name] == labels - {"le"}, name


def test_every_webhook_metric_is_listed_with_its_labels(gates_dir, tmp_path):
    exposed = exposed_by_the_webhook(gates_dir, tmp_path)
    assert "gate_admission_certificate_expiry_timestamp_seconds" in exposed
    _compare(documented("webhook"), exposed)


def test_every_controller_metric_is_listed_with_its_labels():
    _compare(documented("controller"), families(controller_cache_scrape()))


def test_every_alert_has_its_paragraph_and_nothing_else_does():
    alerts = [
        rule["alert"]
        for group in yaml.safe_load(RULES.read_text())["spec"]["groups"]
        for rule in group["rules"]
        if "alert" in rule
    ]
    assert re.findall(r"^### (\w+)$", section(), re.M) == alerts
    for alert in alerts:  # each alert's description points at its paragraph
        assert f'"{alert}"' in RULES.read_text()
