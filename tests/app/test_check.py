"""`kubectl gate check` and POST /validate are one decision path: same verdict, same message."""

from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path

import orjson
import pytest
import yaml
from hypothesis import HealthCheck, event, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from admission.cli import kubectl_gate
from admission.cli.check import ALLOWED, AUDITED, DENIED, judge
from admission.cli.cluster import Impersonation, kubeconfig_impersonation
from admission.core.admission.applied import user_info
from admission.core.admission.decision import Context, Settings
from admission.core.base.names import LAST_APPLIED_ANNOTATION
from admission.store.files import FileStore
from admission.webhook.app import create_app
from tests.builders import FLUX_KINDS, applied_live, flux, gate, request, review
from tests.conftest import FIXED_NOW, write_gates


def as_the_api_server_sends_it(manifest: dict, live: dict) -> dict:
    """The object of the UPDATE `kubectl apply` causes, built without admission.core.admission.applied:
    the manifest, with the server's metadata, the live status and the new last-applied copy."""
    new = copy.deepcopy(manifest)
    meta = new["metadata"]
    meta.update(uid=live["metadata"]["uid"], resourceVersion="42", generation=3)
    meta.setdefault("annotations", {})[LAST_APPLIED_ANNOTATION] = json.dumps(manifest)
    if "status" in live:
        new["status"] = copy.deepcopy(live["status"])
    return new


def webhook_answer(client, req: dict) -> tuple[str, str | None]:
    response = client.post("/validate", data=orjson.dumps(review(req)), content_type="application/json")
    assert response.status_code == 200
    answer = response.get_json()["response"]
    if not answer["allowed"]:
        return DENIED, answer["status"]["message"]
    if answer.get("warnings"):
        return AUDITED, "; ".join(answer["warnings"])
    return ALLOWED, answer.get("auditAnnotations", {}).get("exempt")  # why an exempt user passes


class Webhook:
    """The app over a gates directory, and the same store's lookup for the check path."""

    def __init__(self, directory: Path, gates: list[dict], settings: Settings):
        write_gates(directory, gates)
        self.store = FileStore(directory)
        # No /calendar.ics: its builder thread would keep each example's store (and its inotify
        # instance, of a per-user 128) alive for the whole session.
        app = create_app(self.store, settings, clock=lambda: FIXED_NOW, calendar=False)
        app.testing = True
        self.client = app.test_client()
        self.settings = settings

    def both(self, manifest: dict, live: dict | None, user: dict) -> tuple[tuple, tuple]:
        checked = judge(
            copy.deepcopy(manifest), live, user, Context(self.store.index.lookup, FIXED_NOW, self.settings)
        )
        if live is None:
            req = request("CREATE", copy.deepcopy(manifest), user=user)
        else:
            req = request(
                "UPDATE", as_the_api_server_sends_it(manifest, live), copy.deepcopy(live), user=user
            )
        return (checked["verdict"], checked["message"]), webhook_answer(self.client, req)


ALICE = user_info("alice", ["developers"])


@pytest.fixture
def webhook(gates_dir):
    return lambda gates, settings=None: Webhook(gates_dir, gates, settings or Settings())


def test_an_unchanged_or_relabelled_live_object_is_allowed_while_its_gate_is_closed(webhook):
    hook = webhook([gate("freeze", closed=True)])
    manifest = flux(gates="flux-system/freeze")
    live = applied_live(manifest, status={"observedGeneration": 3})
    assert hook.both(manifest, live, ALICE) == ((ALLOWED, None), (ALLOWED, None))
    relabelled = copy.deepcopy(manifest)
    relabelled["metadata"]["labels"] = {"team": "web"}
    relabelled["metadata"]["annotations"]["note"] = "hello"
    assert hook.both(relabelled, live, ALICE) == ((ALLOWED, None), (ALLOWED, None))


def test_a_spec_change_is_denied_in_enforce_and_audited_in_audit_with_the_webhooks_message(webhook):
    change = flux(gates="flux-system/freeze", spec={"interval": "10m", "path": "./v2"})
    live = applied_live(flux(gates="flux-system/freeze"))
    checked, answered = webhook([gate("freeze", closed=True)]).both(change, live, ALICE)
    assert checked == answered and checked[0] == DENIED
    assert checked[1] == (
        "Kustomization apps/podinfo is held: gate 'flux-system/freeze' is closed "
        "(Gate closed by default); require=all; changed: spec.path"
    )
    checked, answered = webhook([gate("freeze", closed=True, mode="audit")]).both(change, live, ALICE)
    assert checked == answered and checked[0] == AUDITED
    assert checked[1].startswith(
        "gate audit: change would be denied in enforce mode: Kustomization apps/podinfo is held"
    )


def test_exempt_users_and_groups_are_allowed_as_by_the_server(webhook):
    hook = webhook(
        [gate("freeze", closed=True)],
        Settings(exempt_users=frozenset({"bob"}), exempt_groups=frozenset({"sre"})),
    )
    manifest = flux(gates="flux-system/freeze")
    for user in (user_info("bob"), user_info("carol", ["sre"])):
        checked, answered = hook.both(manifest, None, user)
        assert checked[0] == answered[0] == ALLOWED


# -- the command itself, offline ------------------------------------------------------------


def run(capsys, *argv: str) -> tuple[int, str]:
    code = kubectl_gate.main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


@pytest.fixture
def offline(gates_dir, tmp_path):
    write_gates(gates_dir, [gate("freeze", closed=True), gate("soft", closed=True, mode="audit")])
    manifest = tmp_path / "apps.yaml"
    manifest.write_text(
        yaml.safe_dump_all(
            [
                flux(name="frozen", gates="flux-system/freeze"),
                flux(name="audited", gates="flux-system/soft"),
                flux(name="free"),
                {"apiVersion": "v1", "kind": "ConfigMap"},
            ]
        )
    )
    return ("check", "-f", str(manifest), "--gates-dir", str(gates_dir), "-o", "json")


def test_check_offline_reports_each_object_and_exits_1_only_for_a_denial(capsys, offline):
    code, out = run(capsys, *offline)
    rows = {r["name"]: r for r in json.loads(out)}
    assert code == 1 and set(rows) == {"frozen", "audited", "free"}
    assert rows["frozen"]["verdict"] == DENIED and rows["frozen"]["operation"] == "CREATE"
    assert (
        rows["audited"]["verdict"] == AUDITED
        and "gate 'flux-system/soft' is closed" in rows["audited"]["message"]
    )
    assert rows["free"] == {**rows["free"], "verdict": ALLOWED, "message": None}

    code, out = run(capsys, *offline, "--mode", "audit")  # the server-wide default mode
    assert code == 0 and {r["verdict"] for r in json.loads(out)} == {AUDITED, ALLOWED}


def test_check_json_says_the_verdict_as_a_stable_token_with_the_sentence_beside_it(capsys, offline):
    code, out = run(capsys, *offline)
    rows = {r["name"]: (r["verdict"], r["verdictText"]) for r in json.loads(out)}
    assert rows == {
        "frozen": ("denied", "would be denied"),
        "audited": ("audited", "would be allowed with an audit warning"),
        "free": ("allowed", "allowed"),
    }
    code, out = run(capsys, *offline[:-2], "-o", "yaml")
    assert {r["name"]: r["verdict"] for r in yaml.safe_load(out)} == {
        "frozen": "denied",
        "audited": "audited",
        "free": "allowed",
    }
    code, table = run(capsys, *offline[:-2])  # the table is for people: the sentence, as before
    lines = table.splitlines()
    assert lines[0].split() == ["KIND", "NAMESPACE", "NAME", "VERDICT", "MESSAGE"]
    frozen = next(line for line in lines if " frozen " in line)
    assert frozen[lines[0].index("VERDICT") :].startswith("would be denied  ") and "verdictText" not in table


def test_check_takes_the_servers_exempt_lists_from_flags_or_the_same_variables(capsys, offline, monkeypatch):
    # An exemption is recorded where a gate could hold: an object that references none is
    # simply allowed, as the API server never sends it (admission.core.admission.matching).
    code, out = run(capsys, *offline, "--judge-as", "bob", "--exempt-users", "bob")
    assert code == 0 and {r["name"]: r["message"] for r in json.loads(out)} == {
        "frozen": "user 'bob' is exempt",
        "audited": "user 'bob' is exempt",
        "free": None,
    }
    monkeypatch.setenv("GATE_ADMISSION_EXEMPT_GROUPS", "release-managers")
    code, out = run(
        capsys,
        *offline,
        "--judge-as",
        "carol",
        "--judge-as-group",
        "devs",
        "--judge-as-group",
        "release-managers",
    )
    assert code == 0 and {r["message"] for r in json.loads(out)} == {
        "group 'release-managers' is exempt",
        None,
    }
    code, out = run(capsys, *offline, "--judge-as-group", "release-managers")
    assert code == 2 and "--judge-as-group needs --judge-as" in out


# -- the property ---------------------------------------------------------------------------

GATE_NAMES = ["g0", "g1", "g2", "gone"]  # "gone" is never defined: NotFound, closed
USERS = ["alice", "bob", "system:serviceaccount:flux-system:kustomize-controller"]
GROUPS = ["developers", "sre"]

gate_specs = st.fixed_dictionaries(
    {"default": st.sampled_from(["opened", "closed"])},
    optional={"mode": st.sampled_from(["audit", "enforce"])},
)


@st.composite
def manifests(draw, kind: str, name: str = "obj") -> dict:
    refs = draw(st.lists(st.sampled_from(GATE_NAMES), max_size=3, unique=True))
    require = draw(st.sampled_from([None, "all", "oneOf"]))
    labels = draw(st.sampled_from([None, {"team": "web"}, {"team": "db"}]))
    spec = {"interval": draw(st.sampled_from(["1m", "10m"])), "path": draw(st.sampled_from(["./a", "./b"]))}
    if draw(st.booleans()):
        spec["suspend"] = draw(st.booleans())
    return flux(
        kind,
        name,
        gates=", ".join(f"flux-system/{r}" for r in refs) if refs else None,
        require=require,
        labels=labels,
        spec=spec,
    )


@st.composite
def cases(draw):
    kind = draw(st.sampled_from(FLUX_KINDS))
    gates = [gate(n, **draw(gate_specs)) for n in GATE_NAMES[:3] if draw(st.booleans())]
    manifest = draw(manifests(kind))
    live = None
    if draw(st.booleans()):
        previous = manifest if draw(st.booleans()) else draw(manifests(kind))
        status = draw(st.sampled_from([None, {"observedGeneration": 1}]))
        live = applied_live(previous, status)
    user = user_info(draw(st.sampled_from(USERS)), draw(st.lists(st.sampled_from(GROUPS), unique=True)))
    exempt = st.one_of(
        st.just(frozenset()),
        st.just(frozenset()),
        st.just(frozenset()),
        st.sampled_from(USERS + GROUPS).map(lambda n: frozenset({n})),
    )
    config = Settings(draw(st.sampled_from(["enforce", "audit"])), draw(exempt), draw(exempt))
    return gates, manifest, live, user, config


@hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_check_and_validate_agree_on_every_verdict_and_message(case):
    gates, manifest, live, user, config = case
    with tempfile.TemporaryDirectory() as directory:
        checked, answered = Webhook(Path(directory), gates, config).both(manifest, live, user)
    event(f"{'UPDATE' if live else 'CREATE'}: {checked[0]}")
    assert checked == answered


def test_a_kubeconfig_users_impersonation_is_read_as_kubectl_reads_it(tmp_path):
    # The Python client ignores a user entry's `as`: without this, check would dry-run (and say
    # it is) someone other than kubectl apply with the same kubeconfig.
    config = tmp_path / "kubeconfig"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "users": [
                    {"name": "plain", "user": {"token": "t"}},
                    {"name": "sudo", "user": {"token": "t", "as": "carol", "as-groups": ["sre", "oncall"]}},
                ],
            }
        )
    )
    args = kubectl_gate.build_parser().parse_args(["check", "-f", "-", "--kubeconfig", str(config)])
    assert kubeconfig_impersonation(args, "sudo") == Impersonation("carol", ("sre", "oncall"))
    assert kubeconfig_impersonation(args, "plain") is None
    assert kubeconfig_impersonation(args, None) is None


def test_judge_as_is_the_new_spelling_and_as_still_works_with_a_warning(capsys, offline):
    code, out = run(capsys, *offline, "--judge-as", "bob", "--exempt-users", "bob")
    captured_new = {r["name"]: r["message"] for r in json.loads(out)}
    assert code == 0 and captured_new["frozen"] == "user 'bob' is exempt"
    assert kubectl_gate.main([*offline, "--as", "bob", "--as-group", "x", "--exempt-users", "bob"]) == 0
    captured = capsys.readouterr()
    assert {r["name"]: r["message"] for r in json.loads(captured.out)} == captured_new
    assert captured.err.splitlines() == [
        "warning: check --as is deprecated and goes in the next release: use --judge-as",
        "warning: check --as-group is deprecated and goes in the next release: use --judge-as-group",
    ]
    rows = json.loads(run(capsys, *offline, "--judge-as", "bob", "--judge-as-group", "sre")[1])
    assert [r["as"] for r in rows] == [{"username": "bob", "groups": ["sre", "system:authenticated"]}] * 3


def test_against_a_cluster_the_servers_settings_decide_so_flags_saying_otherwise_are_usage_errors(
    capsys, tmp_path, monkeypatch
):
    manifest = tmp_path / "apps.yaml"
    manifest.write_text(yaml.safe_dump(flux(gates="flux-system/freeze")))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))  # found before any cluster is looked for
    for flags in (["--exempt-users", "bob"], ["--mode", "audit"], ["--exempt-groups", "sre"]):
        code, out = run(capsys, "check", "-f", str(manifest), *flags)
        assert (
            code == 2
            and out
            == f"error: {flags[0]}: only with --gates-dir (against a cluster, the webhook's own settings decide)\n"
        )
    code, out = run(capsys, "check", "-f", str(manifest), "--gates-dir", str(tmp_path), "--force-conflicts")
    assert code == 2 and "--force-conflicts go with a cluster" in out


def test_odd_manifests_get_an_answer_or_a_clear_error_never_a_crash(capsys, gates_dir, tmp_path):
    write_gates(gates_dir, [gate("freeze", closed=True)])
    odd = tmp_path / "odd.yaml"
    broken = flux(name="odd", gates="flux-system/freeze")
    broken["metadata"]["annotations"] = ["not", "a", "map"]
    odd.write_text(yaml.safe_dump_all([{"kind": ["x"], "apiVersion": 3}, {"kind": "Kustomization"}, broken]))
    code, out = run(capsys, "check", "-f", str(odd), "--gates-dir", str(gates_dir), "-o", "json")
    assert code == 0 and [(r["name"], r["verdict"]) for r in json.loads(out)] == [
        ("odd", ALLOWED)
    ]  # names no gate
    deep = tmp_path / "deep.yaml"
    deep.write_text(
        json.dumps(flux(name="deep", spec={"x": "NESTED"})).replace(
            '"NESTED"', '{"a":' * 3000 + "1" + "}" * 3000
        )
    )
    code, out = run(capsys, "check", "-f", str(deep), "--gates-dir", str(gates_dir))
    assert code == 2 and out.startswith("error: ") and len(out.strip().splitlines()) == 1


def test_a_broken_gates_file_is_reported_on_stderr_with_exit_6_never_a_traceback(capsys, gates_dir, tmp_path):
    (gates_dir / "list.yaml").write_text("apiVersion: v1\nkind: List\nitems: 5\n")
    write_gates(gates_dir, [gate("freeze", closed=True), gate("release")])
    manifest = tmp_path / "apps.yaml"
    manifest.write_text(yaml.safe_dump_all([flux(name="free", gates="flux-system/release")]))
    why = (
        "error: --gates-dir: gates file list.yaml is broken: document 1 is a List whose items are not a list"
    )

    assert (
        kubectl_gate.main(["list", "--gates-dir", str(gates_dir), "-A", "-o", "json"])
        == kubectl_gate.EXIT_BAD_GATES_DIR
        == 6
    )
    out = capsys.readouterr()
    assert {r["name"]: r["state"] for r in json.loads(out.out)} == {"freeze": "Closed", "release": "Opened"}
    assert out.err.strip() == why
    # check: the verdicts are the server's with that directory; a broken file is exit 6...
    assert kubectl_gate.main(["check", "-f", str(manifest), "--gates-dir", str(gates_dir), "-o", "json"]) == 6
    out = capsys.readouterr()
    assert [r["verdict"] for r in json.loads(out.out)] == [ALLOWED] and out.err.strip() == why
    # ...unless something would be denied: 1, as ever.
    manifest.write_text(yaml.safe_dump_all([flux(name="frozen", gates="flux-system/freeze")]))
    assert kubectl_gate.main(["check", "-f", str(manifest), "--gates-dir", str(gates_dir)]) == 1
    assert "Traceback" not in capsys.readouterr().err


def test_a_gates_file_that_cannot_be_parsed_closes_what_it_may_define_for_check_too(
    capsys, gates_dir, tmp_path
):
    write_gates(gates_dir, [gate("release")])
    (gates_dir / "keepers.yaml").write_text(
        "kind: GateKeeper\nmetadata: {name: freeze, namespace: flux-system\n"
    )
    manifest = tmp_path / "apps.yaml"
    manifest.write_text(yaml.safe_dump_all([flux(name="app", gates="flux-system/release")]))
    code, out = run(capsys, "check", "-f", str(manifest), "--gates-dir", str(gates_dir), "-o", "json")
    assert code == 1 and "gate state unknown: gates file keepers.yaml is broken" in out


def test_a_manifest_holding_a_list_whose_items_are_not_a_list_is_checked_not_a_traceback(
    capsys, gates_dir, tmp_path
):
    write_gates(gates_dir, [gate("freeze", closed=True)])
    manifest = tmp_path / "apps.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: List\nitems: 5\n---\n" + yaml.safe_dump(flux(gates="flux-system/freeze"))
    )
    code, out = run(capsys, "check", "-f", str(manifest), "--gates-dir", str(gates_dir), "-o", "json")
    assert code == 1 and [r["verdict"] for r in json.loads(out)] == [DENIED]


def test_check_warns_when_an_objects_inputs_are_gated_differently(capsys, gates_dir, tmp_path):
    # Half a release (docs/decisions/0057): its source, a HelmRelease's valuesFrom, the
    # automation an ImagePolicy feeds; looked up in the manifest (and the cluster, when there is one).
    write_gates(gates_dir, [gate("freeze", closed=True), gate("release")])
    git = {"kind": "GitRepository", "name": "podinfo"}
    manifest = tmp_path / "apps.yaml"
    manifest.write_text(
        yaml.safe_dump_all(
            [
                flux(
                    "GitRepository",
                    "podinfo",
                    gates="flux-system/release",
                    spec={"interval": "1m", "url": "https://x"},
                ),
                flux(name="app", gates="flux-system/freeze", spec={"interval": "10m", "sourceRef": git}),
                flux(name="same", gates="flux-system/release", spec={"interval": "10m", "sourceRef": git}),
                flux(name="ungated", spec={"interval": "10m", "sourceRef": git}),
                flux(
                    "HelmRelease",
                    "web",
                    gates="flux-system/release",
                    spec={
                        "interval": "10m",
                        "chart": {
                            "spec": {"chart": "web", "sourceRef": {"kind": "HelmRepository", "name": "c"}}
                        },
                        "valuesFrom": [{"kind": "ConfigMap", "name": "web-values"}],
                    },
                ),
                flux(
                    "ImagePolicy",
                    "web",
                    gates="flux-system/release",
                    spec={"imageRepositoryRef": {"name": "web"}},
                ),
                flux("ImageUpdateAutomation", "auto", spec={"interval": "1m", "sourceRef": git}),
            ]
        )
    )
    code, out = run(capsys, "check", "-f", str(manifest), "--gates-dir", str(gates_dir), "-o", "json")
    warned = {r["name"] if r["kind"] != "ImagePolicy" else "policy": r["warnings"] for r in json.loads(out)}
    assert code == 1  # app is new and its gate is closed
    assert (
        warned["same"] == warned["ungated"] == warned["podinfo"] == warned["auto"] == []
    )  # (ungated: nothing to approve)
    assert [w.split(":")[0] for w in warned["app"]] == [
        "its source GitRepository/apps/podinfo is gated by flux-system/release, it by flux-system/freeze"
    ]
    assert warned["web"][0].startswith("its values come from ConfigMap/apps/web-values, which no gate holds")
    assert warned["policy"][0].startswith(
        "it feeds ImageUpdateAutomation/apps/auto, whose commits wait at "
        "GitRepository/apps/podinfo, gated by flux-system/release"
    )
    code, table = run(capsys, "check", "-f", str(manifest), "--gates-dir", str(gates_dir))
    warnings = [line for line in table.splitlines() if line.startswith("  warning: ")]
    assert [w.split(": ")[1] for w in warnings] == [
        "Kustomization/apps/app",
        "HelmRelease/apps/web",
        "ImagePolicy/apps/web",
    ]
