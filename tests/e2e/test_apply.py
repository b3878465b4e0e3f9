"""`kubectl apply` through a real kube-apiserver that calls our real server."""

from __future__ import annotations

import json

import pytest

from admission.core.base.names import (
    CLOSE_ANNOTATION,
    MESSAGE_ANNOTATION,
    OPEN_ANNOTATION,
    REQUESTED_BY_ANNOTATION,
)
from tests.builders import gate, keeper
from tests.e2e.conftest import ADMIN, ALICE, FLUX, register_webhooks, start_server, until
from tests.e2e.manifests import (
    artifact_patch,
    git_repository,
    helm_release,
    kustomization,
    now_rfc3339,
    oci_repository,
)

pytestmark = pytest.mark.e2e
DENIED = 'admission webhook "validate.gating.toolkit.fluxcd.io" denied the request: '


def ok(result):
    return result.returncode == 0


def held(result):
    return result.returncode != 0 and " is held: " in result.stderr


def apply(kubectl, manifest, *args, user=ALICE):
    return kubectl("apply", *args, "-f", "-", input=manifest, user=user)


def get(kubectl, kind, name, namespace, jsonpath):
    return kubectl(
        "get", kind, name, "-n", namespace, "-o", f"jsonpath={jsonpath}", user=ALICE, check=True
    ).stdout


def kept_at(revision):
    """A held source's status write went through, rewritten to the artifact it serves."""

    def accept(result):
        return (
            ok(result) and json.loads(result.stdout)["status"].get("artifact", {}).get("revision") == revision
        )

    return accept


def blocked(result) -> str:
    conditions = json.loads(result.stdout)["status"].get("conditions") or []
    return next((c["message"] for c in conditions if c["type"] == "Blocked" and c["status"] == "True"), "")


def settle(action, accept=held):
    """After a gate changes, wait until the server judges by the new state: a server-side
    dry run has no side effects, so it can be repeated until it shows the new verdict."""
    result = until(lambda: action("--dry-run=server"), accept)
    assert accept(result), result.stderr


def open_gate(gates, name, **spec):
    gates.put(gate(name, annotations={OPEN_ANNOTATION: now_rfc3339()}, **spec))


def created_open(kubectl, gates, gate_name, manifest, user=ALICE, *args):
    """Create an object while its gate is open (creation itself is held when closed)."""
    gates.put(gate(gate_name))
    result = until(lambda: apply(kubectl, manifest, *args, user=user), ok)
    assert ok(result), result.stderr


def test_a_change_is_refused_while_the_gate_is_closed_and_lands_once_it_opens(kubectl, gates):
    created_open(kubectl, gates, "e2e-approval", kustomization("frontend", gates="flux-system/e2e-approval"))
    gates.put(gate("e2e-approval", default="closed", window="1h"))
    change = kustomization("frontend", gates="flux-system/e2e-approval", path="./deploy/v2")
    settle(lambda *dry: apply(kubectl, change, *dry))
    result = apply(kubectl, change)
    assert result.returncode == 1
    assert "Error from server (Forbidden)" in result.stderr
    assert (
        DENIED
        + (
            "Kustomization apps/frontend is held: gate 'flux-system/e2e-approval' is closed "
            "(Gate closed by default); require=all"
        )
        in result.stderr
    )
    assert get(kubectl, "kustomization", "frontend", "apps", "{.spec.path}") == "./deploy"

    open_gate(gates, "e2e-approval", default="closed", window="1h")
    result = until(lambda: apply(kubectl, change), ok)
    assert ok(result), result.stderr
    assert get(kubectl, "kustomization", "frontend", "apps", "{.spec.path}") == "./deploy/v2"


def test_metadata_requests_finalizers_and_status_pass_while_closed(kubectl, gates):
    created_open(kubectl, gates, "e2e-meta", kustomization("meta", gates="flux-system/e2e-meta"))
    gates.put(gate("e2e-meta", closed=True))
    settle(lambda *dry: apply(kubectl, kustomization("meta", gates="flux-system/e2e-meta", path="./x"), *dry))

    assert ok(kubectl("label", "kustomization", "meta", "-n", "apps", "team=web"))
    assert ok(kubectl("annotate", "kustomization", "meta", "-n", "apps", "note=hello"))
    assert ok(
        kubectl(
            "annotate",
            "--overwrite",
            "kustomization",
            "meta",
            "-n",
            "apps",
            f"reconcile.fluxcd.io/requestedAt={now_rfc3339()}",
        )
    )
    assert ok(
        kubectl(
            "patch",
            "kustomization",
            "meta",
            "-n",
            "apps",
            "--type=merge",
            "-p",
            '{"metadata":{"finalizers":["finalizers.fluxcd.io"]}}',
            user=FLUX,
        )
    )
    assert ok(
        kubectl(
            "patch",
            "kustomization",
            "meta",
            "-n",
            "apps",
            "--type=merge",
            "--subresource=status",
            "-p",
            '{"status":{"lastAppliedRevision":"main@sha1:abc","observedGeneration":1}}',
            user=FLUX,
        )
    )
    assert ok(
        kubectl(
            "patch",
            "kustomization",
            "meta",
            "-n",
            "apps",
            "--type=json",
            "-p",
            '[{"op":"remove","path":"/metadata/finalizers"}]',
            user=FLUX,
        )
    )
    assert get(kubectl, "kustomization", "meta", "apps", "{.status.lastAppliedRevision}") == "main@sha1:abc"
    assert get(kubectl, "kustomization", "meta", "apps", "{.metadata.labels.team}") == "web"


@pytest.mark.parametrize(
    "kind, manifest",
    [
        ("gitrepository", git_repository("podinfo-src", gates="e2e-src-git")),
        ("ocirepository", oci_repository("podinfo-oci", gates="e2e-src-oci")),
    ],
)
def test_a_source_stays_on_its_approved_artifact_while_closed(kubectl, gates, kind, manifest):
    name = "podinfo-src" if kind == "gitrepository" else "podinfo-oci"
    gate_name = "e2e-src-git" if kind == "gitrepository" else "e2e-src-oci"

    def write_artifact(revision, *dry):
        return kubectl(
            "patch",
            kind,
            name,
            "-n",
            "flux-system",
            "--type=merge",
            "--subresource=status",
            "-p",
            artifact_patch(revision),
            "-o",
            "json",
            *dry,
            user=FLUX,
        )

    created_open(kubectl, gates, gate_name, manifest)
    assert ok(write_artifact("main@sha1:aaaa"))
    gates.put(gate(gate_name, default="closed"))
    settle(lambda *dry: write_artifact("main@sha1:bbbb", *dry), accept=kept_at("main@sha1:aaaa"))
    result = write_artifact("main@sha1:bbbb")  # source-controller's write succeeds, with the old artifact
    assert kept_at("main@sha1:aaaa")(result), result.stderr
    assert blocked(result) == (
        f"Reconciliation is blocked as gate 'flux-system/{gate_name}' is closed: "
        "main@sha1:bbbb waits, serving main@sha1:aaaa"
    )
    assert get(kubectl, kind, name, "flux-system", "{.status.artifact.revision}") == "main@sha1:aaaa"
    conditions = (
        '{"status":{"conditions":[{"type":"Ready","status":"True","reason":"Succeeded",'
        '"message":"stored artifact for revision \'main@sha1:bbbb\'","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}'
    )
    result = kubectl(
        "patch",
        kind,
        name,
        "-n",
        "flux-system",
        "--type=merge",
        "--subresource=status",
        "-p",
        conditions,
        "-o",
        "json",
        user=FLUX,
    )
    assert ok(result) and "main@sha1:bbbb waits" in blocked(result), result.stderr
    ready = next(c for c in json.loads(result.stdout)["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True" and "serving main@sha1:aaaa" in ready["message"]

    open_gate(gates, gate_name, default="closed")
    result = until(lambda: write_artifact("main@sha1:bbbb"), kept_at("main@sha1:bbbb"))
    assert kept_at("main@sha1:bbbb")(result) and blocked(result) == "", result.stdout
    assert get(kubectl, kind, name, "flux-system", "{.status.artifact.revision}") == "main@sha1:bbbb"


def test_server_side_apply_by_kustomize_controller_and_server_dry_run(kubectl, gates):
    ssa = ("--server-side", "--field-manager=kustomize-controller")
    created_open(kubectl, gates, "e2e-ssa", kustomization("ssa", gates="flux-system/e2e-ssa"), FLUX, *ssa)
    gates.put(gate("e2e-ssa", closed=True))
    change = kustomization("ssa", gates="flux-system/e2e-ssa", path="./prod")
    settle(lambda *dry: apply(kubectl, change, *ssa, *dry, user=FLUX))
    result = apply(kubectl, change, *ssa, user=FLUX)
    assert DENIED + "Kustomization apps/ssa is held: gate 'flux-system/e2e-ssa' is closed" in result.stderr

    dry = apply(kubectl, change, "--dry-run=server")
    assert held(dry) and "Kustomization apps/ssa is held" in dry.stderr
    unchanged = apply(
        kubectl, kustomization("ssa", gates="flux-system/e2e-ssa"), "--dry-run=server", *ssa, user=FLUX
    )
    assert ok(unchanged), unchanged.stderr

    open_gate(gates, "e2e-ssa", closed=True)
    assert ok(until(lambda: apply(kubectl, change, "--dry-run=server"), ok))
    assert (
        get(kubectl, "kustomization", "ssa", "apps", "{.spec.path}") == "./deploy"
    )  # dry run changed nothing
    assert ok(until(lambda: apply(kubectl, change, *ssa, user=FLUX), ok))
    assert get(kubectl, "kustomization", "ssa", "apps", "{.spec.path}") == "./prod"


def test_delete_is_held_while_closed(kubectl, gates):
    created_open(kubectl, gates, "e2e-delete", kustomization("doomed", gates="flux-system/e2e-delete"))
    gates.put(gate("e2e-delete", closed=True))
    settle(lambda *dry: kubectl("delete", "kustomization", "doomed", "-n", "apps", "--wait=false", *dry))
    result = kubectl("delete", "kustomization", "doomed", "-n", "apps", "--wait=false")
    assert DENIED + "Kustomization apps/doomed is held" in result.stderr
    assert ok(kubectl("get", "kustomization", "doomed", "-n", "apps"))
    open_gate(gates, "e2e-delete", closed=True)
    assert ok(until(lambda: kubectl("delete", "kustomization", "doomed", "-n", "apps", "--wait=false"), ok))


def test_working_examples_change_freeze_and_bypass_signoff(kubectl, gates):
    repo = git_repository("flux-system-we", gates="change-freeze-we, bypass-signoff-we", require="oneOf")

    def write_artifact(revision, *dry):
        return kubectl(
            "patch",
            "gitrepository",
            "flux-system-we",
            "-n",
            "flux-system",
            "--type=merge",
            "--subresource=status",
            "-p",
            artifact_patch(revision),
            "-o",
            "json",
            *dry,
            user=FLUX,
        )

    gates.put(gate("bypass-signoff-we", closed=True))
    created_open(kubectl, gates, "change-freeze-we", repo)
    assert ok(write_artifact("main@sha1:0001"))
    # The change freeze begins: a GateKeeper whose schedule covers every minute.
    freeze = keeper(
        "change-freeze-gatekeeper-we", "change-freeze-we", closed=["* * * * *"], type="cronexpression"
    )
    gates.put(gate("change-freeze-we"), freeze, name="change-freeze-we")
    settle(lambda *dry: write_artifact("main@sha1:0002", *dry), accept=kept_at("main@sha1:0001"))
    result = write_artifact("main@sha1:0002")
    assert kept_at("main@sha1:0001")(result)
    assert blocked(result) == (
        "Reconciliation is blocked as gate 'flux-system/change-freeze-we' is closed, "
        "gate 'flux-system/bypass-signoff-we' is closed: main@sha1:0002 waits, "
        "serving main@sha1:0001"
    )

    # flux gate open bypass-signoff "Patching a CVE: Signed off by Bob the builder"
    gates.put(
        gate(
            "bypass-signoff-we",
            closed=True,
            annotations={
                OPEN_ANNOTATION: now_rfc3339(),
                MESSAGE_ANNOTATION: "Patching a CVE: Signed off by Bob the builder",
                REQUESTED_BY_ANNOTATION: "bob",
            },
        )
    )
    assert kept_at("main@sha1:0002")(
        until(lambda: write_artifact("main@sha1:0002"), kept_at("main@sha1:0002"))
    )
    assert (
        get(kubectl, "gitrepository", "flux-system-we", "flux-system", "{.status.artifact.revision}")
        == "main@sha1:0002"
    )

    # flux gate close bypass-signoff
    gates.put(
        gate(
            "bypass-signoff-we",
            closed=True,
            annotations={OPEN_ANNOTATION: "2020-01-01T00:00:00Z", CLOSE_ANNOTATION: now_rfc3339()},
        )
    )
    settle(lambda *dry: write_artifact("main@sha1:0003", *dry), accept=kept_at("main@sha1:0002"))
    assert kept_at("main@sha1:0002")(write_artifact("main@sha1:0003"))


def test_a_helm_release_chart_bump_by_flux_is_held_and_lands_after_opening(kubectl, gates):
    ssa = ("--server-side", "--field-manager=kustomize-controller")
    created_open(
        kubectl, gates, "e2e-helm", helm_release("podinfo", gates="flux-system/e2e-helm"), FLUX, *ssa
    )
    gates.put(gate("e2e-helm", default="closed"))
    bump = helm_release("podinfo", gates="flux-system/e2e-helm", version="6.1.x")
    settle(lambda *dry: apply(kubectl, bump, *ssa, *dry, user=FLUX))
    result = apply(kubectl, bump, *ssa, user=FLUX)
    assert "HelmRelease apps/podinfo is held: gate 'flux-system/e2e-helm' is closed" in result.stderr
    assert get(kubectl, "helmrelease", "podinfo", "apps", "{.spec.chart.spec.version}") == "6.0.x"
    open_gate(gates, "e2e-helm", default="closed")
    assert ok(until(lambda: apply(kubectl, bump, *ssa, user=FLUX), ok))
    assert get(kubectl, "helmrelease", "podinfo", "apps", "{.spec.chart.spec.version}") == "6.1.x"


def status_write(kubectl, name):
    return kubectl(
        "patch",
        "kustomization",
        name,
        "-n",
        "apps",
        "--type=merge",
        "--subresource=status",
        "-p",
        '{"status":{"observedGeneration":1}}',
        user=FLUX,
    )


@pytest.mark.parametrize(
    "name, spec, annotation, suspended",
    [
        ("susp-spec", {"suspend": True}, None, "true"),
        ("susp-always", {}, "@always", "true"),
        ("susp-every-minute", {}, "* * * * *", "true"),
        ("susp-never", {}, "@never", "false"),
        ("susp-none", {"suspend": False}, None, "false"),
    ],
)
def test_status_suspended_is_injected_on_status_writes(kubectl, gates, name, spec, annotation, suspended):
    assert ok(apply(kubectl, kustomization(name, **spec)))
    if annotation:  # metadata: allowed even while it suspends (and so holds) the object
        assert ok(
            kubectl(
                "annotate",
                "kustomization",
                name,
                "-n",
                "apps",
                f"reconcile.fluxcd.io/suspendDuring={annotation}",
            )
        )
    assert ok(status_write(kubectl, name))
    assert get(kubectl, "kustomization", name, "apps", "{.status.suspended}") == suspended
    table = kubectl("get", "kustomization", name, "-n", "apps", check=True).stdout
    assert "SUSPENDED" in table.splitlines()[0] and suspended in table.splitlines()[1]


def test_a_suspend_during_window_holds_spec_changes(kubectl):
    assert ok(apply(kubectl, kustomization("susp-hold")))
    assert ok(
        kubectl(
            "annotate",
            "kustomization",
            "susp-hold",
            "-n",
            "apps",
            "reconcile.fluxcd.io/suspendDuring=@always",
        )
    )
    result = apply(
        kubectl,
        kustomization("susp-hold", path="./v2", annotations={"reconcile.fluxcd.io/suspendDuring": "@always"}),
    )
    assert held(result) and "suspended by reconcile.fluxcd.io/suspendDuring '@always'" in result.stderr


def test_spec_gates_works_with_the_crd_patch(kubectl, gates):
    gates.put(gate("e2e-spec-gates", closed=True))
    manifest = kustomization(
        "spec-gates", spec_gates=[{"name": "e2e-spec-gates", "namespace": "flux-system"}]
    )
    settle(lambda *dry: apply(kubectl, manifest, *dry))
    result = apply(kubectl, manifest)
    assert "gate 'flux-system/e2e-spec-gates' is closed" in result.stderr
    open_gate(gates, "e2e-spec-gates", closed=True)
    assert ok(until(lambda: apply(kubectl, manifest), ok))
    stored = json.loads(
        kubectl("get", "kustomization", "spec-gates", "-n", "apps", "-o", "json", check=True).stdout
    )
    assert stored["spec"]["gates"] == [{"name": "e2e-spec-gates", "namespace": "flux-system"}]


@pytest.fixture
def audit_webhook(cluster, webhook, gates, tmp_path):
    """A second server in audit mode takes over the webhooks for one test, then hands back."""
    server = start_server(tmp_path, gates.directory, "--mode", "audit")
    try:
        register_webhooks(cluster, server)
        yield server
    finally:
        register_webhooks(cluster, webhook)
        until(
            lambda: cluster.kubectl(
                "apply",
                "--dry-run=server",
                "-f",
                "-",
                check=False,
                input=kustomization("audit-probe", gates="flux-system/never-exists"),
            ),
            held,
        )
        server.stop()


def test_audit_mode_allows_warns_and_records(kubectl, gates, audit_webhook):
    gates.put(gate("e2e-audit", closed=True))
    manifest = kustomization("audited", gates="flux-system/e2e-audit")
    settle(
        lambda *dry: apply(kubectl, manifest, *dry),
        lambda r: ok(r) and "(Gate closed by default)" in r.stderr,
    )
    result = apply(kubectl, manifest)
    assert ok(result), result.stderr
    assert (
        "Warning: gate audit: change would be denied in enforce mode: Kustomization apps/audited is held: "
        "gate 'flux-system/e2e-audit' is closed (Gate closed by default); require=all"
    ) in result.stderr
    record = json.loads(
        get(
            kubectl,
            "kustomization",
            "audited",
            "apps",
            r"{.metadata.annotations.gating\.toolkit\.fluxcd\.io/audit}",
        )
    )
    assert record["user"] == "alice" and record["operation"] == "CREATE" and "is held" in record["message"]


def test_the_api_server_refuses_a_gatekeeper_beyond_the_bounds_evaluation_relies_on(kubectl):
    # The code bounds these too (a bad entry makes the gate Invalid, closed); the CRD stops them
    # at `kubectl apply`, where the author sees why.
    def apply_keeper(closed):
        return apply(kubectl, json.dumps(keeper("bounded", "anything", closed=closed)), user=ADMIN)

    every_minute = {"cron": "* * * * *", "duration": "1h"}
    assert ok(apply_keeper([every_minute] * 16)), "16 entries are allowed"
    # The API server's own wording (kube-apiserver 1.36).
    for closed, why in [
        ([every_minute] * 17, "at most 16 items"),
        (["*" * 257], "more than 256 bytes"),
        ([{"cron": "*" * 257, "duration": "1h"}], "more than 256 bytes"),
        ([{"cron": "* * * * *", "duration": "1" * 40 + "h"}], "more than 32 bytes"),
        ([{"cron": "* * * * *", "duration": "1h", "extra": "x"}], "Too many: 3: must have at most 2 items"),
    ]:
        result = apply_keeper(closed)
        assert result.returncode != 0 and why in result.stderr, (why, result.stderr[-300:])
