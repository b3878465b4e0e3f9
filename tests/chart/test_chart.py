"""The Helm chart (charts/gate-admission) against the manifests it is derived from, with the real
helm CLI (hack/go-binaries.sh helm) and the real kubectl's kustomize.

For its default values the chart renders what `kubectl kustomize manifests/` renders, in the
release namespace; each optional component's value renders what manifests/ plus that component
renders (a kustomization of our own, as docs/operations.md shows users writing one). Objects are
compared parsed, whatever their order; the only thing ignored is `HELM_ONLY_ANNOTATIONS`.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from admission.cli.gate_admission import build_parser
from tests import ROOT
from tests.e2e.controlplane import assets_dir, kubectl_binary

CHART = ROOT / "charts" / "gate-admission"
MANIFESTS = ROOT / "manifests"
NS = "gate-admission-system"

# What the chart adds that the manifests cannot say (docs/decisions/0056-the-helm-chart.md), each
# asserted where it belongs by test_what_only_helm_is_told: Helm keeps the CRDs on `helm
# uninstall`; and the certificate Job is named after the release's revision.
HELM_ONLY_ANNOTATIONS = {"helm.sh/resource-policy"}
CERTS_JOB = "gate-admission-certs-init"
# The labels the chart puts on every object and in every selector
# (docs/decisions/0074-labels-and-the-selector-change.md); the manifests carry some of them on
# some objects, and those must agree. Compared "labels aside": a chart label the manifests'
# object lacks at the same place is dropped before comparing (test_every_object_is_labelled
# holds the labels themselves).
STANDARD_LABELS = {
    "helm.sh/chart",
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/component",
}
LABEL_MAPS = {"labels", "matchLabels", "selector"}


@pytest.fixture(scope="module")
def kubectl() -> str:
    return kubectl_binary(assets_dir())


def is_hook(doc: dict) -> bool:
    return "helm.sh/hook" in (doc["metadata"].get("annotations") or {})


def template_args(sets: tuple[str, ...], namespace: str, kube_version: str | None) -> list[str]:
    args = ["template", "gate-admission", str(CHART), "-n", namespace]
    for value in sets:
        args += ["--set", value]
    if kube_version:
        args += ["--kube-version", kube_version]
    return args


@pytest.fixture(scope="module")
def chart(helm):
    """The chart rendered with some --set values: its objects."""

    def render(*sets: str, namespace: str = NS, kube_version: str | None = None) -> list[dict]:
        out = helm(*template_args(sets, namespace, kube_version)).stdout
        # Hooks (the pre-upgrade reselect Job and its RBAC, the `helm test` Pod) are Helm's alone
        # (test_what_only_helm_is_told).
        docs = [d for d in yaml.safe_load_all(out) if d and not is_hook(d)]
        for doc in docs:  # the revision suffix, which the manifests cannot have (test_what_only_helm_is_told)
            if doc["kind"] == "Job" and doc["metadata"]["name"] == f"{CERTS_JOB}-1":
                doc["metadata"]["name"] = CERTS_JOB
        return docs

    return render


@pytest.fixture(scope="module")
def kustomize(kubectl, tmp_path_factory):
    """manifests/ with components (and further resources) added, as a user's kustomization does."""

    def render(components: tuple[str, ...] = (), resources: tuple[str, ...] = ()) -> list[dict]:
        here = tmp_path_factory.mktemp("overlay")
        rel = Path(os.path.relpath(MANIFESTS, here))  # kustomize refuses absolute paths
        (here / "kustomization.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kustomize.config.k8s.io/v1beta1",
                    "kind": "Kustomization",
                    "resources": [str(rel)] + [str(rel / r) for r in resources],
                    "components": [str(rel / "components" / c) for c in components],
                }
            )
        )
        out = subprocess.run([kubectl, "kustomize", str(here)], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return [d for d in yaml.safe_load_all(out.stdout) if d]

    return render


def key(doc: dict) -> tuple[str, str, str, str]:
    meta = doc["metadata"]
    return doc["apiVersion"], doc["kind"], meta.get("namespace", ""), meta["name"]


def without_helm_annotations(doc: dict) -> dict:
    meta = dict(doc["metadata"])
    annotations = {k: v for k, v in meta.pop("annotations", {}).items() if k not in HELM_ONLY_ANNOTATIONS}
    if annotations:
        meta["annotations"] = annotations
    return {**doc, "metadata": meta}


def labels_aside(got, want):
    """``got`` (the chart's) without the standard labels that ``want`` (the manifests') lacks at
    the same place: in metadata labels, pod template labels and every selector."""
    if isinstance(got, list) and isinstance(want, list) and len(got) == len(want):
        return [labels_aside(g, w) for g, w in zip(got, want, strict=True)]
    if not isinstance(got, dict):
        return got
    want = want if isinstance(want, dict) else {}
    out = {}
    for k, v in got.items():
        if k in LABEL_MAPS and isinstance(v, dict) and all(isinstance(x, str) for x in v.values()):
            theirs = want.get(k) or {}
            v = {n: x for n, x in v.items() if n not in STANDARD_LABELS or n in theirs}
            if not v and k not in want:
                continue
        else:
            v = labels_aside(v, want.get(k))
        out[k] = v
    return out


def assert_same_objects(rendered: list[dict], expected: list[dict]) -> None:
    want = {key(d): d for d in expected}
    got = {key(d): labels_aside(without_helm_annotations(d), want.get(key(d))) for d in rendered}
    assert len(got) == len(rendered), "the chart renders an object twice"
    assert sorted(got) == sorted(want), (
        f"only the chart: {set(got) - set(want)}; only manifests/: {set(want) - set(got)}"
    )
    for k in want:
        assert got[k] == want[k], f"{k} differs"


def except_namespace(docs: list[dict]) -> list[dict]:
    return [d for d in docs if d["kind"] != "Namespace"]


# -- the chart is the manifests ------------------------------------------------------------------


def test_the_charts_files_are_copies_of_the_manifests_files():
    # Copies, not symlinks: Helm logs each link on every command, and the chart directory copied
    # on its own would carry dangling ones.
    copies = sorted(p.relative_to(CHART / "files") for p in (CHART / "files").rglob("*") if p.is_file())
    assert copies == [
        Path("crds/gating.toolkit.fluxcd.io_gatekeepers.yaml"),
        Path("crds/gating.toolkit.fluxcd.io_gates.yaml"),
        Path("grafana-dashboard.json"),
        Path("prometheusrule.yaml"),
    ]
    for copy in copies:
        original = MANIFESTS / ("monitoring" if copy.parent == Path() else "") / copy
        assert not (CHART / "files" / copy).is_symlink()
        assert (CHART / "files" / copy).read_bytes() == original.read_bytes(), (
            f"cp {original} {CHART / 'files' / copy}"
        )


def test_the_chart_lints_strictly(helm, tmp_path):
    helm("lint", "--strict", str(CHART), "-n", NS)
    everything = tmp_path / "everything.yaml"
    everything.write_text(
        yaml.safe_dump(
            {
                "certificates": {"source": "cert-manager"},
                "receiver": {"enabled": True},
                "calendarToken": {"enabled": True},
                "board": {"enabled": True},
                "fluxNotifications": {"enabled": True},
                "monitoring": {
                    "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
                    "prometheusRule": {"enabled": True, "labels": {"release": "prometheus"}},
                    "dashboard": {"enabled": True},
                },
                "webhooks": {"variant": "pre-1.30"},
                "namespace": {"create": True},
                "fullnameOverride": "gates",
                "commonLabels": {"team": "platform"},
                "commonAnnotations": {"owner": "platform"},
                "image": {"registry": "registry.example", "digest": "sha256:" + "0" * 64},
                "imagePullSecrets": [{"name": "pull"}],
                "tolerations": [{"operator": "Exists"}],
                "podLabels": {"a": "b"},
                "podAnnotations": {"c": "d"},
                "logLevel": "debug",
                "serviceAccount": {"annotations": {"e": "f"}},
                "server": {"replicas": 3, "podDisruptionBudget": {"enabled": True, "minAvailable": 2}},
                "controller": {
                    "extraArgs": ["--notify-period=60"],
                    "extraEnv": [{"name": "X", "value": "y"}],
                },
                "crds": {"enabled": False},
                "global": {"anything": True},
            }
        )
    )
    helm("lint", "--strict", str(CHART), "-n", NS, "-f", str(everything))


def test_default_values_render_the_manifests_in_the_release_namespace(chart, kustomize):
    # The one difference: the Namespace, which `helm install --create-namespace` creates (and
    # Helm would refuse to adopt); namespace.create renders it as manifests/namespace.yaml does.
    manifests = kustomize()
    assert any(d["kind"] == "Namespace" for d in manifests)
    assert_same_objects(chart(), except_namespace(manifests))
    assert_same_objects(chart("namespace.create=true"), manifests)


def test_what_only_helm_is_told(chart, helm):
    docs = chart()
    told = {
        f"{d['kind']}/{d['metadata']['name']}": d["metadata"]["annotations"]
        for d in docs
        if HELM_ONLY_ANNOTATIONS & set(d["metadata"].get("annotations", {}))
    }
    keep = {"helm.sh/resource-policy": "keep"}
    assert told == {
        "CustomResourceDefinition/gates.gating.toolkit.fluxcd.io": keep,
        "CustomResourceDefinition/gatekeepers.gating.toolkit.fluxcd.io": keep,
    }
    raw = [d for d in yaml.safe_load_all(helm(*template_args((), NS, None)).stdout) if d]
    hooks = {
        f"{d['kind']}/{d['metadata']['name']}": d["metadata"]["annotations"]["helm.sh/hook"]
        for d in raw
        if is_hook(d)
    }
    assert hooks == {
        **{
            f"{kind}/gate-admission-upgrade": "pre-upgrade"
            for kind in ("ServiceAccount", "Role", "RoleBinding", "Job")
        },
        "Pod/gate-admission-test": "test",
        # Lets the test Pod past the egress policy, to the webhook's port, for the test only.
        "NetworkPolicy/gate-admission-test": "test",
    }
    jobs = [d for d in raw if d["kind"] == "Job" and not is_hook(d)]
    assert [j["metadata"]["name"] for j in jobs] == [f"{CERTS_JOB}-1"]  # the revision: a new Job per upgrade
    assert "helm.sh/hook" not in jobs[0]["metadata"].get("annotations", {})  # see the chart's comment
    assert not (CHART / "crds").exists()  # Helm would install those once and never upgrade them


@pytest.mark.parametrize(
    ("value", "component"),
    [
        ("certificates.source=cert-manager", "cert-manager"),
        ("receiver.enabled=true", "receiver"),
        ("calendarToken.enabled=true", "calendar-token"),
        ("board.enabled=true", "board"),
        ("fluxNotifications.enabled=true", "flux-notifications"),
        ("webhooks.variant=pre-1.30", "pre-1.30"),
    ],
)
def test_each_component_value_renders_the_manifests_with_that_component(chart, kustomize, value, component):
    plain = except_namespace(kustomize())
    with_component = except_namespace(kustomize((component,)))
    assert with_component != plain
    assert_same_objects(chart(value), with_component)


def test_the_board_value_turns_serve_board_on_in_the_webhook_only(chart, monkeypatch):
    def envs(docs: list[dict]) -> dict[str, dict[str, str]]:
        return {
            d["metadata"]["name"]: {
                e["name"]: e.get("value") for e in d["spec"]["template"]["spec"]["containers"][0]["env"]
            }
            for d in docs
            if d["kind"] == "Deployment"
        }

    assert all("GATE_ADMISSION_BOARD" not in env for env in envs(chart()).values())  # off by default
    on = envs(chart("board.enabled=true"))
    assert "GATE_ADMISSION_BOARD" not in on["gate-admission-controller"]
    monkeypatch.setenv("GATE_ADMISSION_BOARD", on["gate-admission"]["GATE_ADMISSION_BOARD"])
    assert build_parser().parse_args(["serve"]).board is True  # what `serve` reads it as
    monkeypatch.delenv("GATE_ADMISSION_BOARD")
    assert build_parser().parse_args(["serve"]).board is False


def test_monitoring_renders_manifests_monitoring(chart, kustomize):
    monitoring = except_namespace(kustomize(resources=("monitoring",)))
    assert_same_objects(
        chart(
            "monitoring.serviceMonitor.enabled=true",
            "monitoring.prometheusRule.enabled=true",
            "monitoring.dashboard.enabled=true",
        ),
        monitoring,
    )
    plain = {key(d) for d in chart()}
    assert sorted(
        d["kind"] for d in chart("monitoring.serviceMonitor.enabled=true") if key(d) not in plain
    ) == [
        "PodMonitor",
        "ServiceMonitor",
    ]
    assert [d["kind"] for d in chart("monitoring.prometheusRule.enabled=true") if key(d) not in plain] == [
        "PrometheusRule"
    ]
    assert [d["kind"] for d in chart("monitoring.dashboard.enabled=true") if key(d) not in plain] == [
        "ConfigMap"
    ]


def test_the_monitors_and_the_rule_take_their_labels_and_scrape_settings(chart):
    docs = chart(
        "monitoring.serviceMonitor.enabled=true",
        "monitoring.serviceMonitor.labels.release=prometheus",
        "monitoring.serviceMonitor.interval=1m",
        "monitoring.serviceMonitor.scrapeTimeout=20s",
        "monitoring.prometheusRule.enabled=true",
        "monitoring.prometheusRule.labels.role=alert-rules",
    )
    monitors = [
        named(docs, "ServiceMonitor", "gate-admission"),
        named(docs, "PodMonitor", "gate-admission-controller"),
    ]
    for monitor in monitors:
        # The labels its Prometheus selects monitors by, beside ours.
        assert monitor["metadata"]["labels"]["release"] == "prometheus"
        assert monitor["metadata"]["labels"]["app.kubernetes.io/instance"] == "gate-admission"
        [endpoint] = monitor["spec"].get("endpoints") or monitor["spec"]["podMetricsEndpoints"]
        assert (endpoint["interval"], endpoint["scrapeTimeout"]) == ("1m", "20s")
    rule = named(docs, "PrometheusRule", "gate-admission")
    assert rule["metadata"]["labels"]["role"] == "alert-rules" and rule["metadata"]["namespace"] == NS
    assert rule["metadata"]["labels"]["app.kubernetes.io/instance"] == "gate-admission"
    # Prometheus' own templates in the alerts reach it untouched by Helm's.
    assert "{{ $labels.pod }}" in yaml.safe_dump(rule["spec"])


def test_the_network_policy_can_be_left_out(chart, kustomize):
    manifests = except_namespace(kustomize())
    assert_same_objects(
        chart("networkPolicy.enabled=false"), [d for d in manifests if d["kind"] != "NetworkPolicy"]
    )


def test_the_webhook_variant_follows_the_cluster_version(chart, kustomize):
    current = except_namespace(kustomize())
    older = except_namespace(kustomize(("pre-1.30",)))
    assert_same_objects(chart(kube_version="1.29.9"), older)
    assert_same_objects(chart(kube_version="1.30.0"), current)
    assert_same_objects(chart("webhooks.variant=matchConditions", kube_version="1.29.9"), current)
    assert_same_objects(chart("webhooks.variant=pre-1.30", kube_version="1.36.0"), older)


# -- values --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("mode=block", ("/mode", "enforce", "audit")),
        ("server.replicas=-1", ("/server/replicas", "minimum")),
        ("webhooks.failurePolicy=Sometimes", ("/webhooks/failurePolicy", "Fail", "Ignore")),
        ("certificates.source=vault", ("/certificates/source", "cert-manager")),
        ("webhooks.timeoutSeconds=31", ("/webhooks/timeoutSeconds", "maximum")),
        ("recevier.enabled=true", ("recevier",)),  # a misspelt value is refused, not ignored
    ],
)
def test_the_schema_refuses_a_bad_value(helm, value, words):
    result = helm(*template_args((value,), NS, None), check=False)
    assert result.returncode != 0 and "schema" in result.stderr, result.stderr
    for word in words:
        assert word in result.stderr, result.stderr


def containers_of(docs: list[dict]) -> list[tuple[str, dict]]:
    """Every container of every Pod template, with its object's kind/name."""
    found = []
    for d in docs:
        spec = d.get("spec", {})
        pod = spec.get("template", spec.get("jobTemplate", {}).get("spec", {}).get("template", {})).get(
            "spec"
        )
        for container in (pod or {}).get("containers", []):
            found.append((f"{d['kind']}/{d['metadata']['name']}", container))
    return found


def named(docs: list[dict], kind: str, name: str) -> dict:
    [doc] = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def test_mode_replicas_and_priority_reach_their_places(chart):
    docs = chart("mode=audit", "server.replicas=3", "controller.replicas=1", "priorityClassName=")
    webhook, controller = (
        named(docs, "Deployment", "gate-admission"),
        named(docs, "Deployment", "gate-admission-controller"),
    )
    env = {e["name"]: e.get("value") for e in webhook["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GATE_ADMISSION_MODE"] == "audit"
    assert (webhook["spec"]["replicas"], controller["spec"]["replicas"]) == (3, 1)
    assert all("priorityClassName" not in d["spec"]["template"]["spec"] for d in (webhook, controller))
    default = named(chart(), "Deployment", "gate-admission")
    assert {e["name"]: e.get("value") for e in default["spec"]["template"]["spec"]["containers"][0]["env"]}[
        "GATE_ADMISSION_MODE"
    ] == "enforce"


def test_the_image_is_every_pods_image(chart):
    docs = chart(
        "image.repository=registry.example/platform/gate-admission",
        "image.tag=1.2.3",
        "image.pullPolicy=Always",
    )
    containers = containers_of(docs)
    assert sorted(owner for owner, _ in containers) == [
        "CronJob/gate-admission-certs",
        "CronJob/gate-admission-certs-renew",
        "Deployment/gate-admission",
        "Deployment/gate-admission-controller",
        "Job/gate-admission-certs-init",
    ]
    for owner, container in containers:
        assert (container["image"], container["imagePullPolicy"]) == (
            "registry.example/platform/gate-admission:1.2.3",
            "Always",
        ), owner


def test_resources_reach_each_container(chart):
    docs = chart(
        "server.resources.limits.memory=1Gi",
        "controller.resources.requests.cpu=7m",
        "certificates.resources.limits.memory=99Mi",
    )
    by_owner = dict(containers_of(docs))
    assert by_owner["Deployment/gate-admission"]["resources"]["limits"] == {"memory": "1Gi"}
    assert by_owner["Deployment/gate-admission-controller"]["resources"]["requests"] == {
        "cpu": "7m",
        "memory": "128Mi",
    }
    assert by_owner["Job/gate-admission-certs-init"]["resources"]["limits"] == {"memory": "99Mi"}
    assert by_owner["CronJob/gate-admission-certs"]["resources"]["limits"] == {"memory": "99Mi"}


def entries(docs: list[dict]) -> dict[str, dict]:
    return {
        hook["name"]: hook
        for d in docs
        if d["kind"].endswith("WebhookConfiguration")
        for hook in d["webhooks"]
    }


@pytest.mark.parametrize("kube_version", ["1.36.0", "1.29.9"])
def test_failure_policy_timeouts_and_namespaces_never_judged(chart, kube_version):
    defaults = entries(chart(kube_version=kube_version))
    changed = entries(
        chart(
            "webhooks.failurePolicy=Ignore",
            "webhooks.timeoutSeconds=9",
            "webhooks.failOpenTimeoutSeconds=2",
            "webhooks.namespacesNeverJudged={kube-system,flux-system}",
            kube_version=kube_version,
        )
    )
    assert changed.keys() == defaults.keys()
    approvals = {
        n for n in changed if n.startswith("validate-approvals.") or n.startswith("mutate-approvals.")
    }
    for name in approvals:  # who approved must never go unrecorded: Fail everywhere, whatever the values
        assert changed[name]["failurePolicy"] == "Fail" and "namespaceSelector" not in changed[name], name
    toggles = "mutate-toggles.gating.toolkit.fluxcd.io"
    for values in (defaults, changed):  # break-glass: opening and closing never wait for us
        assert values[toggles]["failurePolicy"] == "Ignore" and "namespaceSelector" not in values[toggles]
    assert (defaults[toggles]["timeoutSeconds"], changed[toggles]["timeoutSeconds"]) == (3, 2)
    for name, hook in changed.items():
        if name in approvals or name == toggles:
            continue
        before = defaults[name]
        holds = before["failurePolicy"] == "Fail"  # the entries that hold gated objects
        assert hook["failurePolicy"] == "Ignore", name
        assert (before["timeoutSeconds"], hook["timeoutSeconds"]) == ((5, 9) if holds else (3, 2)), name
        assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == [
            "kube-system",
            "flux-system",
            NS,
        ], name
    assert sum(d["failurePolicy"] == "Fail" for n, d in defaults.items() if n not in approvals) == 2


def test_another_namespace_is_used_everywhere(chart, helm):
    sets = (
        "certificates.source=cert-manager",
        "monitoring.serviceMonitor.enabled=true",
        "namespace.create=true",
    )
    text = helm(*template_args(sets, "gates", None)).stdout
    assert NS not in text
    docs = [d for d in yaml.safe_load_all(text) if d]
    assert {d["metadata"].get("namespace") for d in docs} == {None, "gates"}
    for hook in entries(docs).values():
        assert hook["clientConfig"]["service"] == {
            **hook["clientConfig"]["service"],
            "name": "gate-admission",
            "namespace": "gates",
        }
        if "namespaceSelector" in hook:  # (the approvals entries see every namespace)
            assert "gates" in hook["namespaceSelector"]["matchExpressions"][0]["values"]
    certificate = named(docs, "Certificate", "gate-admission")
    assert certificate["spec"]["dnsNames"] == [
        "gate-admission.gates.svc",
        "gate-admission.gates.svc.cluster.local",
    ]
    assert (
        named(docs, "ServiceMonitor", "gate-admission")["spec"]["endpoints"][0]["tlsConfig"]["serverName"]
        == "gate-admission.gates.svc"
    )
    job = chart(namespace="gates")
    args = dict(containers_of(job))["Job/gate-admission-certs-init"]["args"]
    assert "--service=gate-admission" in args and "--namespace=gates" in args
    assert (
        "--lease-namespace=gates" in dict(containers_of(job))["Deployment/gate-admission-controller"]["args"]
    )


def test_the_release_namespace_is_never_flux_system_unless_it_is_judged(chart, helm):
    """The release namespace is never judged (so the HelmRelease that installs us there cannot
    deadlock its own repair); were it flux-system, every Flux object there would escape its gates.
    The chart refuses it, saying what to do; judged (judgeReleaseNamespace), it is one like any other."""
    refused = helm(*template_args((), "flux-system", None), check=False)
    assert refused.returncode != 0
    assert "the release namespace flux-system would never be judged by the webhooks" in refused.stderr
    assert (
        "spec.targetNamespace" in refused.stderr and "webhooks.judgeReleaseNamespace=true" in refused.stderr
    )
    judged = entries(chart("webhooks.judgeReleaseNamespace=true", namespace="flux-system"))
    for name, hook in judged.items():
        if "namespaceSelector" in hook:  # (the approvals entries see every namespace)
            assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system"], name
    # In a namespace of its own the default stands: that namespace is never judged.
    for name, hook in entries(chart()).items():
        if "namespaceSelector" in hook:
            assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", NS], name
