"""The alerts of manifests/monitoring/prometheusrule.yaml, unit-tested by `promtool test rules`:
each fires when what it watches goes wrong, and only then. The input series are ours as
Prometheus stores them: every series a scenario feeds is checked against the metrics a real
webhook and a real controller expose (their names and labels) plus the target's labels."""

from __future__ import annotations

import re

import pytest
import yaml

from tests import ROOT
from tests.monitoring.conftest import run_promtool
from tests.scrapes import (
    CONTROLLER_TARGET,
    WEBHOOK_TARGET,
    controller_cache_scrape,
    controller_scrape,
    families,
    prometheus_rule_groups,
    series_selector,
    webhook_scrapes,
)

RULES = ROOT / "manifests" / "monitoring" / "prometheusrule.yaml"
DAY = 86400


def webhook(name: str, values: str, pod: str = "gate-admission-7d9f-a", **labels: str) -> dict:
    target = {**WEBHOOK_TARGET, "pod": pod, "instance": f"{pod}:9443"}
    return {"series": series_selector(name, {**labels, **target}), "values": values}


def controller(name: str, values: str, pod: str = "gate-admission-controller-5c-a", **labels: str) -> dict:
    target = {**CONTROLLER_TARGET, "pod": pod, "instance": f"{pod}:8081"}
    return {"series": series_selector(name, {**labels, **target}), "values": values}


def alert(name: str, at: str, *fired: dict[str, str]) -> dict:
    """``name`` at ``at`` fires once for each of ``fired`` (its labels), with the rule's annotations
    as Prometheus renders them for those labels."""
    return {
        "eval_time": at,
        "alertname": name,
        "exp_alerts": [
            {"exp_labels": labels, "exp_annotations": annotations(name, labels)} for labels in fired
        ],
    }


def annotations(name: str, labels: dict[str, str]) -> dict[str, str]:
    [rule] = [
        r for g in prometheus_rule_groups(RULES)["groups"] for r in g["rules"] if r.get("alert") == name
    ]
    return {
        key: re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], text)
        for key, text in rule["annotations"].items()
    }


WEBHOOK_POD = {"namespace": WEBHOOK_TARGET["namespace"], "pod": "gate-admission-7d9f-a"}
CALENDAR = {"gatekeeper_namespace": "flux-system", "gatekeeper": "holidays"}
GATE = {"gate_namespace": "team-a", "gate": "freeze"}

SCENARIOS = [
    {  # every webhook Pod stops answering at 5m: critical once that lasts 2 minutes
        "input_series": [
            webhook(
                "gate_admission_build_info",
                "1x4 stale",
                component="webhook",
                version="0.2.0",
                python_version="3.11.2",
            ),
            webhook(
                "gate_admission_build_info",
                "1x4 stale",
                pod="gate-admission-7d9f-b",
                component="webhook",
                version="0.2.0",
                python_version="3.11.2",
            ),
        ],
        "alert_rule_test": [
            alert("GateAdmissionWebhookDown", "4m"),
            alert("GateAdmissionWebhookDown", "6m"),  # not yet for 2 minutes
            alert("GateAdmissionWebhookDown", "9m", {"severity": "critical", "component": "webhook"}),
        ],
    },
    {  # one webhook Pod's gate cache goes untrusted at 3m; the other's ages past a minute at 10m
        "input_series": [
            webhook("gate_admission_gate_cache_ready", "1 1 1 0x20"),
            webhook("gate_admission_gate_cache_age_seconds", "1x20"),
            webhook("gate_admission_gate_cache_ready", "1x20", pod="gate-admission-7d9f-b"),
            webhook("gate_admission_gate_cache_age_seconds", "1x9 70x10", pod="gate-admission-7d9f-b"),
        ],
        "alert_rule_test": [
            alert("GateAdmissionGateCacheNotReady", "7m"),  # 4 minutes untrusted: not yet
            alert("GateAdmissionGateCacheNotReady", "9m", {"severity": "warning", **WEBHOOK_POD}),
            alert(
                "GateAdmissionGateCacheNotReady",
                "16m",
                {"severity": "warning", **WEBHOOK_POD},
                {"severity": "warning", **WEBHOOK_POD, "pod": "gate-admission-7d9f-b"},
            ),
        ],
    },
    {  # a gate is Unknown for 10 minutes; another is closed by its schedule, as it should be
        "input_series": [
            webhook("gate_admission_gate_open", "0x20", reason="Unknown", **GATE),
            webhook(
                "gate_admission_gate_open", "0x20", pod="gate-admission-7d9f-b", reason="Unknown", **GATE
            ),
            webhook(
                "gate_admission_gate_open", "0x20", reason="Scheduled", gate_namespace="team-b", gate="freeze"
            ),
        ],
        "alert_rule_test": [
            alert("GateAdmissionGateUnknown", "9m"),
            alert("GateAdmissionGateUnknown", "11m", {"severity": "warning", "reason": "Unknown", **GATE}),
        ],
    },
    {  # at 10m (time() = 600): calendar "a" failing since its last good fetch at 0, past its
        # staleAfter (300s); "b" failing within its grace; "c" failing and never fetched well;
        # "d" past its staleAfter but not failing (about to be fetched again)
        "input_series": [
            controller("gate_admission_controller_calendar_failing", "1x20", calendar="a", **CALENDAR),
            controller(
                "gate_admission_controller_calendar_last_success_timestamp_seconds",
                "0x20",
                calendar="a",
                **CALENDAR,
            ),
            controller(
                "gate_admission_controller_calendar_stale_after_seconds", "300x20", calendar="a", **CALENDAR
            ),
            controller("gate_admission_controller_calendar_failing", "1x20", calendar="b", **CALENDAR),
            controller(
                "gate_admission_controller_calendar_last_success_timestamp_seconds",
                "0x20",
                calendar="b",
                **CALENDAR,
            ),
            controller(
                "gate_admission_controller_calendar_stale_after_seconds", "7200x20", calendar="b", **CALENDAR
            ),
            controller("gate_admission_controller_calendar_failing", "1x20", calendar="c", **CALENDAR),
            controller(
                "gate_admission_controller_calendar_stale_after_seconds", "3600x20", calendar="c", **CALENDAR
            ),
            controller("gate_admission_controller_calendar_failing", "0x20", calendar="d", **CALENDAR),
            controller(
                "gate_admission_controller_calendar_last_success_timestamp_seconds",
                "0x20",
                calendar="d",
                **CALENDAR,
            ),
            controller(
                "gate_admission_controller_calendar_stale_after_seconds", "300x20", calendar="d", **CALENDAR
            ),
            # the standby replica reads the same status: one alert, not one per replica
            controller(
                "gate_admission_controller_calendar_failing",
                "1x20",
                pod="gate-admission-controller-5c-b",
                calendar="a",
                **CALENDAR,
            ),
        ],
        "alert_rule_test": [
            alert(
                "GateAdmissionCalendarFeedFailing", "4m", {"severity": "warning", "calendar": "c", **CALENDAR}
            ),
            alert(
                "GateAdmissionCalendarFeedFailing",
                "10m",
                {"severity": "warning", "calendar": "a", **CALENDAR},
                {"severity": "warning", "calendar": "c", **CALENDAR},
            ),
        ],
    },
    {  # an approval expires unused at 1h30m (5400s): announced from 30m on; another lasts a day
        "input_series": [
            controller(
                "gate_admission_controller_approval_next_expiry_timestamp_seconds", "5400x100", **GATE
            ),
            controller("gate_admission_controller_approvals_waiting", "1x100", **GATE),
            controller(
                "gate_admission_controller_approval_next_expiry_timestamp_seconds",
                f"{DAY}x100",
                gate_namespace="team-b",
                gate="freeze",
            ),
        ],
        "alert_rule_test": [
            alert("GateAdmissionApprovalExpiringUnused", "29m"),
            alert("GateAdmissionApprovalExpiringUnused", "31m", {"severity": "info", **GATE}),
        ],
    },
    {  # one Pod's serving certificate has 10 days left (its renewal failed); another's 60
        "input_series": [
            webhook("gate_admission_certificate_expiry_timestamp_seconds", f"{10 * DAY}x200"),
            webhook(
                "gate_admission_certificate_expiry_timestamp_seconds",
                f"{60 * DAY}x200",
                pod="gate-admission-7d9f-b",
            ),
        ],
        "alert_rule_test": [
            alert("GateAdmissionCertificateExpiring", "30m"),
            alert("GateAdmissionCertificateExpiring", "61m", {"severity": "warning", **WEBHOOK_POD}),
        ],
    },
    {  # both controller replicas stand by from 2m (the Lease cannot be renewed)
        "input_series": [
            controller("gate_admission_controller_leader", "1 1 0x20"),
            controller("gate_admission_controller_leader", "0x20", pod="gate-admission-controller-5c-b"),
            controller(
                "gate_admission_build_info",
                "1x20",
                component="controller",
                version="0.2.0",
                python_version="3.11.2",
            ),
        ],
        "alert_rule_test": [
            alert("GateAdmissionControllerNoLeader", "6m"),
            alert("GateAdmissionControllerNoLeader", "8m", {"severity": "warning"}),
        ],
    },
    {  # and no controller is scraped at all
        "input_series": [webhook("gate_admission_gate_cache_ready", "1x20")],
        "alert_rule_test": [
            alert(
                "GateAdmissionControllerNoLeader", "6m", {"severity": "warning", "component": "controller"}
            ),
        ],
    },
]


@pytest.fixture(scope="module")
def exposed(tmp_path_factory) -> dict[str, set[str]]:
    """Every metric family the webhook and the controller expose, with its labels."""
    first, second = webhook_scrapes(tmp_path_factory.mktemp("webhook"))
    return families(
        first, second, controller_scrape(tmp_path_factory.mktemp("controller")), controller_cache_scrape()
    )


def test_the_rules_are_valid(promtool, tmp_path):
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(prometheus_rule_groups(RULES)))
    run_promtool(promtool, "check", "rules", "rules.yaml", cwd=tmp_path)


def test_every_series_a_scenario_feeds_is_one_we_expose(exposed):
    for scenario in SCENARIOS:
        for series in scenario["input_series"]:
            name, labels = re.fullmatch(r"(\w+)\{(.*)\}", series["series"]).groups()
            label_names = set(re.findall(r"(\w+)=", labels))
            family = re.sub(r"_total$", "", name)
            assert family in exposed, f"{name}: not a metric we expose"
            target = WEBHOOK_TARGET if label_names >= set(WEBHOOK_TARGET) else CONTROLLER_TARGET
            ours = label_names - set(target) - {"pod", "instance"}
            assert ours <= exposed[family], f"{series['series']}: {sorted(ours - exposed[family])} not ours"


def test_every_alert_is_tested():
    rules = [r["alert"] for g in prometheus_rule_groups(RULES)["groups"] for r in g["rules"] if "alert" in r]
    tested = {test["alertname"] for scenario in SCENARIOS for test in scenario["alert_rule_test"]}
    assert set(rules) == tested and len(rules) == len(set(rules))


def test_the_alerts_fire_when_they_should_and_only_then(promtool, tmp_path):
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(prometheus_rule_groups(RULES)))
    tests = [{"interval": "1m", **scenario} for scenario in SCENARIOS]
    (tmp_path / "rules_test.yaml").write_text(
        yaml.safe_dump(
            {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests}, width=1000
        )
    )
    run_promtool(promtool, "test", "rules", "rules_test.yaml", cwd=tmp_path)


def test_a_wrong_expectation_fails(promtool, tmp_path):
    # The harness itself: promtool's failure reaches the test.
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(prometheus_rule_groups(RULES)))
    wrong = {
        **SCENARIOS[0],
        "alert_rule_test": [alert("GateAdmissionWebhookDown", "4m", {"severity": "critical"})],
    }
    (tmp_path / "rules_test.yaml").write_text(
        yaml.safe_dump({"rule_files": ["rules.yaml"], "tests": [{"interval": "1m", **wrong}]}, width=1000)
    )
    with pytest.raises(AssertionError, match="GateAdmissionWebhookDown"):
        run_promtool(promtool, "test", "rules", "rules_test.yaml", cwd=tmp_path)
