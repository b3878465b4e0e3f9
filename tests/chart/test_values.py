"""The chart's values beyond what manifests/ can say: every object labelled as Helm
charts are, names and the binaries' flags that repeat them, placement, images, the disruption
budgets and the priority quota; each rendered by the real helm and read back."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.chart.test_chart import (
    CHART,
    NS,
    STANDARD_LABELS,
    containers_of,
    named,
    template_args,
)

EVERYTHING = (
    "receiver.enabled=true",
    "calendarToken.enabled=true",
    "board.enabled=true",
    "fluxNotifications.enabled=true",
    "monitoring.serviceMonitor.enabled=true",
    "monitoring.dashboard.enabled=true",
    "namespace.create=true",
)


def pod_templates(docs: list[dict]) -> list[tuple[str, dict]]:
    found = []
    for d in docs:
        spec = d.get("spec", {})
        template = spec.get("template") or spec.get("jobTemplate", {}).get("spec", {}).get("template")
        if template:
            found.append((f"{d['kind']}/{d['metadata']['name']}", template))
        elif d["kind"] == "Pod":
            found.append((f"Pod/{d['metadata']['name']}", d))
    return found


def render(helm, *sets: str, namespace: str = NS) -> list[dict]:
    """`helm template` with ``sets``: every object, hooks included."""
    out = helm(*template_args(sets, namespace, None)).stdout
    return [d for d in yaml.safe_load_all(out) if d]


@pytest.mark.parametrize("source", ["job", "cert-manager"])
def test_every_object_and_pod_is_labelled(helm, source):
    docs = render(
        helm,
        *EVERYTHING,
        f"certificates.source={source}",
        "commonLabels.team=platform",
        "commonAnnotations.owner=platform@example.org",
        "podLabels.cost-centre=c42",
        "podAnnotations.sidecar=off",
    )
    assert len(docs) > 30
    for d in docs:
        what = f"{d['kind']}/{d['metadata']['name']}"
        labels = d["metadata"].get("labels", {})
        assert STANDARD_LABELS <= set(labels), (what, STANDARD_LABELS - set(labels))
        assert labels["app.kubernetes.io/instance"] == "gate-admission", what
        assert labels["app.kubernetes.io/managed-by"] == "Helm", what
        assert labels["helm.sh/chart"] == "gate-admission-0.2.0", what
        assert labels["team"] == "platform", what
        assert d["metadata"].get("annotations", {}).get("owner") == "platform@example.org", what
    templates = pod_templates(docs)
    assert len(templates) >= 2
    for owner, template in templates:
        labels = template["metadata"]["labels"]
        assert {"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component"} <= set(
            labels
        ), owner
        assert labels["cost-centre"] == "c42" and template["metadata"]["annotations"]["sidecar"] == "off", (
            owner
        )


def test_selectors_carry_the_instance_and_select_their_pods(helm):
    docs = render(helm, *EVERYTHING, "podLabels.extra=x", "commonLabels.team=platform")
    pods = {name: t["metadata"]["labels"] for name, t in pod_templates(docs)}
    webhook = pods["Deployment/gate-admission"]
    for d in docs:
        selector = (d.get("spec") or {}).get("selector")
        if d["kind"] == "Service":
            selector = {"matchLabels": selector}
        if d["kind"] == "NetworkPolicy":
            selector = d["spec"]["podSelector"]
        if not isinstance(selector, dict):
            continue
        labels = selector["matchLabels"]
        what = f"{d['kind']}/{d['metadata']['name']}"
        assert labels["app.kubernetes.io/instance"] == "gate-admission", what
        assert not {"extra", "team", "app.kubernetes.io/version", "helm.sh/chart"} & set(labels), what
        if labels.get("app.kubernetes.io/component") == "webhook":
            assert labels.items() <= webhook.items(), what
    deployment = named(docs, "Deployment", "gate-admission")
    assert deployment["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "gate-admission",
        "app.kubernetes.io/instance": "gate-admission",
        "app.kubernetes.io/component": "webhook",
    }


def test_another_release_name_keeps_the_object_names_and_selects_by_instance(helm):
    docs = [
        d
        for d in yaml.safe_load_all(
            helm("template", "platform-gates", str(CHART), "-n", NS, "--set", "receiver.enabled=true").stdout
        )
        if d
    ]
    names = {d["metadata"]["name"] for d in docs}
    assert {"gate-admission", "gate-admission-controller", "gate-admission-certs"} <= names
    deployment = named(docs, "Deployment", "gate-admission")
    assert deployment["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"] == "platform-gates"


def test_fullname_override_renames_every_object_and_tells_the_binaries(helm):
    docs = render(
        helm, *EVERYTHING, "fullnameOverride=gates", "nameOverride=gatekeeping", namespace="platform"
    )
    for d in docs:
        if d["kind"] in ("Namespace", "CustomResourceDefinition"):
            continue
        assert d["metadata"]["name"].startswith("gates"), (d["kind"], d["metadata"]["name"])
        assert d["metadata"]["labels"]["app.kubernetes.io/name"] == "gatekeeping"
    text = yaml.safe_dump_all([d for d in docs if d["kind"] != "ConfigMap"])  # (the dashboard's own JSON)
    # Left as they are: the chart's own name and version, and the token Secrets you create, named by values.
    for kept in ("gate-admission-0.2.0", "gate-admission-receiver-token", "gate-admission-calendar-token"):
        text = text.replace(kept, "")
    assert "gate-admission-" not in text, [line for line in text.splitlines() if "gate-admission-" in line][
        :5
    ]
    containers = dict(containers_of(docs))
    certs = containers["Job/gates-certs-init-1"]["args"]
    assert {
        "--service=gates",
        "--secret=gates-tls",
        "--approval-key-secret=gates-approval-key",
        "--webhook-config=gates",
    } <= set(certs)
    assert "--lease-name=gates-controller" in containers["Deployment/gates-controller"]["args"]
    for hook in named(docs, "ValidatingWebhookConfiguration", "gates")["webhooks"]:
        assert hook["clientConfig"]["service"]["name"] == "gates"
    policy = named(docs, "ValidatingAdmissionPolicy", "gates-controller-writes")
    assert (
        "system:serviceaccount:platform:gates-controller"
        in policy["spec"]["matchConditions"][0]["expression"]
    )


@pytest.mark.parametrize(
    ("sets", "image"),
    [
        ((), "gate-admission:0.2.0"),  # the tag defaults to the chart's appVersion
        (
            ("image.registry=registry.example:5000/platform", "image.tag=1.2.3"),
            "registry.example:5000/platform/gate-admission:1.2.3",
        ),
        (("image.digest=sha256:" + "ab" * 32, "image.tag=1.2.3"), "gate-admission@sha256:" + "ab" * 32),
    ],
)
def test_the_image_from_registry_repository_tag_or_digest(helm, sets, image):
    containers = containers_of(render(helm, *sets))
    assert len(containers) == 6  # the Deployments, the certificate Job and CronJobs, the upgrade hook
    assert {c["image"] for _, c in containers} == {image}


def test_placement_reaches_every_pod(helm, tmp_path):
    values = tmp_path / "placement.yaml"
    toleration = {"key": "dedicated", "operator": "Equal", "value": "platform", "effect": "NoSchedule"}
    spread = {
        "maxSkew": 1,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": "{{ .Release.Name }}"}},
    }
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["system"]}]}
                ]
            }
        }
    }
    values.write_text(
        yaml.safe_dump(
            {
                "imagePullSecrets": [{"name": "my-registry"}],
                "nodeSelector": {"kubernetes.io/os": "linux", "pool": "system"},
                "tolerations": [toleration],
                "server": {"affinity": affinity, "topologySpreadConstraints": [spread]},
                "controller": {"topologySpreadConstraints": [spread]},
            }
        )
    )
    docs = [d for d in yaml.safe_load_all(helm(*template_args((), NS, None), "-f", str(values)).stdout) if d]
    templates = dict(pod_templates(docs))
    assert len(templates) == 7  # and the upgrade hook's Job and the helm test Pod
    for owner, template in templates.items():
        spec = template["spec"]
        assert spec["imagePullSecrets"] == [{"name": "my-registry"}], owner
        assert spec["nodeSelector"] == {"kubernetes.io/os": "linux", "pool": "system"}, owner
        assert spec["tolerations"] == [toleration], owner
    webhook = templates["Deployment/gate-admission"]["spec"]
    assert webhook["affinity"] == affinity  # replaces the default anti-affinity
    rendered = {**spread, "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": "gate-admission"}}}
    assert webhook["topologySpreadConstraints"] == [rendered]
    assert templates["Deployment/gate-admission-controller"]["spec"]["topologySpreadConstraints"] == [
        rendered
    ]
    default = dict(pod_templates(render(helm)))
    assert all(t["spec"]["nodeSelector"] == {"kubernetes.io/os": "linux"} for t in default.values())
    anti = default["Deployment/gate-admission"]["spec"]["affinity"]["podAntiAffinity"]
    term = anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert term["labelSelector"]["matchLabels"]["app.kubernetes.io/instance"] == "gate-admission"


def test_extra_args_env_log_level_and_service_account_annotations(helm):
    docs = render(
        helm,
        "logLevel=debug",
        "server.extraArgs={--stale-after=30}",
        "server.extraEnv[0].name=HTTPS_PROXY",
        "server.extraEnv[0].value=http://proxy:3128",
        "controller.extraArgs={--notify-period=60}",
        "serviceAccount.annotations.iam\\.example/role=gates",
    )
    containers = dict(containers_of(docs))
    webhook, controller = (
        containers["Deployment/gate-admission"],
        containers["Deployment/gate-admission-controller"],
    )
    assert webhook["args"][-1] == "--stale-after=30" and controller["args"][-1] == "--notify-period=60"
    for container in (webhook, controller):
        assert {"name": "GATE_ADMISSION_LOG_LEVEL", "value": "debug"} in container["env"]
    assert {"name": "HTTPS_PROXY", "value": "http://proxy:3128"} in webhook["env"]
    accounts = [d for d in docs if d["kind"] == "ServiceAccount"]
    assert len(accounts) == 4  # the webhook's, the controller's, the certificate Jobs', the upgrade hook's
    assert all(a["metadata"]["annotations"]["iam.example/role"] == "gates" for a in accounts)


def budgets(docs: list[dict]) -> dict[str, dict]:
    return {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "PodDisruptionBudget"}


def test_one_replica_never_blocks_a_node_drain(helm):
    one = budgets(render(helm, "server.replicas=1", "controller.replicas=1"))
    assert {n: b.get("maxUnavailable") for n, b in one.items()} == {
        "gate-admission": 1,
        "gate-admission-controller": 1,
    }
    assert all("minAvailable" not in b for b in one.values())
    three = budgets(render(helm, "server.replicas=3", "server.podDisruptionBudget.minAvailable=2"))
    assert three["gate-admission"]["minAvailable"] == 2 and "maxUnavailable" not in three["gate-admission"]
    assert budgets(render(helm, "controller.podDisruptionBudget.enabled=false")).keys() == {"gate-admission"}


@pytest.mark.parametrize(
    ("sets", "words"),
    [
        (
            ("server.replicas=1", "server.podDisruptionBudget.minAvailable=1"),
            "server.podDisruptionBudget.minAvailable=1 with 1 replicas would block every node drain",
        ),
        (
            ("controller.replicas=2", "controller.podDisruptionBudget.minAvailable=2"),
            "controller.podDisruptionBudget.minAvailable=2 with 2 replicas would block every node drain",
        ),
    ],
)
def test_a_budget_that_blocks_every_drain_is_refused_saying_why(helm, sets, words):
    refused = helm(*template_args(sets, NS, None), check=False)
    assert refused.returncode != 0
    assert words in refused.stderr and "maxUnavailable" in refused.stderr, refused.stderr


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (
            "server.podDisruptionBudget.maxUnavailable=0",
            ("/server/podDisruptionBudget/maxUnavailable", "minimum"),
        ),
        ("image.digest=latest", ("/image/digest", "sha256")),
        ("image.tag=a:b", ("/image/tag",)),
        ("logLevel=verbose", ("/logLevel", "debug")),
        ("fullnameOverride=Gates_", ("/fullnameOverride",)),
        ("nodeSelector.os=1", ("/nodeSelector/os", "string")),
        ("imagePullSecrets[0].nam=x", ("/imagePullSecrets/0",)),
    ],
)
def test_the_schema_refuses_bad_placement_and_image_values(helm, value, words):
    result = helm(*template_args((value,), NS, None), check=False)
    assert result.returncode != 0 and "schema" in result.stderr, result.stderr
    for word in words:
        assert word in result.stderr, result.stderr


def test_global_values_are_accepted_for_a_parent_chart(helm):
    assert render(helm, "global.imageRegistry=registry.example", "global.anything.nested=1")


def test_the_priority_quota_follows_the_priority_class(helm):
    def quotas(*sets: str) -> list[dict]:
        return [d for d in render(helm, *sets) if d["kind"] == "ResourceQuota"]

    [quota] = quotas()
    assert quota["metadata"]["namespace"] == NS
    assert quota["spec"]["scopeSelector"]["matchExpressions"] == [
        {"operator": "In", "scopeName": "PriorityClass", "values": ["system-cluster-critical"]}
    ]
    assert quota["spec"]["hard"]["pods"] == "20"
    [node] = quotas("priorityClassName=system-node-critical", "priorityClassQuota.pods=40")
    assert node["spec"]["scopeSelector"]["matchExpressions"][0]["values"] == ["system-node-critical"]
    assert node["spec"]["hard"]["pods"] == "40"
    assert quotas("priorityClassName=") == []
    assert quotas("priorityClassName=platform-high") == []  # a class of your own needs no quota
    assert quotas("priorityClassQuota.enabled=false") == []


def test_the_crds_can_be_left_out(helm):
    kinds = [d["kind"] for d in render(helm, "crds.enabled=false")]
    assert "CustomResourceDefinition" not in kinds and "Deployment" in kinds
    crds = [d for d in render(helm, "commonLabels.team=platform") if d["kind"] == "CustomResourceDefinition"]
    assert len(crds) == 2
    assert all(json.dumps(c["metadata"]["labels"]).count("platform") == 1 for c in crds)


def test_roles_for_people_are_aggregated_and_can_be_left_out(helm):
    roles = {
        d["metadata"]["name"]: d
        for d in render(helm)
        if d["kind"] == "ClusterRole" and "rbac" == d["metadata"]["labels"]["app.kubernetes.io/component"]
    }
    aggregated = {
        name: sorted(
            k.rsplit("-", 1)[1]
            for k in role["metadata"]["labels"]
            if k.startswith("rbac.authorization.k8s.io/aggregate-to-")
        )
        for name, role in roles.items()
    }
    assert aggregated == {
        "gate-admission-view": ["admin", "edit", "view"],
        "gate-admission-edit": ["admin", "edit"],
        "gate-admission-approve": ["admin"],
    }
    [approve] = roles["gate-admission-approve"]["rules"]
    assert approve["verbs"] == ["get", "list", "watch", "patch"]  # no update: the policy narrows a patch
    assert not [
        d for d in render(helm, "rbac.aggregatedRoles=false") if d["metadata"]["name"].endswith("-approve")
    ]
