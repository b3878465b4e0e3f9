"""The open/close/approve receiver in process: authentication, limits, bodies, what it writes,
and who the webhook then records as the approver."""

from __future__ import annotations

import base64

import orjson
import pytest

from admission.core.admission.decision import Context, Settings
from admission.core.base.names import (
    APPROVAL_ANNOTATION_PREFIX,
    CLOSE_ANNOTATION,
    MESSAGE_ANNOTATION,
    OPEN_ANNOTATION,
    REQUESTED_BY_ANNOTATION,
    TOGGLED_BY_ANNOTATION,
)
from admission.store.files import FileStore
from admission.webhook import handlers
from admission.webhook.app import create_app
from admission.webhook.receiver import RateLimit, ReceiverTokens, TokenFile, blueprint
from tests.builders import APPROVAL_KEY, gate, lookup_from, request
from tests.conftest import FIXED_NOW

TOKEN = "s3cret-token-value"
# Named tokens, scoped (docs/decisions/0065): one may approve anywhere, one may only open gates
# of namespace apps, one may close and approve one gate only.
CI, APPS_OPENER, RELEASE = "ci-token-0123456789", "apps-token-0123456789", "release-token-0123456789"
TOKENS = f"""
- name: ci
  token: {CI}
  actions: [open, close, approve]
- name: apps-opener
  token: {APPS_OPENER}
  namespaces: [apps]
  actions: [open]
- name: release-gate
  token: {RELEASE}
  gates: [flux-system/bypass-signoff]
  actions: [close, approve]
"""


class Gates:
    """Stands in for the API server's Gate objects: the receiver's only outside call."""

    def __init__(self, existing=("flux-system/bypass-signoff",)):
        self.existing, self.patches = set(existing), []
        self.accept_all = False  # a writer that would send whatever it is given to the API server
        self.refuse: str | None = None  # the API server's answer when RBAC forbids the write

    def patch(self, namespace, name, patch):
        if self.refuse:
            raise PermissionError(self.refuse)
        if not self.accept_all and f"{namespace}/{name}" not in self.existing:
            raise LookupError(name)
        self.patches.append((namespace, name, patch))


def _receiver(tmp_path, gates_dir, tokens: str):
    token_file = tmp_path / "token"
    token_file.write_text(tokens)
    gates = Gates(("flux-system/bypass-signoff", "apps/release"))
    limit = RateLimit(rate=0.0001, burst=5)
    results = []
    app = create_app(
        FileStore(gates_dir),
        clock=lambda: FIXED_NOW,
        receiver=blueprint(
            ReceiverTokens(str(token_file)), gates.patch, lambda: FIXED_NOW, limit, results.append
        ),
    )
    return app.test_client(), gates, results, token_file


@pytest.fixture
def receiver(tmp_path, gates_dir):
    """The receiver with one bare token, as configured before tokens had names."""
    return _receiver(tmp_path, gates_dir, TOKEN + "\n")


@pytest.fixture
def approver(tmp_path, gates_dir):
    """The receiver with named, scoped tokens (TOKENS)."""
    return _receiver(tmp_path, gates_dir, TOKENS)


def call(client, action="open", body=None, token=TOKEN, gate="flux-system/bypass-signoff"):
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    data = body if isinstance(body, bytes) else orjson.dumps(body) if body is not None else b""
    return client.post(
        f"/hooks/gates/{gate}/{action}", data=data, headers=headers, content_type="application/json"
    )


def test_open_with_message_and_duration(receiver):
    client, gates, results, _ = receiver
    resp = call(client, body={"message": "Patching a CVE", "for": "2h", "requestedBy": "chatops:bob"})
    assert resp.status_code == 200
    assert resp.get_json() == {
        "gate": "flux-system/bypass-signoff",
        "action": "open",
        "requestedAt": "2026-06-10T12:00:00.000000Z",
        "closesAt": "2026-06-10T14:00:00.000000Z",
    }
    assert gates.patches == [
        (
            "flux-system",
            "bypass-signoff",
            {
                "metadata": {
                    "annotations": {
                        OPEN_ANNOTATION: "2026-06-10T12:00:00.000000Z",
                        CLOSE_ANNOTATION: "2026-06-10T14:00:00.000000Z",
                        MESSAGE_ANNOTATION: "Patching a CVE",
                        REQUESTED_BY_ANNOTATION: "gate-admission-receiver for 'chatops:bob' (unverified)",
                        # The token, for our webhook to record beside the receiver's account.
                        TOGGLED_BY_ANNOTATION: '{"by":"gate-admission-receiver"}',
                    }
                }
            },
        )
    ]
    assert results == ["ok"]


def test_close_without_a_body(receiver):
    client, gates, _, _ = receiver
    assert call(client, "close").status_code == 200
    annotations = gates.patches[0][2]["metadata"]["annotations"]
    assert (
        CLOSE_ANNOTATION in annotations and annotations[REQUESTED_BY_ANNOTATION] == "gate-admission-receiver"
    )


@pytest.mark.parametrize("token", [None, "", "wrong", TOKEN + "x", TOKEN[:-1], "Bearer"])
def test_missing_or_wrong_tokens_are_refused(receiver, token):
    client, gates, results, _ = receiver
    resp = call(client, token=token)
    assert resp.status_code == 401 and resp.get_json() == {"error": "missing or wrong bearer token"}
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    assert gates.patches == [] and results == ["unauthorized"]


def test_other_schemes_are_refused(receiver):
    client, gates, _, _ = receiver
    resp = client.post(
        "/hooks/gates/flux-system/bypass-signoff/open", headers={"Authorization": f"Basic {TOKEN}"}
    )
    assert resp.status_code == 401 and gates.patches == []


def test_a_rotated_token_file_takes_effect(receiver):
    client, _, _, token_file = receiver
    token_file.write_text("the-new-token-of-another-length")
    assert call(client).status_code == 401
    assert call(client, token="the-new-token-of-another-length").status_code == 200


@pytest.mark.parametrize(
    "body, why",
    [
        (b"not json", "body must be JSON"),
        ([1], "body must be a JSON object"),
        ({"message": 5}, "message must be a string"),
        ({"message": "x" * 2000}, "at most 1024"),
        ({"for": "soon"}, "invalid duration"),
        ({"reason": "x"}, "unknown fields"),
        ({"message": "ok\r\x1b[2KFAKE: gate freeze is OPEN"}, "control characters"),
        ({"message": "two\nlines"}, "control characters"),
        ({"message": "rtl \u202e override"}, "control characters"),
        ({"requestedBy": "bob\x1b]0;title\x07"}, "control characters"),
    ],
)
def test_bad_bodies_get_400(receiver, body, why):
    client, gates, _, _ = receiver
    resp = call(client, body=body)
    assert resp.status_code == 400 and why in resp.get_json()["error"] and gates.patches == []


def test_unknown_gate_and_unknown_action(receiver):
    client, _, results, _ = receiver
    assert call(client, gate="flux-system/nope").status_code == 404
    resp = call(client, action="toggle")
    assert resp.status_code == 404 and "use open, close or approve" in resp.get_json()["error"]


def test_a_flood_of_bad_tokens_is_limited_without_locking_out_good_calls(receiver):
    client, gates, results, _ = receiver
    codes = [call(client, token="wrong").status_code for _ in range(8)]
    assert codes[:5] == [401] * 5 and codes[5:] == [429] * 3
    assert call(client).status_code == 200  # authenticated first, limited on its own


def test_authenticated_calls_are_limited_per_caller(receiver):
    client, gates, results, _ = receiver
    codes = [call(client).status_code for _ in range(7)]
    assert codes[:5] == [200] * 5 and codes[5:] == [429] * 2
    other = client.post(
        "/hooks/gates/flux-system/bypass-signoff/open",
        headers={"Authorization": f"Bearer {TOKEN}"},
        environ_base={"REMOTE_ADDR": "10.0.0.9"},
    )
    assert other.status_code == 200
    resp = call(client)
    assert resp.status_code == 429 and resp.headers["Retry-After"] == "1"


def test_a_deleted_token_file_accepts_no_token(receiver):
    client, gates, results, token_file = receiver
    assert call(client).status_code == 200
    token_file.unlink()
    assert call(client).status_code == 401
    token_file.write_text("a-new-token\n")
    assert call(client, token="a-new-token").status_code == 200


def test_requested_by_without_a_caller_value_is_the_receiver(receiver):
    client, gates, results, _ = receiver
    assert call(client, action="close").status_code == 200
    assert (
        gates.patches[-1][2]["metadata"]["annotations"][REQUESTED_BY_ANNOTATION] == "gate-admission-receiver"
    )


def test_a_missing_or_empty_token_file_is_an_error(tmp_path):
    with pytest.raises(OSError):
        TokenFile(str(tmp_path / "none"))
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ValueError, match="empty"):
        TokenFile(str(tmp_path / "empty"))


@pytest.mark.parametrize(
    "gate_path",
    [
        "../bypass-signoff",
        "%2e%2e/bypass-signoff",
        "flux-system/..",
        "flux-system/%2E%2E",
        "Flux-System/bypass-signoff",
        "flux-system/a%20b",
        "flux-system/" + "a" * 254,
        "-x/bypass-signoff",
        "flux-system/a..b",
    ],
)
def test_a_namespace_or_name_that_is_not_a_gates_is_refused_before_anything_else(receiver, gate_path):
    client, gates, results, _ = receiver
    gates.accept_all = True
    resp = call(client, gate=gate_path)
    assert resp.status_code in (400, 404), resp.status_code  # 404: the router found no such route
    assert gates.patches == []
    if resp.status_code == 400 and results:
        assert "DNS-1123" in resp.get_json()["error"] and results == ["bad_request"]
    elif (
        resp.status_code == 400
    ):  # not a path in its one spelling: refused before any route (docs/decisions/0053)
        assert "path" in resp.get_json()["error"]


def test_dot_dot_as_the_namespace_never_reaches_the_gate_writer(receiver):
    client, gates, results, _ = receiver
    gates.accept_all = True
    resp = client.post(
        "/hooks/gates/%2E%2E/bypass-signoff/open", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert resp.status_code == 400 and gates.patches == [] and "path" in resp.get_json()["error"]


def test_a_token_file_replaced_by_a_directory_accepts_no_token_and_says_why(receiver, caplog):
    client, gates, results, token_file = receiver
    assert call(client).status_code == 200
    token_file.unlink()
    token_file.mkdir()
    with caplog.at_level("WARNING", logger="admission.receiver"):
        assert call(client).status_code == 401
        assert call(client).status_code == 401
    [why] = [r.getMessage() for r in caplog.records if r.name == "admission.receiver"]  # once, not per call
    assert "no token is accepted" in why and "IsADirectoryError" in why
    token_file.rmdir()
    token_file.write_text("a-new-token\n")
    assert call(client, token="a-new-token").status_code == 200


def test_an_emptied_token_file_accepts_no_token(receiver):
    client, _, _, token_file = receiver
    token_file.write_text("\n")
    assert call(client).status_code == 401 and call(client, token="").status_code == 401


WORKER = """
import sys
from admission.core.admission.decision import Context, Settings
from admission.core.base.names import APPROVAL_ANNOTATION_PREFIX
from admission.webhook import handlers
from admission.webhook.app import create_app
from admission.webhook.receiver import RateLimit, ReceiverTokens, blueprint
from admission.store.files import FileStore
from tests.builders import gate, lookup_from, request
from tests.conftest import FIXED_NOW
token, gates, shared, calls = sys.argv[1:5]
hooks = blueprint(ReceiverTokens(token), lambda ns, name, patch: None, lambda: FIXED_NOW,
                  RateLimit(rate=0.0, burst=10), limits_dir=shared)
client = create_app(FileStore(gates), receiver=hooks).test_client()
codes = [client.post("/hooks/gates/flux-system/bypass-signoff/open",
                     headers={"Authorization": "Bearer %s" % open(token).read().strip()}).status_code
         for _ in range(int(calls))]
print(codes.count(200))
"""


def test_the_rate_limit_holds_across_worker_processes(tmp_path, gates_dir):
    """Two processes (gunicorn's workers) share one limit: bursts of 10 for the pod, not per worker."""
    import subprocess
    import sys
    from pathlib import Path

    token = tmp_path / "token"
    token.write_text(TOKEN)
    shared = tmp_path / "shared"
    shared.mkdir()
    repo = Path(__file__).resolve().parents[2]
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(token), str(gates_dir), str(shared), "30"],
            cwd=repo,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    granted = [int(worker.communicate(timeout=120)[0].strip() or 0) for worker in workers]
    assert sum(granted) == 10, granted


# -- approve: an approval of exact content (docs/decisions/0057) -----------------------------

RECEIVER_SA = "system:serviceaccount:gate-admission-system:gate-admission-receiver"
REVISION = "main@sha1:9f2c"


def with_uid(obj: dict) -> dict:
    obj["metadata"]["uid"] = "uid-bypass-signoff"
    return obj


def approval_written(gates) -> tuple[str, dict]:
    [(_, _, patch)] = gates.patches
    [(key, value)] = patch["metadata"]["annotations"].items()
    return key, orjson.loads(value)


def test_approve_writes_one_approval_of_the_content_for_the_object(approver):
    client, gates, results, _ = approver
    body = {
        "content": REVISION,
        "for": "Kustomization/apps/podinfo",
        "message": "CHG-1234",
        "requestedBy": "chatops:bob",
    }
    resp = call(client, "approve", body, token=CI)
    assert resp.status_code == 200 and results == ["ok"]
    key, value = approval_written(gates)
    assert key.startswith(APPROVAL_ANNOTATION_PREFIX)
    assert resp.get_json() == {
        "gate": "flux-system/bypass-signoff",
        "action": "approve",
        "content": REVISION,
        "for": "Kustomization/apps/podinfo",
        "approval": key,
    }
    # by is the token (one identity, whatever the caller says); the webhook keeps it only beside a
    # relay's own name; the caller's own words are requestedBy; at and expires are the webhook's
    assert value == {
        "content": REVISION,
        "for": "Kustomization/apps/podinfo",
        "message": "CHG-1234",
        "by": "receiver token 'ci'",
        "requestedBy": "chatops:bob",
    }


def test_approve_without_for_is_for_every_object_and_without_a_caller_is_the_token(approver):
    client, gates, _, _ = approver
    assert call(client, "approve", {"content": REVISION}, token=CI).status_code == 200
    _, value = approval_written(gates)
    assert value == {"content": REVISION, "for": "*", "message": "", "by": "receiver token 'ci'"}


def test_approve_checks_the_token_before_the_body(approver):
    client, gates, results, _ = approver
    for body in ({"content": REVISION}, {"nonsense": 1}, b"not json"):
        resp = call(client, "approve", body, token="wrong")
        assert resp.status_code == 401 and resp.get_json() == {"error": "missing or wrong bearer token"}
    assert gates.patches == [] and results == ["unauthorized"] * 3


@pytest.mark.parametrize(
    "body, why",
    [
        ({}, "content must name what waits"),
        ({"content": "  "}, "content must name what waits"),
        ({"content": REVISION, "for": "Pod/apps/web"}, "must be Kind/namespace/name of a gated kind"),
        (
            {"content": REVISION, "for": "Kustomization/podinfo"},
            "must be Kind/namespace/name of a gated kind",
        ),
        ({"content": REVISION + "\x1b[2K"}, "control characters"),
        ({"content": REVISION, "ticket": "CHG-1"}, "unknown fields"),
        ({"content": 5}, "content must be a string"),
        ({"content": "x" * 600}, "longer than 512"),
    ],
)
def test_approve_bodies_that_cannot_be_an_approval_get_400(approver, body, why):
    client, gates, results, _ = approver
    resp = call(client, "approve", body, token=CI)
    assert resp.status_code == 400 and why in resp.get_json()["error"] and gates.patches == []
    assert results == ["bad_request"]


def test_approve_of_an_unknown_gate_or_one_it_may_not_write(approver):
    client, gates, _, _ = approver
    resp = call(client, "approve", {"content": REVISION}, token=CI, gate="flux-system/nope")
    assert resp.status_code == 404 and "not found" in resp.get_json()["error"]

    gates.refuse = "gates is forbidden"
    resp = call(client, "approve", {"content": REVISION}, token=CI)
    assert resp.status_code == 502 and "not recorded: gates is forbidden" in resp.get_json()["error"]
    assert gates.patches == []


@pytest.mark.parametrize(
    "relays, recorded",
    [
        (frozenset({RECEIVER_SA}), f"receiver token 'ci' via {RECEIVER_SA}"),
        (frozenset(), RECEIVER_SA),  # a server that does not trust the receiver as a relay: its name alone
    ],
)
def test_the_webhook_records_the_caller_via_the_receiver_only_when_it_is_a_relay(approver, relays, recorded):
    client, gates, _, _ = approver
    assert (
        call(
            client,
            "approve",
            {"content": REVISION, "message": "CHG-1", "requestedBy": "chatops:bob"},
            token=CI,
        ).status_code
        == 200
    )
    [(_, _, patch)] = gates.patches
    written = patch["metadata"]["annotations"]
    context = Context(lookup_from([]), FIXED_NOW, Settings(approval_relays=relays, approval_key=APPROVAL_KEY))
    as_receiver = {"username": RECEIVER_SA, "groups": ["system:serviceaccounts"]}
    old, new = with_uid(gate("bypass-signoff")), with_uid(gate("bypass-signoff", annotations=written))
    outcome = handlers.mutate(request("UPDATE", new, old, user=as_receiver), context).response
    [op] = orjson.loads(base64.b64decode(outcome["patch"]))
    stamped = orjson.loads(op["value"])
    assert stamped["by"] == recorded and stamped["at"] == "2026-06-10T12:00:00Z"
    accepted = handlers.validate(
        request(
            "UPDATE",
            with_uid(gate("bypass-signoff", annotations={next(iter(written)): op["value"]})),
            old,
            user=as_receiver,
        ),
        context,
    ).response
    assert accepted["allowed"]


# -- who a token is, and what it may do (docs/decisions/0065) -------------------------------


def test_the_bare_token_opens_and_closes_but_approves_nothing(receiver):
    client, gates, results, _ = receiver
    resp = call(client, "approve", {"content": REVISION, "message": "CHG-1"})
    assert resp.status_code == 403 and "may not approve" in resp.get_json()["error"]
    assert gates.patches == [] and results == ["forbidden"]
    assert call(client, "open").status_code == 200 and call(client, "close").status_code == 200


def test_a_token_scoped_to_a_namespace_cannot_touch_another(approver):
    client, gates, results, _ = approver
    assert call(client, "open", token=APPS_OPENER, gate="apps/release").status_code == 200
    resp = call(client, "open", token=APPS_OPENER, gate="flux-system/bypass-signoff")
    assert resp.status_code == 403 and "namespace 'flux-system'" in resp.get_json()["error"]
    assert [(ns, name) for ns, name, _ in gates.patches] == [("apps", "release")]


def test_an_open_only_token_cannot_close_or_approve(approver):
    client, gates, results, _ = approver
    for action, body in (("close", None), ("approve", {"content": REVISION, "message": "CHG-1"})):
        resp = call(client, action, body, token=APPS_OPENER, gate="apps/release")
        assert resp.status_code == 403 and f"may not {action}" in resp.get_json()["error"], action
    assert gates.patches == [] and results == ["forbidden", "forbidden"]


def test_a_token_scoped_to_a_gate_touches_that_gate_only(approver):
    client, gates, _, _ = approver
    assert call(client, "approve", {"content": REVISION}, token=RELEASE).status_code == 200
    resp = call(client, "close", token=RELEASE, gate="apps/release")
    assert resp.status_code == 403 and "gate apps/release" in resp.get_json()["error"]
    resp = call(client, "open", token=RELEASE)
    assert resp.status_code == 403 and "may not open" in resp.get_json()["error"]
    assert len(gates.patches) == 1


def test_authentication_comes_before_scope_names_and_body(approver):
    client, gates, results, _ = approver
    for gate_path in ("apps/release", "flux-system/bypass-signoff", "Bad/NAME"):
        resp = call(client, "approve", b"not json", token="apps-token-wrong-012345", gate=gate_path)
        assert resp.status_code == 401, gate_path
    assert gates.patches == [] and set(results) == {"unauthorized"}


def test_one_token_is_one_approver_whatever_names_its_callers_give(approver):
    """'alice' and 'bob' through one token are one approver: required 2 is not met."""
    client, gates, _, _ = approver
    for said in ("alice", "bob"):
        body = {"content": REVISION, "message": "CHG-1", "requestedBy": said}
        assert call(client, "approve", body, token=CI).status_code == 200
    context = Context(
        lookup_from([]),
        FIXED_NOW,
        Settings(approval_relays=frozenset({RECEIVER_SA}), approval_key=APPROVAL_KEY),
    )
    as_receiver = {"username": RECEIVER_SA, "groups": ["system:serviceaccounts"]}
    recorded = {}
    for _, _, patch in gates.patches:
        [(key, value)] = patch["metadata"]["annotations"].items()
        new = with_uid(gate("bypass-signoff", annotations={key: value}))
        outcome = handlers.mutate(
            request("UPDATE", new, with_uid(gate("bypass-signoff")), user=as_receiver), context
        )
        recorded[key] = orjson.loads(base64.b64decode(outcome.response["patch"]))[0]["value"]
    approved = with_uid(
        gate("bypass-signoff", annotations=recorded, default="closed", approvals={"required": 2})
    )
    state = lookup_from([approved])("flux-system", "bypass-signoff", FIXED_NOW)
    assert {a.by for a in state.approvals} == {f"receiver token 'ci' via {RECEIVER_SA}"}
    assert {a.requested_by for a in state.approvals} == {"alice", "bob"}
    from admission.core.gates.approvals import admitting

    assert admitting(state.approvals, 2, [REVISION], ["*"], FIXED_NOW) == ()
    assert admitting(state.approvals, 1, [REVISION], ["*"], FIXED_NOW)


@pytest.mark.parametrize(
    "text, why",
    [
        ("- name: ci\n  token: short\n", "at least 16"),
        ("- name: ci\n  token: ci-token-0123456789\n  actions: [delete]\n", "actions"),
        ("- name: ci\n  token: ci-token-0123456789\n  namespaces: [Bad]\n", "namespaces"),
        ("- name: ci\n  token: ci-token-0123456789\n  scope: all\n", "unknown field"),
        (f"- name: a\n  token: {CI}\n- name: b\n  token: {CI}\n", "same token"),
        ("two words", "one bare token"),
        ("- [", "not YAML"),
    ],
)
def test_a_token_file_that_cannot_be_used_is_an_error_at_start_and_accepts_no_token_later(
    approver, tmp_path, text, why
):
    bad = tmp_path / "bad"
    bad.write_text(text)
    with pytest.raises(ValueError, match=why):
        ReceiverTokens(str(bad))
    client, _, results, token_file = approver
    token_file.write_text(text)
    assert call(client, "open", token=CI).status_code == 401
