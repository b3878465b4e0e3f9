"""Installing into a real cluster: manifests, least privilege, certificates."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from kubernetes import client
from kubernetes.client.rest import ApiException

from admission.core.admission import matching
from admission.core.base import names
from admission.kube.client import api_client
from tests.e2e.conftest import ROOT, WEBHOOK_HOST, own_plane, start_server
from tests.e2e.controlplane import ADMIN, ALICE, CERTS, CONTROLLER, GATE_ADMISSION
from tests.e2e.manifests import kustomization, with_client_config
from tests.polling import until
from tests.processes import BIN

pytestmark = pytest.mark.e2e
NS = "gate-admission-system"


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    yield from own_plane(tmp_path_factory.mktemp("install"))  # it installs webhooks of its own


def rendered(plane, path=ROOT / "manifests") -> list[dict]:
    return [d for d in yaml.safe_load_all(plane.kubectl("kustomize", str(path)).stdout) if d]


@pytest.fixture(scope="module")
def installed(plane):
    docs = rendered(plane)
    result = plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs), check=False)
    assert result.returncode == 0, result.stderr
    return docs


def test_the_manifests_render_and_apply_cleanly(plane, installed):
    kinds = sorted({d["kind"] for d in installed})
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "CronJob",
        "CustomResourceDefinition",
        "Deployment",
        "Job",
        "MutatingWebhookConfiguration",
        "Namespace",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "ResourceQuota",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingWebhookConfiguration",
    ]
    listed = plane.kubectl(
        "get", "deployments,services,poddisruptionbudgets,cronjobs,jobs", "-n", NS, "-o", "name"
    ).stdout
    for name in (
        "deployment.apps/gate-admission",
        "deployment.apps/gate-admission-controller",
        "service/gate-admission",
        "poddisruptionbudget.policy/gate-admission",
        "cronjob.batch/gate-admission-certs",
        "job.batch/gate-admission-certs-init",
    ):
        assert name in listed
    again = plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(installed), check=False)
    assert again.returncode == 0 and "created" not in again.stdout  # idempotent


def test_the_deployment_is_hardened(installed):
    deploy = next(
        d for d in installed if d["kind"] == "Deployment" and d["metadata"]["name"] == "gate-admission"
    )
    pod = deploy["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert deploy["spec"]["replicas"] == 2
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert container["resources"]["requests"]["memory"]
    hooks = [d for d in installed if d["kind"].endswith("WebhookConfiguration")]
    for config in hooks:
        for hook in config["webhooks"]:
            assert hook["sideEffects"] == "NoneOnDryRun" and hook["timeoutSeconds"] <= 10
            if hook["rules"][0]["resources"] == ["gates"]:
                # The approvals entries see every namespace (an approval must never go
                # unrecorded), and only a Gate write that adds or changes an approval: never what
                # repairing the cluster or this webhook needs.
                assert "namespaceSelector" not in hook and "approval.gating.toolkit.fluxcd.io/" in str(
                    hook["matchConditions"]
                )
                continue
            excluded = hook["namespaceSelector"]["matchExpressions"][0]["values"]
            assert {"kube-system", NS} <= set(excluded)


def pod_templates(docs: list[dict]) -> list[tuple[str, dict]]:
    found = []
    for doc in docs:
        spec = doc.get("spec") or {}
        template = (
            spec["jobTemplate"]["spec"]["template"] if doc["kind"] == "CronJob" else spec.get("template")
        )
        if doc["kind"] in ("Deployment", "Job", "CronJob"):
            found.append((f"{doc['kind']}/{doc['metadata']['name']}", template))
    return found


def test_every_pod_we_ship_is_admitted_by_pod_security_restricted(plane, installed):
    """The namespace enforces Pod Security's restricted profile, and the API server admits a Pod of
    each template we ship there (a server-side dry run: nothing runs)."""
    labels = one(installed, "Namespace")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    templates = pod_templates(installed)
    # The webhook, the controller, the certificate Job, its renewing CronJob and the suspended
    # one that renews on demand.
    assert len(templates) == 5
    for name, template in templates:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "psa-" + name.split("/")[1],
                "namespace": NS,
                **template.get("metadata", {}),
            },
            "spec": template["spec"],
        }
        result = plane.kubectl(
            "create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(pod), check=False
        )
        assert result.returncode == 0 and "Warning" not in result.stderr, (name, result.stderr)
    # What restricted refuses there: a Pod that may run as root (so the label is enforced).
    plain = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "plain", "namespace": NS},
        "spec": {"containers": [{"name": "c", "image": "gate-admission:0.2.0"}]},
    }
    result = plane.kubectl("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(plain), check=False)
    assert result.returncode != 0 and 'violates PodSecurity "restricted' in result.stderr, result.stderr


def can_i(plane, user: str, *args: str) -> bool:
    result = plane.kubectl("auth", "can-i", f"--as={user}", *args, check=False)
    return result.stdout.strip() == "yes"


@pytest.mark.parametrize(
    "user, allowed, denied",
    [
        (
            GATE_ADMISSION.name,
            [
                ("list", "gates.gating.toolkit.fluxcd.io", "-A"),
                ("watch", "gatekeepers.gating.toolkit.fluxcd.io", "-A"),
                ("create", "events", "-n", "apps"),
                ("watch", "gitrepositories.source.toolkit.fluxcd.io", "-A"),
                ("list", "helmcharts.source.toolkit.fluxcd.io", "-A"),
                ("watch", "helmreleases.helm.toolkit.fluxcd.io", "-A"),
                ("patch", "helmreleases.helm.toolkit.fluxcd.io", "--subresource=status", "-n", "apps"),
                ("get", "helmreleases.helm.toolkit.fluxcd.io", "--subresource=status", "-n", "apps"),
                ("get", "kustomizations.kustomize.toolkit.fluxcd.io", "-n", "apps"),
            ],  # read before its denial Event
            [
                ("get", "secrets", "-A"),
                ("list", "secrets", "-n", NS),
                ("get", "secrets/gate-admission-approval-key", "-n", NS),  # mounted, never read by API
                ("patch", "gates.gating.toolkit.fluxcd.io", "-A"),
                ("patch", "helmreleases.helm.toolkit.fluxcd.io", "-n", "apps"),
                ("update", "helmreleases.helm.toolkit.fluxcd.io", "--subresource=status", "-n", "apps"),
                ("patch", "kustomizations.kustomize.toolkit.fluxcd.io", "--subresource=status", "-n", "apps"),
                ("patch", "kustomizations.kustomize.toolkit.fluxcd.io", "-A"),
                ("delete", "gates.gating.toolkit.fluxcd.io", "-A"),
                ("patch", "gitrepositories.source.toolkit.fluxcd.io", "-A"),
                ("watch", "kustomizations.kustomize.toolkit.fluxcd.io", "-A"),
            ],
        ),
        (
            "system:serviceaccount:gate-admission-system:gate-admission-controller",
            [
                ("patch", "gates.gating.toolkit.fluxcd.io", "--subresource=status", "-n", "flux-system"),
                (
                    "patch",
                    "gatekeepers.gating.toolkit.fluxcd.io",
                    "--subresource=status",
                    "-n",
                    "flux-system",
                ),
                ("patch", "kustomizations.kustomize.toolkit.fluxcd.io", "-n", "apps"),
                ("list", "gitrepositories.source.toolkit.fluxcd.io", "-A"),
                ("create", "leases", "-n", NS),
                ("watch", "helmcharts.source.toolkit.fluxcd.io", "-A"),
                ("patch", "imagepolicies.image.toolkit.fluxcd.io", "-A"),
            ],
            [
                ("get", "secrets", "-A"),
                ("get", "secrets/gate-admission-approval-key", "-n", NS),  # mounted, never read by API
                ("patch", "gates.gating.toolkit.fluxcd.io", "-n", "flux-system"),
                ("patch", "kustomizations.kustomize.toolkit.fluxcd.io", "--subresource=status", "-n", "apps"),
                ("delete", "kustomizations.kustomize.toolkit.fluxcd.io", "-n", "apps"),
                ("create", "leases", "-n", "default"),
                ("update", "helmreleases.helm.toolkit.fluxcd.io", "-n", "apps"),
            ],
        ),
        (
            CERTS.name,
            [
                ("get", "secrets/gate-admission-tls", "-n", NS),
                ("update", "secrets/gate-admission-tls-ca", "-n", NS),
                ("create", "secrets", "-n", NS),  # RBAC cannot name it; the policy does
                ("patch", "validatingwebhookconfigurations/gate-admission"),
                ("patch", "mutatingwebhookconfigurations/gate-admission"),
            ],
            [
                ("get", "secrets/gate-admission-receiver-token", "-n", NS),
                ("get", "secrets", "-n", NS),
                ("list", "secrets", "-n", NS),
                ("update", "secrets/other", "-n", NS),
                ("get", "secrets", "-n", "flux-system"),
                ("get", "secrets", "-A"),
                ("patch", "validatingwebhookconfigurations/other"),
                ("delete", "validatingwebhookconfigurations/gate-admission"),
            ],
        ),
    ],
)
def test_service_accounts_hold_only_what_they_need(plane, installed, user, allowed, denied):
    for args in allowed:
        assert can_i(plane, user, *args), f"{user} should be able to {args}"
    for args in denied:
        assert not can_i(plane, user, *args), f"{user} must not be able to {args}"


def access(
    plane, user, verb: str, resource: str, name: str = "", namespace: str = "", group: str = ""
) -> bool:
    """The API server's SubjectAccessReview for ``user`` (RBAC's answer: an admission policy is
    not asked)."""
    review = client.AuthorizationV1Api(api_client(str(plane.kubeconfig(ADMIN)))).create_subject_access_review(
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user.name,
                "groups": list(user.groups),
                "resourceAttributes": {
                    "verb": verb,
                    "group": group,
                    "resource": resource,
                    "name": name,
                    "namespace": namespace,
                },
            },
        }
    )
    return bool(review.status.allowed)


def refused(plane, user, *args: str, input: str | None = None) -> str:
    """What the API server says to ``user``'s write, which must be refused (polled: a new policy
    takes a moment to be enforced)."""
    result = until(
        lambda: plane.kubectl(*args, user=user, input=input, check=False),
        lambda r: r.returncode != 0,
        timeout=30,
    )
    assert result.returncode != 0, result.stdout
    return result.stderr


def controller_patch(plane, namespace: str, name: str, body: dict, *, refused: bool) -> str | None:
    """Patch a Kustomization as the controller does (a merge patch, no read first: it has no
    `get`), with the controller's own token; None when admitted, else the API server's answer.
    A refusal is polled for: a new policy takes a moment to be enforced."""
    custom = client.CustomObjectsApi(api_client(str(plane.kubeconfig(CONTROLLER))))

    def attempt() -> str | None:
        try:
            custom.patch_namespaced_custom_object(
                "kustomize.toolkit.fluxcd.io", "v1", namespace, "kustomizations", name, body
            )
            return None
        except ApiException as err:
            return f"{err.status} {err.body}"

    return until(attempt, lambda message: message is not None, timeout=30) if refused else attempt()


def test_a_controller_token_may_request_a_reconcile_and_change_nothing_else(plane, installed):
    """RBAC lets the controller patch Flux objects (SubjectAccessReview says so); the admission
    policy gate-admission-controller-writes admits only reconcile.fluxcd.io/requestedAt."""
    plane.kubectl("apply", "-f", "-", input=kustomization("repointed"))
    assert access(
        plane, CONTROLLER, "patch", "kustomizations", "repointed", "apps", "kustomize.toolkit.fluxcd.io"
    )
    only = "gate-admission-controller may only write the reconcile.fluxcd.io/requestedAt annotation"
    for change in (
        {"spec": {"path": "./elsewhere", "sourceRef": {"kind": "GitRepository", "name": "x"}}},
        {"metadata": {"annotations": {"kustomize.toolkit.fluxcd.io/reconcile": "disabled"}}},
        {"metadata": {"labels": {"team": "other"}}},
        {"metadata": {"finalizers": ["example.com/never"]}},
    ):
        message = controller_patch(plane, "apps", "repointed", change, refused=True)
        assert message is not None and message.startswith("422") and only in message, (change, message)
    assert not can_i(
        plane, CONTROLLER.name, "delete", "kustomizations.kustomize.toolkit.fluxcd.io", "-n", "apps"
    )
    body = {"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": "now"}}}
    assert controller_patch(plane, "apps", "repointed", body, refused=False) is None
    stored = yaml.safe_load(
        plane.kubectl("get", "kustomization", "repointed", "-n", "apps", "-o", "yaml").stdout
    )
    assert stored["metadata"]["annotations"]["reconcile.fluxcd.io/requestedAt"] == "now"
    assert stored["spec"]["path"] == "./deploy" and "team" not in stored["metadata"].get("labels", {})
    assert "finalizers" not in stored["metadata"]
    # Anyone else's writes are not this policy's business.
    plane.kubectl(
        "patch",
        "kustomization",
        "repointed",
        "-n",
        "apps",
        "--type=merge",
        "-p",
        '{"spec": {"path": "./elsewhere"}}',
    )


def test_the_certificate_job_reads_its_own_secrets_only_and_writes_only_the_ca_bundle(plane, installed):
    plane.kubectl(
        "create", "secret", "generic", "gate-admission-receiver-token", "-n", NS, "--from-literal=token=t"
    )
    assert not access(plane, CERTS, "get", "secrets", "gate-admission-receiver-token", NS)
    assert "forbidden" in refused(plane, CERTS, "get", "secret", "gate-admission-receiver-token", "-n", NS)
    assert access(plane, CERTS, "get", "secrets", "gate-admission-tls", NS)
    # Create cannot be narrowed by RBAC (SubjectAccessReview allows it); the policy refuses any
    # other name, and a service account token Secret, which would mint a token of another identity.
    assert access(plane, CERTS, "create", "secrets", "", NS)
    other = yaml.safe_dump(
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "other", "namespace": NS}}
    )
    assert "may only write Secrets gate-admission-tls" in refused(
        plane, CERTS, "create", "-f", "-", input=other
    )
    minted = yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/service-account-token",
            "metadata": {
                "name": "gate-admission-tls",
                "namespace": NS,
                "annotations": {"kubernetes.io/service-account.name": "gate-admission-controller"},
            },
        }
    )
    assert "may only write Secrets" in refused(plane, CERTS, "create", "-f", "-", input=minted)
    # The webhook configurations: RBAC allows the patch; the policy, a change of caBundle alone.
    assert access(
        plane,
        CERTS,
        "patch",
        "validatingwebhookconfigurations",
        "gate-admission",
        group="admissionregistration.k8s.io",
    )
    for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
        for change in (
            '[{"op": "replace", "path": "/webhooks", "value": []}]',
            '[{"op": "remove", "path": "/webhooks/0"}]',
            # (each a change: the first mutating entry already fails open)
            '[{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "%s"}]'
            % ("Ignore" if kind.startswith("validating") else "Fail"),
            '[{"op": "replace", "path": "/webhooks/0/namespaceSelector", "value": {}}]',
            '[{"op": "replace", "path": "/webhooks/0/clientConfig/service/name", "value": "elsewhere"}]',
        ):
            stderr = refused(plane, CERTS, "patch", kind, "gate-admission", "--type=json", "-p", change)
            assert "gate-admission-certs may only change the caBundle" in stderr, (kind, change, stderr)
    # What the Job runs: issue both Secrets and write the CA into both configurations.
    result = certs_command(plane, "--inject")
    assert result.returncode == 0, result.stderr
    assert "ValidatingWebhookConfiguration/gate-admission" in result.stdout, result.stdout
    config = yaml.safe_load(
        plane.kubectl("get", "validatingwebhookconfiguration", "gate-admission", "-o", "yaml").stdout
    )
    assert len(config["webhooks"]) == len(one(installed, "ValidatingWebhookConfiguration")["webhooks"])
    assert all(hook["clientConfig"].get("caBundle") for hook in config["webhooks"])
    # The tests below issue the certificates from nothing.
    plane.kubectl("delete", "secret", "gate-admission-tls", "gate-admission-tls-ca", "-n", NS)


@pytest.fixture(scope="module")
def local_server(plane, installed, tmp_path_factory):
    """Our server on this machine, reading gates with the webhook's own service account."""
    server = start_server(
        tmp_path_factory.mktemp("install-server"), None, "--kubeconfig", str(plane.kubeconfig(GATE_ADMISSION))
    )
    yield server
    server.stop()


def point_webhooks_at(plane, docs, server, bundle: str) -> None:
    url = f"https://{WEBHOOK_HOST}:{server.port}"
    hooks = [with_client_config(d, bundle, url) for d in docs if d["kind"].endswith("WebhookConfiguration")]
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(hooks))


def test_certs_inject_makes_the_api_server_trust_us(plane, installed, local_server):
    plane.kubectl(
        "apply",
        "-f",
        "-",
        input=yaml.safe_dump(
            {
                "apiVersion": "gating.toolkit.fluxcd.io/v1alpha1",
                "kind": "Gate",
                "metadata": {"name": "install-gate", "namespace": "flux-system"},
                "spec": {"closed": True},
            }
        ),
    )
    point_webhooks_at(plane, installed, local_server, bundle="")
    manifest = kustomization("installed", gates="flux-system/install-gate")

    def apply():
        return plane.kubectl("apply", "--dry-run=server", "-f", "-", input=manifest, user=ALICE, check=False)

    untrusted = until(apply, lambda r: "x509" in r.stderr or "certificate" in r.stderr)
    assert untrusted.returncode != 0 and "failed calling webhook" in untrusted.stderr, untrusted.stderr

    result = subprocess.run(
        [
            str(BIN / "gate-admission"),
            "certs",
            "--out",
            str(local_server.cert_dir),
            "--inject",
            "--kubeconfig",
            str(plane.kubeconfig(ADMIN)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "current:" in result.stdout and "ValidatingWebhookConfiguration/gate-admission" in result.stdout
    denied = until(apply, lambda r: " is held: " in r.stderr)
    assert "Kustomization apps/installed is held: gate 'flux-system/install-gate' is closed" in denied.stderr
    again = subprocess.run(
        [
            str(BIN / "gate-admission"),
            "certs",
            "--out",
            str(local_server.cert_dir),
            "--inject",
            "--kubeconfig",
            str(plane.kubeconfig(ADMIN)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "caBundle: already current" in again.stdout  # idempotent


def certs_command(plane, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            str(BIN / "gate-admission"),
            "certs",
            "--secret",
            "gate-admission-tls",
            "--namespace",
            NS,
            "--kubeconfig",
            str(plane.kubeconfig(CERTS)),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_certs_in_secrets_as_the_cronjob_runs_them(plane, installed):
    first = certs_command(plane)
    assert first.returncode == 0 and first.stdout.startswith("issued:"), first.stderr
    core = client.CoreV1Api(api_client(str(plane.kubeconfig(ADMIN))))
    tls = core.read_namespaced_secret("gate-admission-tls", NS)
    assert tls.type == "kubernetes.io/tls" and {"tls.crt", "tls.key", "ca.crt"} <= set(tls.data)
    second = certs_command(plane)
    assert second.stdout.startswith("current:")
    assert (
        core.read_namespaced_secret("gate-admission-tls", NS).metadata.resource_version
        == tls.metadata.resource_version
    )
    renewed = certs_command(plane, "--renew")
    assert renewed.stdout.startswith("issued:") and "renewal requested" in renewed.stdout
    after = core.read_namespaced_secret("gate-admission-tls", NS)
    assert after.data["ca.crt"] == tls.data["ca.crt"] and after.data["tls.crt"] != tls.data["tls.crt"]


def test_the_certificate_job_creates_the_approval_key_once_and_never_replaces_it(plane, installed):
    """As the Job runs it (manifests/certs/jobs.yaml): the Secret the webhook and controller mount."""
    import base64

    key_args = ("--approval-key-secret", "gate-admission-approval-key")
    core = client.CoreV1Api(api_client(str(plane.kubeconfig(ADMIN))))
    if any(s.metadata.name == "gate-admission-approval-key" for s in core.list_namespaced_secret(NS).items):
        core.delete_namespaced_secret("gate-admission-approval-key", NS)
    first = certs_command(plane, *key_args)
    assert first.returncode == 0, first.stderr
    assert f"created: Secret {NS}/gate-admission-approval-key (approval key)" in first.stdout
    made = core.read_namespaced_secret("gate-admission-approval-key", NS)
    assert len(base64.b64decode(made.data["key"])) == 64  # 32 random bytes, as hex
    again = certs_command(plane, *key_args)
    assert f"current: Secret {NS}/gate-admission-approval-key" in again.stdout, again.stderr
    after = core.read_namespaced_secret("gate-admission-approval-key", NS)
    assert after.metadata.resource_version == made.metadata.resource_version


def served_serial(server) -> int:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw:
        with server.tls().wrap_socket(raw, server_hostname="localhost") as conn:
            return x509.load_der_x509_certificate(conn.getpeercert(binary_form=True)).serial_number


def test_certificate_rotation_under_load_loses_no_write(plane, installed, local_server):
    point_webhooks_at(
        plane,
        installed,
        local_server,
        bundle=__import__("base64").b64encode((local_server.cert_dir / "ca.crt").read_bytes()).decode(),
    )
    api = client.CustomObjectsApi(api_client(str(plane.kubeconfig(ALICE))))
    # It references an open gate: only such objects' writes reach the webhook (matchConditions).
    plane.kubectl(
        "apply",
        "-f",
        "-",
        input=yaml.safe_dump(
            {
                "apiVersion": "gating.toolkit.fluxcd.io/v1alpha1",
                "kind": "Gate",
                "metadata": {"name": "rotation-open", "namespace": "flux-system"},
                "spec": {"default": "opened"},
            }
        ),
    )
    created = until(
        lambda: plane.kubectl(
            "apply",
            "-f",
            "-",
            input=kustomization("rotating", gates="flux-system/rotation-open"),
            user=ALICE,
            check=False,
        ),
        lambda r: r.returncode == 0,
    )
    assert created.returncode == 0, created.stderr
    stop, failures, writes = threading.Event(), [], [0]

    def writer():
        while not stop.is_set():
            try:
                api.patch_namespaced_custom_object(
                    "kustomize.toolkit.fluxcd.io",
                    "v1",
                    "apps",
                    "kustomizations",
                    "rotating",
                    {"metadata": {"labels": {"n": str(writes[0])}}},
                )
                writes[0] += 1
            except Exception as err:  # noqa: BLE001 (every failure is counted and shown)
                failures.append(repr(err))

    serials = [served_serial(local_server)]
    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for _ in range(3):
            start = writes[0]
            result = subprocess.run(
                [str(BIN / "gate-admission"), "certs", "--out", str(local_server.cert_dir), "--renew"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert result.returncode == 0, result.stderr
            serial = until(lambda: served_serial(local_server), lambda s: s != serials[-1], timeout=10)
            assert serial != serials[-1], "the server kept the old certificate"
            serials.append(serial)
            until(
                lambda: writes[0], lambda n, start=start: n >= start + 50, timeout=30
            )  # writes flow across the swap
    finally:
        stop.set()
        thread.join(30)
    assert writes[0] >= 150 and failures == [], (
        f"{len(failures)} failed writes of {writes[0]}: {failures[:3]}"
    )


# -- cert-manager variant: runs last in this module, as it re-applies the webhooks --

CERT_MANAGER_CRDS = Path(__file__).parent / "crds" / "minimal-cert-manager-crds.yaml"


def with_component(plane, tmp_path_factory, component: str) -> list[dict]:
    """manifests/ with one of our components, rendered as a user's overlay would."""
    overlay = tmp_path_factory.mktemp(f"{component}-overlay")
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(ROOT / "manifests", overlay)],
                "components": [os.path.relpath(ROOT / "manifests" / "components" / component, overlay)],
            }
        )
    )
    return rendered(plane, overlay)


@pytest.fixture(scope="module")
def cert_manager_variant(plane, tmp_path_factory) -> list[dict]:
    return with_component(plane, tmp_path_factory, "cert-manager")


def test_the_flux_notifications_component_turns_notify_on_for_the_controller_only(plane, tmp_path_factory):
    docs = with_component(plane, tmp_path_factory, "flux-notifications")
    envs = {
        d["metadata"]["name"]: {
            e["name"]: e.get("value") for e in d["spec"]["template"]["spec"]["containers"][0].get("env", [])
        }
        for d in docs
        if d["kind"] == "Deployment"
    }
    assert envs["gate-admission-controller"]["GATE_ADMISSION_NOTIFY"] == "true"
    assert "GATE_ADMISSION_NOTIFY" not in envs["gate-admission"]


def one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    [doc] = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    return doc


def test_both_certificate_variants_render(installed, cert_manager_variant):
    ours = {(d["kind"], d["metadata"]["name"]) for d in installed}
    theirs = {(d["kind"], d["metadata"]["name"]) for d in cert_manager_variant}
    certs_machinery = {
        ("Job", "gate-admission-certs-init"),
        ("CronJob", "gate-admission-certs"),
        ("CronJob", "gate-admission-certs-renew"),
        ("ServiceAccount", "gate-admission-certs"),
        ("Role", "gate-admission-certs"),
        ("RoleBinding", "gate-admission-certs"),
        ("ClusterRole", "gate-admission-certs"),
        ("ClusterRoleBinding", "gate-admission-certs"),
    }
    assert certs_machinery <= ours and not certs_machinery & theirs
    assert theirs - ours == {("Issuer", "gate-admission-selfsigned"), ("Certificate", "gate-admission")}
    assert ours - theirs == certs_machinery


def test_the_cert_manager_variant_is_wired_to_the_deployment_service_and_webhooks(cert_manager_variant):
    docs = cert_manager_variant
    cert = one(docs, "Certificate")
    issuer = one(docs, "Issuer", cert["spec"]["issuerRef"]["name"])
    assert cert["spec"]["issuerRef"].get("kind", "Issuer") == "Issuer"
    assert issuer["metadata"]["namespace"] == cert["metadata"]["namespace"] == NS
    deploy = one(docs, "Deployment", "gate-admission")
    pod = deploy["spec"]["template"]["spec"]
    mounted = next(v for v in pod["volumes"] if v["name"] == "certs")["secret"]["secretName"]
    assert cert["spec"]["secretName"] == mounted
    assert "--cert-dir=/certs" in pod["containers"][0]["args"]
    service = one(docs, "Service", "gate-admission")
    for config in (one(docs, "ValidatingWebhookConfiguration"), one(docs, "MutatingWebhookConfiguration")):
        assert (
            config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
            == f"{cert['metadata']['namespace']}/{cert['metadata']['name']}"
        )
        for hook in config["webhooks"]:
            ref = hook["clientConfig"]["service"]
            assert (ref["name"], ref["namespace"]) == (
                service["metadata"]["name"],
                service["metadata"]["namespace"],
            )
            # The API server connects to <service>.<namespace>.svc and checks that name.
            assert f"{ref['name']}.{ref['namespace']}.svc" in cert["spec"]["dnsNames"]


def test_the_cert_manager_variant_applies_with_cert_managers_crds(plane, installed, cert_manager_variant):
    plane.kubectl("apply", "-f", str(CERT_MANAGER_CRDS))
    plane.kubectl(
        "wait",
        "--for=condition=established",
        "--timeout=60s",
        "crd/issuers.cert-manager.io",
        "crd/certificates.cert-manager.io",
    )
    result = plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(cert_manager_variant), check=False)
    assert result.returncode == 0, result.stderr
    stored = yaml.safe_load(
        plane.kubectl("get", "certificate", "gate-admission", "-n", NS, "-o", "yaml").stdout
    )
    assert stored["spec"]["dnsNames"] == [
        "gate-admission.gate-admission-system.svc",
        "gate-admission.gate-admission-system.svc.cluster.local",
    ]
    assert stored["spec"]["privateKey"] == {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"}
    for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
        annotations = yaml.safe_load(plane.kubectl("get", kind, "gate-admission", "-o", "yaml").stdout)[
            "metadata"
        ]["annotations"]
        assert annotations["cert-manager.io/inject-ca-from"] == "gate-admission-system/gate-admission"
    # The schema is checked: cert-manager would reject an unknown private key algorithm too.
    broken = yaml.safe_dump(
        {
            **one(cert_manager_variant, "Certificate"),
            "spec": {**one(cert_manager_variant, "Certificate")["spec"], "privateKey": {"algorithm": "DSA"}},
        }
    )
    refused = plane.kubectl("apply", "-f", "-", input=broken, check=False)
    assert refused.returncode != 0 and "algorithm" in refused.stderr


def _entries(docs: list[dict]) -> dict[str, dict]:
    return {
        hook["name"]: hook
        for d in docs
        if d["kind"].endswith("WebhookConfiguration")
        for hook in d["webhooks"]
    }


def test_the_webhooks_render_with_match_conditions_and_without_them_for_clusters_older_than_1_30(
    plane, installed, tmp_path_factory
):
    current = _entries(installed)
    assert set(current) == {entry.name for entry in matching.ENTRIES}
    for name, hook in current.items():
        entry = matching.BY_NAME[name]
        assert (hook["matchConditions"], hook["failurePolicy"]) == (
            entry.match_conditions(),
            entry.failure_policy,
        )

    older_docs = with_component(plane, tmp_path_factory, "pre-1.30")
    older = _entries(older_docs)
    assert not any("matchConditions" in hook for hook in older.values())
    assert set(older) == set(current) - {names.VALIDATE_INHERITED_WEBHOOK} | {
        names.VALIDATE_FAIL_CLOSED_WEBHOOK
    }
    status, fail_closed = older[names.VALIDATE_STATUS_WEBHOOK], older[names.VALIDATE_FAIL_CLOSED_WEBHOOK]
    assert status["failurePolicy"] == "Ignore" and fail_closed["failurePolicy"] == "Fail"
    assert status["objectSelector"]["matchExpressions"] == [
        {"key": names.FAIL_CLOSED_LABEL, "operator": "DoesNotExist"}
    ]
    assert fail_closed["objectSelector"]["matchExpressions"] == [
        {"key": names.FAIL_CLOSED_LABEL, "operator": "Exists"}
    ]
    assert fail_closed["rules"] == status["rules"] == current[names.VALIDATE_STATUS_WEBHOOK]["rules"]
    # The inherited entry's rules are within validate-status's: nothing goes unregistered.
    inherited = {r for rule in current[names.VALIDATE_INHERITED_WEBHOOK]["rules"] for r in rule["resources"]}
    assert inherited <= {r for rule in status["rules"] for r in rule["resources"]}
    for name in set(current) & set(older) - {names.VALIDATE_STATUS_WEBHOOK}:
        assert older[name] == {k: v for k, v in current[name].items() if k != "matchConditions"}, name
    # Both are what the API server accepts (this one is 1.36: the component must only drop things).
    result = plane.kubectl(
        "apply",
        "--dry-run=server",
        "-f",
        "-",
        input=yaml.safe_dump_all([d for d in older_docs if d["kind"].endswith("WebhookConfiguration")]),
        check=False,
    )
    assert result.returncode == 0, result.stderr
