"""What operators use, against a real API server: `kubectl gate`, the HTTP receiver,
Events, metrics and logs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import orjson
import pytest
import yaml

from tests.builders import gate
from tests.e2e.conftest import ROOT, own_plane, serving_the_receiver, start_server
from tests.e2e.controlplane import ADMIN, ALICE, CONTROLLER, GATE_ADMISSION
from tests.e2e.manifests import kustomization
from tests.polling import until
from tests.processes import BIN, free_port

pytestmark = pytest.mark.e2e
TOKEN = "e2e-receiver-token-0123456789abcdef"


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    yield from own_plane(tmp_path_factory.mktemp("plugin"))


@pytest.fixture(scope="module")
def server(plane, tmp_path_factory):
    # Event periods start at multiples of the period since the epoch: with a day, the tests that
    # count one Event per period straddle two only when run across midnight UTC.
    with serving_the_receiver(
        plane, tmp_path_factory.mktemp("plugin-server"), TOKEN, "--event-period", "86400"
    ) as srv:
        yield srv


def kubectl_gate(plane, *args: str, kubeconfig: Path | None = None, stdin: str | None = None):
    """`kubectl gate ...` exactly as typed: kubectl finds our plugin on PATH."""
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "KUBECONFIG": str(kubeconfig or plane.kubeconfig(ADMIN)),
    }
    return subprocess.run(
        [plane.kubectl_path, "gate", *args], input=stdin, capture_output=True, text=True, env=env, timeout=60
    )


def apply(plane, manifest, *args):
    return plane.kubectl("apply", *args, "-f", "-", input=manifest, user=ALICE, check=False)


def hook(server, path: str, token: str | None = TOKEN, body: dict | None = None):
    conn = server.connection()
    try:
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        conn.request("POST", path, body=orjson.dumps(body or {}), headers=headers)
        resp = conn.getresponse()
        return resp.status, orjson.loads(resp.read())
    finally:
        conn.close()


def test_open_with_the_plugin_then_close_through_the_receiver(plane, server):
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(gate("release", closed=True, window="4h")))
    manifest = kustomization("shop", gates="flux-system/release")
    assert (
        " is held: "
        in until(lambda manifest=manifest: apply(plane, manifest), lambda r: " is held: " in r.stderr).stderr
    )

    opened = kubectl_gate(
        plane, "open", "release", "-n", "flux-system", "-m", "Release 1.2: approved by the CAB"
    )
    assert opened.returncode == 0, opened.stderr
    assert opened.stdout.strip() == "gate flux-system/release opened: Release 1.2: approved by the CAB"
    assert (
        until(lambda manifest=manifest: apply(plane, manifest), lambda r: r.returncode == 0).returncode == 0
    )

    status, out = hook(server, "/hooks/gates/flux-system/release/close", body={"message": "CAB window over"})
    assert status == 200 and out["gate"] == "flux-system/release" and out["action"] == "close", out
    change = kustomization("shop", gates="flux-system/release", path="./v2")
    result = until(lambda: apply(plane, change), lambda r: " is held: " in r.stderr)
    assert "gate 'flux-system/release' is closed (Gate close requested)" in result.stderr


def test_get_lists_the_objects_a_gate_holds(plane, server):
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(gate("infra", default="opened")))
    assert apply(plane, kustomization("infra-a", gates="flux-system/infra")).returncode == 0
    assert (
        apply(
            plane, kustomization("infra-b", gates="flux-system/infra, flux-system/other", require="oneOf")
        ).returncode
        == 0
    )
    closed = kubectl_gate(plane, "close", "infra", "-n", "flux-system", "-m", "maintenance")
    assert closed.returncode == 0, closed.stderr
    result = until(
        lambda: kubectl_gate(plane, "get", "infra", "-n", "flux-system"), lambda r: "Closed" in r.stdout
    )
    lines = result.stdout.splitlines()
    assert "State:         Closed" in lines and "Reason:        CloseRequested" in lines
    assert any(line.split() == ["Kustomization", "apps", "infra-a", "yes"] for line in lines), result.stdout
    assert any(line.split() == ["Kustomization", "apps", "infra-b", "yes"] for line in lines), result.stdout
    as_json = orjson.loads(kubectl_gate(plane, "get", "infra", "-n", "flux-system", "-o", "json").stdout)
    assert as_json["requestedBy"] == "admin" and as_json["requestMessage"] == "maintenance"
    assert {o["name"]: o["held"] for o in as_json["referencedBy"]} == {"infra-a": True, "infra-b": True}
    listed = kubectl_gate(plane, "list", "-n", "flux-system").stdout.splitlines()
    assert listed[0].split() == ["NAME", "STATE", "REASON", "UNTIL", "REFERENCED", "BY", "HELD"]
    # Nothing waits at these objects (no new content came): edits are held, no object holds content.
    assert ["infra", "Closed", "CloseRequested", "-", "2", "0"] in [line.split() for line in listed]


def test_get_does_not_call_an_audit_mode_hold_held(plane, server):
    # The webhook lets changes through an audit-mode gate with a warning: `get` must agree.
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(gate("watched", default="closed", mode="audit")))
    assert apply(plane, kustomization("watched-a", gates="flux-system/watched")).returncode == 0
    result = until(
        lambda: kubectl_gate(plane, "get", "watched", "-n", "flux-system"), lambda r: "watched-a" in r.stdout
    )
    assert any(
        line.split() == ["Kustomization", "apps", "watched-a", "audit", "only"]
        for line in result.stdout.splitlines()
    ), result.stdout
    as_json = orjson.loads(kubectl_gate(plane, "get", "watched", "-n", "flux-system", "-o", "json").stdout)
    assert [(o["name"], o["held"], o["mode"]) for o in as_json["referencedBy"]] == [
        ("watched-a", False, "audit")
    ]


def complete(plane, *words: str) -> list[str]:
    """What kubectl's shell completion gets for `kubectl gate WORDS<TAB>` (kubectl __complete is
    what its bash and zsh scripts call; it runs kubectl_complete-gate from PATH)."""
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "KUBECONFIG": str(plane.kubeconfig(ADMIN)),
    }
    result = subprocess.run(
        [plane.kubectl_path, "__complete", "gate", *words],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    return [line.split("\t")[0] for line in result.stdout.splitlines()]


def test_completion_offers_the_clusters_gates_and_namespaces(plane, server):
    plane.kubectl(
        "apply", "-f", "-", input=yaml.safe_dump_all([gate("complete-me"), gate("completely-other")])
    )
    assert complete(plane, "open", "-n", "flux-system", "complete") == [
        "complete-me",
        "completely-other",
        ":4",
    ]
    assert complete(plane, "get", "-n", "flux-system", "complete-") == ["complete-me", ":4"]
    namespaces = complete(plane, "list", "-n", "")
    assert {"apps", "flux-system", "default"} <= set(namespaces) and namespaces[-1] == ":4"


def test_calendar_through_kubectl(plane, server):
    plane.kubectl(
        "apply",
        "-f",
        "-",
        input=yaml.safe_dump_all(
            [
                gate("weekend-freeze", default="opened"),
                {
                    "apiVersion": "gating.toolkit.fluxcd.io/v1alpha1",
                    "kind": "GateKeeper",
                    "metadata": {"name": "weekends", "namespace": "flux-system"},
                    "spec": {
                        "gate": "weekend-freeze",
                        "timeZone": "Europe/Berlin",
                        "cronjob": {"closed": [{"cron": "0 18 * * 5", "duration": "62h"}]},
                    },
                },
            ]
        ),
    )
    result = kubectl_gate(plane, "calendar", "-n", "flux-system", "--days", "14")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(map(len, lines)) <= 100
    heading = next(
        i for i, line in enumerate(lines) if line.startswith("flux-system/weekend-freeze  (Europe/Berlin;")
    )
    assert lines[heading + 2].count("#") >= 2 * 15  # two weekends of 62 h, 4 h a character
    assert "GateKeeper 'weekends' schedule '0 18 * * 5' for 62h0m0s" in result.stdout
    ics = kubectl_gate(plane, "calendar", "-n", "flux-system", "-o", "ics")
    assert ics.stdout.count("SUMMARY:Gate flux-system/weekend-freeze closed") in (2, 3)


def test_check_exit_codes_tell_ci_whether_a_change_would_be_held(plane, server, tmp_path):
    plane.kubectl(
        "apply", "-f", "-", input=yaml.safe_dump_all([gate("ci-closed", closed=True), gate("ci-open")])
    )
    held = tmp_path / "held.yaml"
    held.write_text(kustomization("ci-a", gates="flux-system/ci-closed") + "---\n" + kustomization("ci-b"))
    free = tmp_path / "free.yaml"
    free.write_text(kustomization("ci-c", gates="flux-system/ci-open"))
    result = until(lambda: kubectl_gate(plane, "check", "-f", str(held)), lambda r: r.returncode == 1)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Kustomization apps/ci-a is held: gate 'flux-system/ci-closed' is closed" in result.stdout
    assert kubectl_gate(plane, "check", "-f", str(free)).returncode == 0
    assert kubectl_gate(plane, "check", "-f", "-", stdin=free.read_text()).returncode == 0
    offline = subprocess.run(
        [
            str(BIN / "kubectl-gate"),
            "check",
            "-f",
            str(held),
            "--gates-dir",
            str(ROOT / "examples" / "gates"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        offline.returncode == 1
        and "gate 'flux-system/ci-closed' is closed (Gate not found)" in offline.stdout
    )


def check_rows(plane, manifest: Path, *args: str) -> tuple[int, dict]:
    """`kubectl gate check -o json` as alice, who also applies: each object's row, by name."""
    result = kubectl_gate(
        plane, "check", "-f", str(manifest), "-o", "json", *args, kubeconfig=plane.kubeconfig(ALICE)
    )
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, {row["name"]: row for row in orjson.loads(result.stdout)}


def test_check_says_what_kubectl_apply_then_gets(plane, server, tmp_path):
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([gate("agree-audit"), gate("agree-enforce")]))
    audited, enforced = (
        kustomization("agree-a", gates="flux-system/agree-audit"),
        kustomization("agree-e", gates="flux-system/agree-enforce"),
    )
    for manifest in (audited, enforced):
        assert (
            until(lambda manifest=manifest: apply(plane, manifest), lambda r: r.returncode == 0).returncode
            == 0
        )
    plane.kubectl(
        "apply",
        "-f",
        "-",
        input=yaml.safe_dump_all(
            [gate("agree-audit", closed=True, mode="audit"), gate("agree-enforce", closed=True)]
        ),
    )
    unchanged = tmp_path / "unchanged.yaml"
    unchanged.write_text(audited + "---\n" + enforced)
    code, rows = check_rows(plane, unchanged)
    assert code == 0 and {r["verdict"] for r in rows.values()} == {"allowed"}, (
        rows
    )  # live, unchanged: allowed
    assert {r["operation"] for r in rows.values()} == {"UPDATE"}

    audit_change = kustomization("agree-a", gates="flux-system/agree-audit", path="./v2")
    (tmp_path / "audit.yaml").write_text(audit_change)
    code, rows = check_rows(plane, tmp_path / "audit.yaml")
    row = rows["agree-a"]
    assert code == 0 and (row["verdict"], row["verdictText"]) == (
        "audited",
        "would be allowed with an audit warning",
    ), row
    assert row["message"].startswith(
        "gate audit: change would be denied in enforce mode: Kustomization apps/agree-a "
        "is held: gate 'flux-system/agree-audit' is closed"
    )
    until(lambda: apply(plane, audit_change, "--dry-run=server"), lambda r: "gate audit" in r.stderr)
    applied = apply(plane, audit_change)
    assert applied.returncode == 0 and f"Warning: {row['message']}" in applied.stderr, applied.stderr

    enforce_change = kustomization("agree-e", gates="flux-system/agree-enforce", path="./v2")
    (tmp_path / "enforce.yaml").write_text(enforce_change)
    code, rows = check_rows(plane, tmp_path / "enforce.yaml")
    row = rows["agree-e"]
    assert code == 1 and (row["verdict"], row["verdictText"]) == ("denied", "would be denied"), row
    denied = until(lambda: apply(plane, enforce_change), lambda r: " is held: " in r.stderr)
    assert denied.returncode == 1 and f"denied the request: {row['message']}" in denied.stderr, denied.stderr
    # Against a cluster the webhook's own settings decide (--exempt-users is --gates-dir's): who
    # is judged is who the API server authenticates, here alice, as SelfSubjectReview says.
    assert row["as"]["username"] == "alice" and "developers" in row["as"]["groups"], row


def test_the_receiver_refuses_missing_and_wrong_tokens(plane, server):
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(gate("guarded", closed=True)))
    for token in (None, "wrong-token", TOKEN[:-1]):
        status, out = hook(server, "/hooks/gates/flux-system/guarded/open", token=token)
        assert status == 401 and out == {"error": "missing or wrong bearer token"}
    annotations = plane.kubectl(
        "get", "gate", "guarded", "-n", "flux-system", "-o", "jsonpath={.metadata.annotations}"
    ).stdout
    assert "open.gate.fluxcd.io" not in annotations
    assert hook(server, "/hooks/gates/flux-system/missing/open")[0] == 404


def test_errors_are_one_line_with_an_exit_code(plane, server):
    missing = kubectl_gate(plane, "get", "no-such-gate", "-n", "flux-system")
    assert (
        missing.returncode == 3 and missing.stderr.strip() == "error: gate flux-system/no-such-gate not found"
    )
    forbidden = kubectl_gate(
        plane, "open", "guarded", "-n", "flux-system", kubeconfig=plane.kubeconfig(CONTROLLER)
    )
    assert forbidden.returncode == 4 and forbidden.stderr.startswith("error: forbidden:")
    assert len(forbidden.stderr.strip().splitlines()) == 1
    dead = yaml.safe_load(plane.kubeconfig(ADMIN).read_text())
    dead["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    dead_path = plane.workdir / "kubeconfig-dead"
    dead_path.write_text(yaml.safe_dump(dead))
    unreachable = kubectl_gate(plane, "list", kubeconfig=dead_path)
    assert unreachable.returncode == 5 and unreachable.stderr.startswith("error: no cluster:")


def test_denied_creates_make_no_event_the_object_does_not_exist(plane, server):
    """A review only names an object: an Event is written for a stored object with the review's
    uid, and a denied CREATE's object does not exist (each denial is in the decision log)."""
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(gate("observed-new", closed=True)))
    unverified = 'gate_admission_denial_events_total{result="unverified"}'
    before = server.metrics().get(unverified, 0.0)
    new = kustomization("brand-new", gates="flux-system/observed-new")
    results = [until(lambda: apply(plane, new), lambda r: " is held: " in r.stderr) for _ in range(6)]
    assert all(" is held: " in r.stderr for r in results)

    def events():
        out = plane.kubectl(
            "get",
            "events",
            "-n",
            "apps",
            "--field-selector",
            "involvedObject.name=brand-new,reason=GateClosed",
            "-o",
            "json",
        ).stdout
        return orjson.loads(out)["items"]

    # The denials were looked at (a read of the object, not found), and nothing was written.
    assert until(lambda: server.metrics().get(unverified, 0.0), lambda n: n > before, timeout=40) > before
    assert events() == []


def test_denials_are_events_once_per_period_metrics_move_and_logs_are_json(plane, server):
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(gate("observed", closed=True)))
    assert apply(plane, kustomization("watched")).returncode == 0
    assert (
        apply(plane, kustomization("watched", gates="flux-system/observed")).returncode == 0
    )  # tightening passes
    change = kustomization("watched", gates="flux-system/observed", path="./v2")
    denied = 'gate_admission_reviews_total{kind="Kustomization",mode="enforce",operation="UPDATE",verdict="denied",webhook="validate"}'
    before = server.metrics().get(denied, 0.0)
    results = [until(lambda: apply(plane, change), lambda r: " is held: " in r.stderr) for _ in range(5)]
    assert all(" is held: " in r.stderr for r in results)
    dry = apply(plane, change, "--dry-run=server")
    assert " is held: " in dry.stderr

    def events():
        out = plane.kubectl(
            "get",
            "events",
            "-n",
            "apps",
            "--field-selector",
            "involvedObject.name=watched,reason=GateClosed",
            "-o",
            "json",
        ).stdout
        return orjson.loads(out)["items"]

    items = until(events, lambda e: e and e[0].get("count", 0) >= 5, timeout=30)
    assert len(items) == 1, [e["metadata"]["name"] for e in items]  # once per aggregation period
    event = items[0]
    assert event["type"] == "Warning" and event["involvedObject"]["kind"] == "Kustomization"
    assert event["message"].startswith(
        "Kustomization apps/watched is held: gate 'flux-system/observed' is closed"
    )
    # The API server may ask twice per denied PATCH (it retries from etcd when its cached copy
    # was used), so the count is of reviews, at least one per apply.
    assert event["count"] >= 5
    table = plane.kubectl(
        "get", "events", "-n", "apps", "--field-selector", "involvedObject.name=watched"
    ).stdout
    assert "GateClosed" in table and "kustomization/watched" in table

    after = server.metrics()
    assert after[denied] - before >= 6  # five applies and the dry run
    assert (
        after['gate_admission_gate_open{gate="observed",gate_namespace="flux-system",reason="Default"}']
        == 0.0
    )
    assert after["gate_admission_gate_cache_ready"] == 1.0
    assert after['gate_admission_review_duration_seconds_count{webhook="validate"}'] > 0
    assert after['gate_admission_denial_events_total{result="created"}'] >= 1

    lines = [orjson.loads(line) for line in server.log().splitlines() if line.startswith("{")]
    decisions = [
        l
        for l in lines
        if l["msg"] == "admission decision" and l["object"]["name"] == "watched" and l["verdict"] == "denied"
    ]
    assert decisions, "no decision log line"
    line = decisions[-1]
    assert line["object"] == {"kind": "Kustomization", "namespace": "apps", "name": "watched"}
    assert line["operation"] == "UPDATE" and line["user"] == "alice" and line["mode"] == "enforce"
    assert line["gates"] == {
        "require": "all",
        "status": [{"gate": "flux-system/observed", "closed": "true", "reason": "Default"}],
    }
    assert "object" not in str(line.get("reason", "")) and "spec" not in line  # no whole objects


def test_receiver_calls_are_counted_and_tokens_never_logged(plane, server):
    before = server.metrics().get('gate_admission_receiver_calls_total{result="unauthorized"}', 0.0)
    assert hook(server, "/hooks/gates/flux-system/guarded/open", token="not-the-token")[0] == 401
    assert hook(server, "/hooks/gates/flux-system/guarded/close", body={"message": "drill"})[0] == 200
    after = server.metrics()
    assert after['gate_admission_receiver_calls_total{result="unauthorized"}'] - before >= 1
    assert after['gate_admission_receiver_calls_total{result="ok"}'] >= 1
    log = server.log()
    assert TOKEN not in log and "not-the-token" not in log
    assert GATE_ADMISSION.token not in log  # nor the server's own API credentials
    toggles = [
        orjson.loads(l) for l in log.splitlines() if l.startswith("{") and "closing gate: 'drill'" in l
    ]
    assert toggles and toggles[0]["via"] == "receiver" and toggles[0]["Gate"]["name"] == "guarded"


def insecure_kubeconfig(plane, user, name: str) -> Path:
    config = yaml.safe_load(plane.kubeconfig(user).read_text())
    cluster = config["clusters"][0]["cluster"]
    cluster.pop("certificate-authority", None)
    cluster["insecure-skip-tls-verify"] = True
    path = plane.workdir / name
    path.write_text(yaml.safe_dump(config))
    return path


def test_insecure_kubeconfigs_keep_logs_json_and_kubectl_gate_quiet(plane, tmp_path):
    """urllib3's InsecureRequestWarning on every API request: one JSON line instead (bounded logs)."""
    listed = kubectl_gate(
        plane, "list", "-A", kubeconfig=insecure_kubeconfig(plane, ADMIN, "kubeconfig-insecure-admin")
    )
    assert listed.returncode == 0, listed.stderr
    assert "Warning" not in listed.stderr, listed.stderr
    server = start_server(
        tmp_path,
        None,
        "--kubeconfig",
        str(insecure_kubeconfig(plane, GATE_ADMISSION, "kubeconfig-insecure")),
        "--stale-after",
        "2",
        "--event-period",
        "0",
    )
    try:
        # Watches renew every second with --stale-after 2: each is a request urllib3 would warn about.
        def watches() -> int:
            return sum(
                1
                for line in plane.audit_log.read_text().splitlines()
                if '"verb":"watch"' in line and GATE_ADMISSION.name in line
            )

        before = watches()
        assert until(watches, lambda n: n >= before + 6, timeout=30) >= before + 6
        lines = [
            line for line in server.log().splitlines() if line.strip()
        ]  # --generate-certs' note is JSON too
        not_json = [line for line in lines if not line.startswith("{")]
        assert not not_json, not_json[:5]
        assert any("certificate is not verified" in line for line in lines)
    finally:
        server.stop()


def test_a_controller_that_cannot_hold_its_lease_says_so_and_exits(plane, tmp_path):
    result = subprocess.run(
        [
            str(BIN / "gate-admission"),
            "controller",
            "--kubeconfig",
            str(plane.kubeconfig(CONTROLLER)),
            "--lease-namespace",
            "no-such-namespace",
            "--health-port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    # One plain line says why (the background threads' JSON lines may come after it).
    assert any(
        line.startswith(
            "gate-admission controller: cannot hold Lease no-such-namespace/gate-admission-controller"
        )
        for line in result.stderr.splitlines()
    ), result.stderr[-2000:]
