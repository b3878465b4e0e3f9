"""The gate board's web side (``admission.board.app``) through Flask's test client, over gates
compiled by the store (a gates directory, or the store's index over objects in memory): what a
user of ``kubectl gate board`` would notice. A page on another site cannot reach it or act
through it; what a gate or an object carries is shown as text; every action names what it will
do, then does exactly that once; the page updates by ETag, holds no third-party code, and
reads with labels and a text equivalent of its timeline."""

from __future__ import annotations

import copy
import hashlib
import html
import re
from base64 import b64encode
from datetime import UTC, timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission.board.app import MAX_BODY, create_app, loopback_hosts
from admission.board.model import Refused, Snapshot
from admission.cli.board import FilesSource
from admission.core.base import names
from admission.core.gates.gates import evaluate_gate
from admission.core.gates.status import gate_status
from admission.store.index import GateIndex
from tests.builders import gate, keeper
from tests.conftest import FIXED_NOW, write_gates
from tests.polling import until
from tests.unit.test_approvals import stamped
from tests.unit.test_board_model import held
from tests.unit.test_content import GIT_B
from tests.unit.test_togglestamp import KEY as TOGGLE_KEY
from tests.unit.test_togglestamp import NOW as TOGGLE_NOW
from tests.unit.test_togglestamp import stamped as toggle_stamped
from tests.unit.test_togglestamp import stored as toggle_stored

PORT = 48213
HOST = f"127.0.0.1:{PORT}"
EVIL = "<script>alert(1)</script>\"'&"
SHOWN_EVIL = html.escape(EVIL, quote=True)
TARGET = "GitRepository/apps/podinfo"
FREEZE = "flux-system/freeze"


class IndexSource:
    """Gates, GateKeepers and Flux objects in memory, compiled by the store's ``GateIndex`` as
    the cluster source compiles what it lists; a test changes them and the next look sees it."""

    where = "the test's objects"

    def __init__(self, gates: list[dict], keepers: list[dict] = (), objects: list[dict] = ()):
        self.gates, self.keepers, self.objects = list(gates), list(keepers), list(objects)

    def snapshot(self) -> Snapshot:
        index = GateIndex()
        index.replace_all(copy.deepcopy(self.gates), copy.deepcopy(self.keepers))
        return Snapshot(index, copy.deepcopy(self.objects))


class RecordingActions:
    """A boundary double of ``board.model.Actions``: the real actions are API calls made with the
    user's kubeconfig (``admission.cli.board.ClusterActions``), exercised against a real API
    server by the browser test (tests/realflux/test_board.py). This one records each call, and
    refuses with ``refusal`` when given one, as the API server's words would come back."""

    def __init__(self, refusal: str | None = None):
        self.calls: list[tuple[str, ...]] = []
        self.refusal = refusal

    def _done(self, *call: str) -> list[str]:
        self.calls.append(call)
        if self.refusal is not None:
            raise Refused(self.refusal)
        return [f"done: {' '.join(call)}"]

    def approve(self, namespace, gate, content, target, message, expires):
        return self._done("approve", namespace, gate, content, target, message, expires)

    def withdraw(self, namespace, gate, content, target):
        return self._done("withdraw", namespace, gate, content, target)

    def toggle(self, namespace, gate, action, message, for_):
        return self._done(action, namespace, gate, message, for_)


def freeze(annotations: dict | None = None) -> dict:
    return gate("freeze", default="closed", annotations=annotations)


def nightly() -> list[dict]:
    """A gate closed 22:00-24:00 UTC every night, and its keeper."""
    return [gate("nightly", default="opened"), keeper("k", "nightly", closed=["* 22-23 * * *"])]


def client_of(source: Any, actions: Any, **kw: Any):
    app = create_app(source, actions, UTC, lambda: FIXED_NOW, hosts=loopback_hosts(PORT), **kw)
    app.testing = True
    return app.test_client()


def get(client, path: str, host: str = HOST, **kw: Any):
    return client.get(path, headers={"Host": host, **kw.pop("headers", {})}, **kw)


def post(client, path: str, data: dict, host: str = HOST, **kw: Any):
    return client.post(path, data=data, headers={"Host": host, **kw.pop("headers", {})}, **kw)


def body(answer) -> str:
    return answer.get_data(as_text=True)


class Page(HTMLParser):
    """A page as a browser would read its structure: elements, forms with their fields, labels,
    the text of each element with an id, and each table's rows of cell texts (by class)."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.forms: list[dict[str, Any]] = []
        self.tables: dict[str, list[list[str]]] = {}
        self.text: dict[str, str] = {}
        self.drawn: list[tuple[str, str]] = []  # (the timeline's label, a span's label)
        self._svg = ""
        self._form: dict[str, Any] | None = None
        self._select: dict[str, Any] | None = None
        self._tables: list[str] = []
        self._cell: list[str] | None = None
        self._open_ids: list[tuple[str, str]] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.elements.append((tag, a))
        if "id" in a and tag not in ("input", "select", "option", "rect", "line"):
            self._open_ids.append((tag, a["id"]))
            self.text.setdefault(a["id"], "")
        if tag == "svg":
            self._svg = a.get("aria-label", "")
        elif tag == "rect" and "span" in a.get("class", "").split():
            self.drawn.append((self._svg, a["aria-label"]))
        if tag == "form":
            self._form = {"attrs": a, "fields": []}
            self.forms.append(self._form)
        elif tag in ("input", "select", "button", "textarea") and self._form is not None:
            field = {"tag": tag, **a, "options": []}
            self._form["fields"].append(field)
            if tag == "select":
                self._select = field
        elif tag == "option" and self._select is not None:
            self._select["options"].append(a.get("value", ""))
        elif tag == "table":
            self._tables.append(a.get("class", ""))
            self.tables.setdefault(a.get("class", ""), [])
        elif tag == "tr" and self._tables:
            self.tables[self._tables[-1]].append([])
        elif tag in ("td", "th") and self._tables:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._form = None
        elif tag == "select":
            self._select = None
        elif tag == "table" and self._tables:
            self._tables.pop()
        elif tag in ("td", "th") and self._cell is not None and self._tables:
            self.tables[self._tables[-1]][-1].append("".join(self._cell).strip())
            self._cell = None
        if self._open_ids and self._open_ids[-1][0] == tag:
            self._open_ids.pop()

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        for _, ident in self._open_ids:
            self.text[ident] += data

    def actions(self) -> list[dict[str, Any]]:
        return [f for f in self.forms if f["attrs"].get("method") == "post"]


def form_data(form: dict[str, Any], **values: str) -> dict[str, str]:
    """What a browser sends for ``form``: its hidden values, empty text, each choice's first
    option, with ``values`` typed in (by field name)."""
    data = {}
    for f in form["fields"]:
        if f["tag"] == "input" and f.get("name"):
            data[f["name"]] = f.get("value", "")
        elif f["tag"] == "select":
            data[f["name"]] = f["options"][0] if f["options"] else ""
    unknown = set(values) - set(data)
    assert not unknown, f"the form has no field {unknown}"
    return {**data, **values}


def token_of(client) -> str:
    forms = Page(body(get(client, "/"))).actions()
    [token] = {f["value"] for form in forms for f in form["fields"] if f.get("name") == "csrf"}
    return token


def the_form(page: Page, action: str, **hidden: str) -> dict[str, Any]:
    """The one action form posting to ``action`` whose hidden fields hold ``hidden``."""
    found = [
        f
        for f in page.actions()
        if f["attrs"]["action"] == f"/actions/{action}"
        and all(form_data(f).get(k) == v for k, v in hidden.items())
    ]
    assert len(found) == 1, (action, hidden, found)
    return found[0]


@pytest.fixture
def source() -> IndexSource:
    return IndexSource([freeze(), *nightly()[:1]], nightly()[1:], [held()])


# -- who may ask -----------------------------------------------------------------------------


@pytest.mark.parametrize("host", [f"127.0.0.1:{PORT}", f"localhost:{PORT}", f"[::1]:{PORT}"])
def test_the_loopback_names_with_the_port_are_answered(source, host):
    client = client_of(source, RecordingActions())
    for path in ("/", "/fragment", "/static/board.js", "/static/board.css"):
        assert get(client, path, host=host).status_code == 200, path
    assert "flux-system/freeze" in body(get(client, "/", host=host))


@pytest.mark.parametrize(
    "host",
    [
        f"attacker.example:{PORT}",  # a rebound DNS name: the browser sends the page's own name
        "attacker.example",
        f"127.0.0.1.attacker.example:{PORT}",
        "127.0.0.1:80",
        f"127.0.0.1:{PORT + 1}",
        "127.0.0.1",
        "localhost",
        f"LOCALHOST.:{PORT}",
        f"0.0.0.0:{PORT}",
        f"127.0.0.2:{PORT}",
    ],
)
def test_a_request_naming_another_host_is_refused_whatever_it_asks(source, host):
    actions = RecordingActions()
    client = client_of(source, actions)
    token = token_of(client)
    for path in ("/", "/fragment", "/static/board.js", "/nowhere"):
        answer = get(client, path, host=host)
        assert answer.status_code == 403, (path, answer.status_code)
        assert "freeze" not in body(answer) and "board.js" not in body(answer)
    form = {"csrf": token, "namespace": "flux-system", "gate": "freeze", "confirmed": "yes"}
    for action in ("open", "close", "approve", "withdraw"):
        assert post(client, f"/actions/{action}", form, host=host).status_code == 403
    assert actions.calls == []


def test_on_port_80_the_host_a_browser_sends_without_the_port_is_answered(source):
    # A browser leaves the scheme's default port out of Host and Origin.
    app = create_app(source, RecordingActions(), UTC, lambda: FIXED_NOW, hosts=loopback_hosts(80), csrf="t")
    client = app.test_client()
    for host in ("127.0.0.1", "localhost", "[::1]", "127.0.0.1:80"):
        assert get(client, "/", host=host).status_code == 200, host
    form = {"csrf": "t", "namespace": "flux-system", "gate": "freeze", "confirmed": "yes"}
    assert (
        post(
            client, "/actions/open", form, host="127.0.0.1", headers={"Origin": "http://127.0.0.1"}
        ).status_code
        == 200
    )
    assert get(client, "/", host=f"127.0.0.1:{PORT}").status_code == 403


def test_a_board_served_before_its_port_is_known_answers_no_host(source):
    app = create_app(source, RecordingActions(), UTC, lambda: FIXED_NOW)
    assert app.test_client().get("/", headers={"Host": HOST}).status_code == 403


def test_a_post_without_the_sessions_token_does_nothing(source):
    actions = RecordingActions()
    client = client_of(source, actions)
    token = token_of(client)
    other = token_of(client_of(source, RecordingActions()))  # another session's token
    assert token != other and len(token) >= 32
    base = {"namespace": "flux-system", "gate": "freeze", "content": GIT_B, "for": TARGET, "confirmed": "yes"}
    for action in ("approve", "withdraw", "open", "close"):
        for csrf in (None, "", other, token[:-1], token + "x", token.upper(), f" {token}"):
            form = dict(base) if csrf is None else {**base, "csrf": csrf}
            answer = post(client, f"/actions/{action}", form)
            assert answer.status_code == 403, (action, csrf)
            assert "CSRF" in body(answer)
        # In the address instead of the form: a link someone was sent, not the page's form.
        assert post(client, f"/actions/{action}?csrf={token}", base).status_code == 403
        # Asked for the confirmation page only: refused as well, before anything is shown.
        assert post(client, f"/actions/{action}", {**base, "confirmed": ""}).status_code == 403
    assert actions.calls == []
    assert post(client, "/actions/open", {**base, "csrf": token}).status_code == 200
    assert actions.calls == [("open", "flux-system", "freeze", "", TARGET)]


@pytest.mark.parametrize(
    "origin",
    ["http://attacker.example", "null", f"http://localhost:{PORT}", f"https://{HOST}", "http://127.0.0.1"],
)
def test_a_post_from_another_origin_is_refused_even_with_the_token(source, origin):
    actions = RecordingActions()
    client = client_of(source, actions)
    form = {"csrf": token_of(client), "namespace": "flux-system", "gate": "freeze", "confirmed": "yes"}
    answer = post(client, "/actions/close", form, headers={"Origin": origin})
    assert answer.status_code == 403 and "another site" in body(answer)
    assert actions.calls == []
    assert post(client, "/actions/close", form, headers={"Origin": f"http://{HOST}"}).status_code == 200
    assert len(actions.calls) == 1


# -- what gates and objects carry is text ----------------------------------------------------


def evil_source() -> IndexSource:
    toggled = {
        names.CLOSE_ANNOTATION: "2026-06-10T10:00:00.000000Z",
        names.MESSAGE_ANNOTATION: EVIL + "\x1b[2J\u202e",
        names.REQUESTED_BY_ANNOTATION: EVIL,
    }
    return IndexSource(
        [gate("freeze", annotations=toggled)],
        [],
        [held(name=EVIL, waits=f"main@sha1:{EVIL}")],
    )


def assert_text_only(text: str, where: str) -> None:
    assert "<script>alert" not in text, where
    assert SHOWN_EVIL in text, where
    assert "\x1b" not in text and "\u202e" not in text, where


def test_a_message_name_or_content_carrying_markup_is_shown_as_text_on_every_page():
    actions = RecordingActions(refusal=f"admission webhook denied the request: {EVIL}\x1b[31m")
    client = client_of(evil_source(), actions)
    page = body(get(client, "/"))
    assert_text_only(page, "page")
    assert "\\u001b[2J\\u202e" in page  # control characters shown as escapes, as the CLI shows them
    assert_text_only(body(get(client, "/fragment")), "fragment")
    form = the_form(Page(page), "approve", gate="freeze")
    assert form_data(form)["content"] == f"main@sha1:{EVIL}"  # the exact content, not a copy of its display
    confirm = post(client, "/actions/approve", form_data(form, message=EVIL))
    assert_text_only(body(confirm), "confirm page")
    refused = post(client, "/actions/approve", {**form_data(form, message=EVIL), "confirmed": "yes"})
    assert refused.status_code == 422
    assert_text_only(body(refused), "result page")
    assert "\\u001b[31m" in body(refused)
    searched = body(get(client, "/", query_string={"q": EVIL, "namespace": EVIL, "tz": EVIL}))
    assert "<script>alert" not in searched and SHOWN_EVIL in searched


# -- actions: confirmed, then done once -------------------------------------------------------


def test_approve_asks_first_naming_gate_content_and_target_then_approves_that_once(source):
    actions = RecordingActions()
    client = client_of(source, actions)
    form = the_form(Page(body(get(client, "/"))), "approve", gate="freeze", content=GIT_B)
    typed = form_data(form, message='CHG-1 "quoted" <b>&', expires="4h")
    first = post(client, "/actions/approve", typed)
    assert first.status_code == 200 and actions.calls == []
    confirm = Page(body(first))
    what = confirm.text["confirm-what"]
    assert GIT_B in what and TARGET in what and FREEZE in what and what.startswith("Approve")
    [again] = confirm.actions()
    assert again["attrs"]["action"] == "/actions/approve"
    done = post(client, "/actions/approve", form_data(again))
    assert done.status_code == 200 and "Done" in body(done)
    assert actions.calls == [("approve", "flux-system", "freeze", GIT_B, TARGET, 'CHG-1 "quoted" <b>&', "4h")]


@pytest.mark.parametrize(
    "action, typed, words, call",
    [
        (
            "open",
            {"message": "hotfix CVE-1", "for": "2h"},
            ["Open gate flux-system/freeze", "2h", "hotfix CVE-1"],
            ("open", "flux-system", "freeze", "hotfix CVE-1", "2h"),
        ),
        (
            "close",
            {"message": "incident 7"},
            ["Close gate flux-system/nightly", "incident 7"],
            ("close", "flux-system", "nightly", "incident 7", ""),
        ),
    ],
)
def test_open_and_close_ask_first_and_then_toggle_that_gate_once(source, action, typed, words, call):
    actions = RecordingActions()
    client = client_of(source, actions)
    form = the_form(Page(body(get(client, "/"))), action, gate=call[2])
    first = post(client, f"/actions/{action}", form_data(form, **typed))
    assert first.status_code == 200 and actions.calls == []
    what = Page(body(first)).text["confirm-what"]
    assert all(w in what for w in words), what
    [again] = Page(body(first)).actions()
    assert post(client, f"/actions/{action}", form_data(again)).status_code == 200
    assert actions.calls == [call]


def test_withdraw_names_every_approval_it_removes(source):
    """Withdrawing removes every approval of that content for that object on the gate
    (``approve.withdraw``): the button and its confirmation say so, not one approver's name."""
    annotations = {
        names.APPROVAL_ANNOTATION_PREFIX + "a1": stamped(content=GIT_B, target=TARGET, by="alice"),
        names.APPROVAL_ANNOTATION_PREFIX + "b2": stamped(content=GIT_B, target=TARGET, by="bob"),
    }
    source.gates[0] = freeze(annotations)
    actions = RecordingActions()
    client = client_of(source, actions)
    page = Page(body(get(client, "/")))
    [form] = [f for f in page.actions() if f["attrs"]["action"] == "/actions/withdraw"]
    sentence = form["attrs"]["data-confirm"]
    assert "alice" in sentence and "bob" in sentence, sentence
    first = post(client, "/actions/withdraw", form_data(form))
    what = Page(body(first)).text["confirm-what"]
    assert GIT_B in what and TARGET in what and FREEZE in what
    [again] = Page(body(first)).actions()
    assert post(client, "/actions/withdraw", form_data(again)).status_code == 200
    assert actions.calls == [("withdraw", "flux-system", "freeze", GIT_B, TARGET)]


def test_a_confirmation_carries_the_typed_values_unchanged(source):
    actions = RecordingActions()
    client = client_of(source, actions)
    form = the_form(Page(body(get(client, "/"))), "close", gate="nightly")
    typed = "tab\there, quote \" and ' <i>"
    [again] = Page(body(post(client, "/actions/close", form_data(form, message=typed)))).actions()
    assert form_data(again)["message"] == typed
    post(client, "/actions/close", form_data(again))
    assert actions.calls == [("close", "flux-system", "nightly", typed, "")]


def test_json_answers_say_ok_and_the_lines_and_a_refusal_in_the_api_servers_words(source):
    accept = {"Accept": "application/json"}
    client = client_of(source, RecordingActions())
    form = {**form_data(the_form(Page(body(get(client, "/"))), "close", gate="nightly")), "confirmed": "yes"}
    answer = post(client, "/actions/close", form, headers=accept)
    assert answer.status_code == 200 and answer.mimetype == "application/json"
    assert answer.get_json() == {"ok": True, "lines": ["done: close flux-system nightly  "]}
    words = 'gates.gating.example "nightly" is forbidden: User "bob" cannot patch resource'
    refusing = client_of(source, RecordingActions(refusal=words))
    form["csrf"] = token_of(refusing)
    answer = post(refusing, "/actions/close", form, headers=accept)
    assert answer.status_code == 422 and answer.get_json() == {"ok": False, "lines": [words]}
    page = post(refusing, "/actions/close", form)
    assert page.status_code == 422 and html.escape(words) in body(page) and "Refused" in body(page)


def test_a_refusal_before_the_action_is_answered_in_json_when_json_is_asked(source):
    """board.js posts asking for JSON and shows ``lines``: a stale token (the board restarted),
    a read-only board, a bad name or an oversized form must say why, not fail to parse."""
    accept = {"Accept": "application/json"}
    client = client_of(source, RecordingActions(), csrf="t")
    form = {"csrf": "t", "namespace": "flux-system", "gate": "freeze", "confirmed": "yes"}
    cases = [
        (post(client, "/actions/open", {**form, "csrf": "stale"}, headers=accept), 403, "CSRF"),
        (post(client_of(source, None, csrf="t"), "/actions/open", form, headers=accept), 403, "read-only"),
        (
            post(client, "/actions/open", {**form, "gate": "Not A Name"}, headers=accept),
            400,
            "must name a gate",
        ),
        (post(client, "/actions/open", {**form, "message": "x" * MAX_BODY}, headers=accept), 413, "larger"),
    ]
    for answer, status, words in cases:
        assert answer.status_code == status and answer.mimetype == "application/json", body(answer)
        result = answer.get_json()
        assert result["ok"] is False and any(words in line for line in result["lines"]), result
    plain = post(client, "/actions/open", {**form, "message": "x" * MAX_BODY})
    assert plain.status_code == 413 and "larger" in body(plain) and "<script" not in body(plain)


def test_a_read_only_board_has_no_actions_and_refuses_every_post(source):
    client = client_of(source, None, csrf="known-token")
    page = Page(body(get(client, "/")))
    assert page.actions() == [] and "Read-only" in body(get(client, "/"))
    assert not any(f.get("name") == "csrf" for form in page.forms for f in form["fields"])
    assert "flux-system/freeze" in body(get(client, "/"))  # still shows every gate and what waits
    assert GIT_B in body(get(client, "/"))
    form = {"csrf": "known-token", "namespace": "flux-system", "gate": "freeze", "confirmed": "yes"}
    for action in ("approve", "withdraw", "open", "close"):
        assert post(client, f"/actions/{action}", form).status_code == 403


def held_section(text: str) -> str:
    return html.unescape(re.search(r'<section aria-labelledby="held-h">(.*?)</section>', text).group(1))


def test_a_board_on_a_gates_directory_says_it_cannot_see_what_waits(gates_dir: Path, source):
    """Without a cluster no Flux object is read: "nothing waits" would be a guess, and wrong."""
    write_gates(gates_dir, [gate("freeze", default="closed")])
    files = held_section(body(get(client_of(FilesSource(str(gates_dir)), None), "/")))
    assert "No Flux objects are read here" in files and "Nothing waits" not in files
    source.objects = []
    for actions in (RecordingActions(), None):  # --read-only on a cluster still reads its objects
        assert "Nothing waits." in held_section(body(get(client_of(source, actions), "/")))


# -- live updates ---------------------------------------------------------------------------


def test_the_fragment_answers_not_modified_until_a_gate_changes(gates_dir: Path):
    write_gates(gates_dir, [gate("freeze", default="closed")])
    client = client_of(FilesSource(str(gates_dir)), None)
    first = get(client, "/fragment")
    etag = first.headers["ETag"]
    assert first.status_code == 200 and etag
    same = get(client, "/fragment", headers={"If-None-Match": etag})
    assert same.status_code == 304 and same.data == b""
    assert get(client, "/fragment", headers={"If-None-Match": '"other"'}).status_code == 200
    write_gates(gates_dir, [gate("freeze", default="opened")])
    # The bound: the page shows a change within 2 s of it.
    changed = until(
        lambda: get(client, "/fragment", headers={"If-None-Match": etag}),
        lambda r: r.status_code == 200,
        timeout=2.0,
    )
    assert changed.status_code == 200 and changed.headers["ETag"] != etag
    assert "✓ open" in html.unescape(body(changed))


@pytest.mark.parametrize("days", ["14", "1"])
def test_the_fragment_stays_not_modified_while_only_seconds_pass(source, days):
    """The page polls every second: a fragment that changed with every second would be sent,
    and swapped into the page (closing the timeline's table a reader opened), every second."""
    seconds = iter(range(60))
    app = create_app(
        source,
        RecordingActions(),
        UTC,
        lambda: FIXED_NOW + timedelta(seconds=next(seconds)),
        hosts=loopback_hosts(PORT),
    )
    client = app.test_client()
    etag = get(client, f"/fragment?days={days}").headers["ETag"]
    for _ in range(5):
        assert get(client, f"/fragment?days={days}", headers={"If-None-Match": etag}).status_code == 304


def test_the_fragment_changes_with_what_the_source_lists(source):
    client = client_of(source, RecordingActions())
    etag = get(client, "/fragment").headers["ETag"]
    source.objects = []
    changed = until(
        lambda: get(client, "/fragment", headers={"If-None-Match": etag}),
        lambda r: r.status_code == 200,
        timeout=2.0,
    )
    assert changed.status_code == 200 and GIT_B not in body(changed)


def test_an_action_is_seen_at_the_next_look_without_waiting(source):
    actions = RecordingActions()
    client = client_of(source, actions)
    etag = get(client, "/fragment").headers["ETag"]
    source.gates[0] = freeze(
        {names.MESSAGE_ANNOTATION: "opened by the action"}
        | {names.OPEN_ANNOTATION: "2026-06-10T11:59:00.000000Z"}
    )
    form = {**form_data(the_form(Page(body(get(client, "/"))), "open", gate="freeze")), "confirmed": "yes"}
    assert post(client, "/actions/open", form).status_code == 200
    answer = get(client, "/fragment", headers={"If-None-Match": etag})
    assert answer.status_code == 200 and "opened by the action" in body(answer)


# -- headers, static files, limits ----------------------------------------------------------


def test_every_answer_carries_the_security_headers(source):
    client = client_of(source, RecordingActions())
    answers = [get(client, p) for p in ("/", "/fragment", "/static/board.js", "/static/none.js")]
    answers += [get(client, "/", host="attacker.example"), post(client, "/actions/open", {})]
    answers += [
        post(client, "/actions/open", {"message": "x" * (MAX_BODY + 1)}),
        get(client, "/actions/open"),
    ]
    for answer in answers:
        policy = answer.headers["Content-Security-Policy"]
        assert "'unsafe-inline'" not in policy and "'unsafe-eval'" not in policy and "*" not in policy
        assert "default-src 'none'" in policy and "script-src 'self'" in policy
        assert "frame-ancestors 'none'" in policy and answer.headers["X-Frame-Options"] == "DENY"
        assert answer.headers["X-Content-Type-Options"] == "nosniff"
    assert get(client, "/").headers["Cache-Control"] == "no-store"


def test_scripts_and_styles_are_ours_and_match_their_integrity_hashes(source):
    client = client_of(source, RecordingActions())
    text = body(get(client, "/"))
    page = Page(text)
    loaded = [(a["src"], a["integrity"]) for t, a in page.elements if t == "script"]
    loaded += [
        (a["href"], a["integrity"]) for t, a in page.elements if t == "link" and a.get("rel") == "stylesheet"
    ]
    assert sorted(u for u, _ in loaded) == ["/static/board.css", "/static/board.js"]
    for url, integrity in loaded:
        answer = get(client, url)
        assert answer.status_code == 200
        assert integrity == "sha384-" + b64encode(hashlib.sha384(answer.data).digest()).decode()
        assert not re.search(r"https?://", answer.get_data(as_text=True)), url
    assert get(client, "/static/board.js").mimetype == "text/javascript"
    assert get(client, "/static/board.css").mimetype == "text/css"
    assert not re.search(r"https?://|//[a-z]", text.replace("</", "<"))
    # Nothing inline the policy would have to allow: no inline script, style or handler.
    assert all(a.get("src") for t, a in page.elements if t == "script")
    assert not any(
        t == "style" or "style" in a or any(k.startswith("on") for k in a) for t, a in page.elements
    )


@pytest.mark.parametrize("name", ["none.js", "board.js.map", "..%2fapp.py", "BOARD.JS", "__init__.py"])
def test_an_unknown_static_name_is_not_found(source, name):
    assert get(client_of(source, None), f"/static/{name}").status_code == 404


def test_a_body_over_the_limit_is_refused_413_and_does_nothing(source):
    actions = RecordingActions()
    client = client_of(source, actions)
    form = {"csrf": token_of(client), "namespace": "flux-system", "gate": "freeze", "confirmed": "yes"}
    answer = post(client, "/actions/open", {**form, "message": "x" * (MAX_BODY + 1)})
    assert answer.status_code == 413 and actions.calls == []
    assert post(client, "/actions/open", {**form, "message": "x" * 1000}).status_code == 200


@pytest.mark.parametrize(
    "namespace, gate_name",
    [
        ("", "freeze"),
        ("flux-system", ""),
        ("Flux_System", "freeze"),
        ("flux-system", "../freeze"),
        ("flux-system", "a" * 254),
        ("flux-system/x", "freeze"),
        ("flux-system", "fr eeze"),
        (EVIL, EVIL),
    ],
)
def test_a_namespace_or_gate_that_is_not_a_name_is_refused_400(source, namespace, gate_name):
    actions = RecordingActions()
    client = client_of(source, actions)
    form = {"csrf": token_of(client), "namespace": namespace, "gate": gate_name}
    for confirmed in ("", "yes"):
        answer = post(client, "/actions/approve", {**form, "confirmed": confirmed})
        assert answer.status_code == 400 and "<script>alert" not in body(answer)
    assert actions.calls == []
    assert post(client, "/actions/unknown", {**form, "confirmed": "yes"}).status_code == 404


PARAMS = st.dictionaries(
    st.sampled_from(["namespace", "q", "days", "from", "tz", "csrf", "x"]), st.text(max_size=30), max_size=5
)
FORM_FIELDS = st.dictionaries(
    st.sampled_from(["namespace", "gate", "content", "for", "message", "expires", "confirmed"]),
    st.one_of(st.text(max_size=30), st.sampled_from(["flux-system", "freeze", "yes", EVIL])),
    max_size=7,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(params=PARAMS, fields=FORM_FIELDS, action=st.sampled_from(["approve", "withdraw", "open", "close"]))
def test_whatever_a_page_or_form_is_sent_the_board_answers_without_a_server_error(
    source, params, fields, action
):
    actions = RecordingActions()
    client = client_of(source, actions, csrf="the-token")
    for path in ("/", "/fragment"):
        answer = get(client, path, query_string=params)
        assert answer.status_code == 200 and "<script>alert" not in body(answer)
    answer = post(client, f"/actions/{action}", {**fields, "csrf": "the-token"})
    assert answer.status_code in (200, 400) and "<script>alert" not in body(answer)
    assert len(actions.calls) == (answer.status_code == 200 and fields.get("confirmed") == "yes")


# -- accessibility --------------------------------------------------------------------------


def crowded_source() -> IndexSource:
    """Two objects wait the same revision behind freeze, approved for every object by two people
    (so several rows offer the same withdrawal), and one object also waits behind nightly."""
    annotations = {
        names.APPROVAL_ANNOTATION_PREFIX + "a1": stamped(content=GIT_B, target="*", by="alice"),
        names.APPROVAL_ANNOTATION_PREFIX + "b2": stamped(content=GIT_B, target="*", by="bob"),
    }
    suspended = held("other")
    suspended["metadata"]["annotations"][names.SUSPEND_DURING_ANNOTATION] = "* 20-21 * * *"
    broken = held("broken")
    broken["metadata"]["annotations"][names.SUSPENDED_DURING_ANNOTATION] = "not a cron"
    return IndexSource(
        [freeze(annotations), gate("nightly", default="opened")],
        [keeper("k", "nightly", closed=["* 22-23 * * *"])],
        [held(), suspended, broken],
    )


@pytest.mark.parametrize("path", ["/", "/?days=1&from=3", "/?tz=gate"])
def test_every_field_has_its_label_and_ids_are_unique(path):
    page = Page(body(get(client_of(crowded_source(), RecordingActions()), path)))
    ids = [a["id"] for _, a in page.elements if "id" in a]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    labelled = {a["for"] for t, a in page.elements if t == "label"}
    assert labelled <= set(ids)
    fields = [
        a
        for t, a in page.elements
        if t in ("select", "textarea") or (t == "input" and a.get("type") != "hidden")
    ]
    assert fields and all(a.get("id") in labelled for a in fields), [
        a for a in fields if a.get("id") not in labelled
    ]
    for form in page.actions():  # each a native form with a submit button: reachable by keyboard
        assert [f for f in form["fields"] if f["tag"] == "button" and f.get("type") == "submit"]


def test_the_timeline_has_a_table_listing_every_span_in_words():
    source = crowded_source()
    text = body(get(client_of(source, RecordingActions()), "/?days=3"))
    page = Page(text)
    rows = page.tables["spans"][1:]  # after the header
    assert page.drawn
    # Each span drawn is a row of its line's table: hover, focus and table say the same words.
    for line, label in page.drawn:
        name = line.removeprefix("suspensions of ")
        listed = [f"{state} from {start} to {end}" for who, state, start, end, _ in rows if who == name]
        assert label.split(" (")[0] in listed, (label, listed)
    # nightly: closed 22:00-24:00 each of the 3 nights, open between, every span a row.
    nightly = [r[1] for r in rows if r[0] == "gate flux-system/nightly"]
    assert nightly == ["open", "closed"] * 3
    assert [r[1] for r in rows if r[0] == "gate flux-system/freeze"] == ["closed"]
    suspensions = [r for r in rows if r[0] == "GitRepository/apps/other"]
    assert [(r[1], r[2][-9:], r[3][-9:]) for r in suspensions] == [
        ("suspended", "20:00 UTC", "22:00 UTC")
    ] * 3
    # A suspendDuring that cannot be read suspends (the core counts it active), and says it is unknown.
    [broken] = [r for r in rows if r[0] == "GitRepository/apps/broken"]
    assert broken[1] == "unknown" and "cannot be read" in broken[4]


def test_states_are_words_not_only_colours():
    page = Page(body(get(client_of(crowded_source(), RecordingActions()), "/")))
    states = [r[1] for r in page.tables["gates"][1:]]
    assert states == ["✕ closed", "✓ open"]
    assert {r[1] for r in page.tables["spans"][1:]} <= {"open", "closed", "unknown", "suspended"}


# -- who toggled -------------------------------------------------------------------------------


def test_who_toggled_a_gate_shows_as_get_shows_it_verified_only_where_the_status_vouches():
    """The board holds no approval key, as `kubectl gate get`: the webhook's stamp of who opened
    the gate reads as verified only where the controller's status vouches for exactly it."""
    obj = toggle_stamped(toggle_stored(**{names.REQUESTED_BY_ANNOTATION: "bob"}))
    vouched = copy.deepcopy(obj)
    vouched["status"] = {
        names.TOGGLED_BY_FIELD: gate_status(obj, evaluate_gate(obj, [], TOGGLE_NOW, TOGGLE_KEY), TOGGLE_NOW)[
            names.TOGGLED_BY_FIELD
        ]
    }

    def page(gate_obj: dict, path: str = "/") -> str:
        app = create_app(
            IndexSource([gate_obj]), RecordingActions(), UTC, lambda: TOGGLE_NOW, hosts=loopback_hosts(PORT)
        )
        app.testing = True
        return body(get(app.test_client(), path))

    assert "toggled by alice (verified)" in page(vouched)
    assert "apps/freeze" in page(vouched, "/?q=alice")  # what a row shows, a search finds
    assert "apps/freeze" not in page(vouched, "/?q=mallory")
    unvouched = page(obj)
    assert "toggled by alice (verified)" not in unvouched
    assert html.escape("toggled by an unverified identity (stamp says 'alice'", quote=True) in unvouched
