"""`serve --board`: the gate board, read-only, mounted at /board in the webhook's app
(admission.cli.boardmount), from the worker's own caches, behind the calendar's token; the
webhook's routes answer as they did without it."""

from __future__ import annotations

import base64
import re
import threading

import orjson
import pytest

from admission.cli.boardmount import board
from admission.core.admission.decision import Settings
from admission.store.files import FileStore
from admission.webhook.app import create_app
from admission.webhook.receiver import TokenFile
from tests.builders import changed, flux, gate, request, review
from tests.conftest import FIXED_NOW, write_gates
from tests.unit.test_approvals import held_by_freeze
from tests.unit.test_content import GIT_A, GIT_B, art

GATES = [
    gate("freeze", default="closed"),
    gate("nightly", "apps", default="opened"),
]
HELD = held_by_freeze(
    flux(
        "GitRepository",
        gates="flux-system/freeze",
        spec={"interval": "1m", "url": "https://example.org/podinfo.git"},
        status={"artifact": art(GIT_A)},
    ),
    GIT_B,
    GIT_A,
)
KS = flux(gates="flux-system/freeze")


class Listing:
    """What a worker's FluxCache hands the board: its kinds, their objects, whether to trust them."""

    def __init__(self, *objects: dict, untrusted: str | None = None):
        self._objects, self._untrusted = list(objects), untrusted

    def kinds(self) -> list[str]:
        return sorted({o["kind"] for o in self._objects})

    def objects(self, kind: str) -> list[dict]:
        return [o for o in self._objects if o["kind"] == kind]

    def untrusted(self) -> str | None:
        return self._untrusted


HELD_LISTING = Listing(HELD)  # read, never changed: one serves every board built


@pytest.fixture
def make(gates_dir, tmp_path):
    """The webhook's app over GATES with the board on (``flux_objects``: the worker's Flux
    objects), with a calendar token when ``token``; its test client. The board's clocks are
    ``clock`` and ``ticks`` (monotonic)."""
    write_gates(gates_dir, GATES)
    made = []

    def build(
        flux_objects: Listing | None = HELD_LISTING,
        token: str | None = None,
        store=None,
        clock=lambda: FIXED_NOW,
        ticks=lambda: 0.0,
    ):
        store = store or FileStore(gates_dir)
        calendar_token = None
        if token is not None:
            (tmp_path / "token").write_text(token + "\n")
            calendar_token = TokenFile(str(tmp_path / "token"))
        app = create_app(
            store,
            Settings(),
            clock=lambda: FIXED_NOW,
            calendar_token=calendar_token,
            # A drawing takes no time on a clock that stands still: the worker never rests.
            board=board(store, flux_objects, "this webhook", clock, ticks),
        )
        app.testing = True
        made.append(app)
        return app.test_client()

    yield build
    for app in made:
        app.extensions["calendar_feeds"].close()


def test_the_board_shows_the_webhooks_gates_and_held_objects_read_only_under_board(make):
    client = make()
    page = client.get("/board")
    assert page.status_code == 200 and page.mimetype == "text/html", page.data
    html = page.get_data(as_text=True)
    assert "flux-system/freeze" in html and "apps/nightly" in html
    assert "GitRepository" in html and "podinfo" in html and GIT_B in html  # what waits
    assert "Read-only" in html and 'method="post"' not in html and "/actions/" not in html
    # Every link stays under /board, in the one spelling the webhook reads (no trailing '/').
    assert 'action="/board"' in html and 'data-fragment="/board/fragment' in html
    assert {"/board/static/board.css", "/board/static/board.js"} <= set(
        re.findall(r'(?:href|src)="([^"]+)"', html)
    )
    for path in ("/board/static/board.css", "/board/static/board.js", "/board/fragment?namespace=apps"):
        assert client.get(path).status_code == 200, path
    fragment = client.get("/board/fragment").get_data(as_text=True)
    assert "flux-system/freeze" in fragment and "<form" not in fragment
    assert client.get("/board?tz=Europe/Berlin").status_code == 200


def test_the_board_refuses_every_action_and_changes_nothing(make, gates_dir):
    client = make()
    before = sorted(p.read_text() for p in gates_dir.iterdir())
    for action in ("approve", "withdraw", "open", "close"):
        form = {"namespace": "flux-system", "gate": "freeze", "confirmed": "yes"}
        assert client.post(f"/board/actions/{action}", data=form).status_code == 403
        csrf = re.search(r'name="csrf" value="([^"]+)"', client.get("/board").get_data(as_text=True))
        assert csrf is None  # no form carries one: there is nothing to post
    assert sorted(p.read_text() for p in gates_dir.iterdir()) == before


def test_the_webhooks_routes_answer_as_before_with_the_board_on(make):
    client = make()
    doc = review(request("UPDATE", changed(KS, path="./v2"), KS))
    answer = client.post("/validate", data=orjson.dumps(doc), content_type="application/json")
    assert answer.status_code == 200 and answer.get_json()["response"]["allowed"] is False
    assert client.get("/validate").status_code == 405
    assert client.get("/healthz").get_json() == {"status": "ok"}
    assert client.get("/readyz").status_code == 200
    assert client.get("/metrics").status_code == 200
    missing = client.get("/boards")
    assert missing.status_code == 404 and "error" in missing.get_json()
    # /board/ is not /board: a path has one spelling here, and this one is refused, not served.
    assert client.get("/board/").status_code == 400


def test_with_a_calendar_token_the_board_needs_it_too(make):
    client = make(token="screen-s3cret")
    for path in ("/board", "/board/fragment", "/board/static/board.js"):
        refused = client.get(path)
        assert refused.status_code == 401 and "token" in refused.get_json()["error"], path
        assert "Basic" in refused.headers["WWW-Authenticate"]  # a browser asks for it
        assert client.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert client.get(path, headers={"Authorization": "Bearer screen-s3cret"}).status_code == 200
        basic = base64.b64encode(b"screen:screen-s3cret").decode()
        assert client.get(path, headers={"Authorization": f"Basic {basic}"}).status_code == 200
    assert client.get("/calendar.ics").status_code == 401  # one token for both


def test_without_flux_objects_the_page_says_nothing_held_is_shown(make):
    html = make(flux_objects=None).get("/board").get_data(as_text=True)
    assert "nothing held is shown" in html and "flux-system/freeze" in html


def test_what_the_caches_cannot_vouch_for_is_on_the_page(make, gates_dir):
    stale = Listing(HELD, untrusted="Flux object cache: watch down for 30s")
    html = make(flux_objects=stale).get("/board/fragment").get_data(as_text=True)
    assert "held objects may be out of date: Flux object cache: watch down for 30s" in html


class SlowStore(FileStore):
    """A store whose readiness, read at each board look, waits until released."""

    def __init__(self, directory):
        super().__init__(directory)
        self.reading, self.release = threading.Event(), threading.Event()

    def readiness(self):
        if threading.current_thread().name == "board-look":
            self.reading.set()
            self.release.wait(30)
        return super().readiness()


def test_a_worker_draws_one_board_at_a_time_and_the_webhook_keeps_answering(make, gates_dir):
    store = SlowStore(gates_dir)
    client = make(store=store)
    other = client.application.test_client()
    first = threading.Thread(target=lambda: other.get("/board/fragment"), name="board-look")
    first.start()
    try:
        assert store.reading.wait(30)
        busy = client.get("/board/fragment?namespace=apps")
        assert busy.status_code == 503 and busy.headers["Retry-After"] == "1"
        assert '<meta http-equiv="refresh" content="1">' in busy.get_data(as_text=True)  # asks again
        assert client.get("/board/static/board.css").status_code == 200  # never waits for a drawing
        doc = review(request("UPDATE", changed(KS, path="./v2"), KS))
        answer = client.post("/validate", data=orjson.dumps(doc), content_type="application/json")
        assert answer.get_json()["response"]["allowed"] is False
    finally:
        store.release.set()
        first.join(30)
    assert client.get("/board/fragment").status_code == 200


class Drawing:
    """The board's clocks: each drawing reads the time once, and takes ``cost`` seconds."""

    def __init__(self, cost: float):
        self.now, self.cost = 0.0, cost

    def ticks(self) -> float:
        return self.now

    def clock(self):
        self.now += self.cost
        return FIXED_NOW


def test_a_worker_rests_four_times_as_long_as_it_drew_and_serves_what_it_drew(make):
    drawing = Drawing(cost=2.0)
    client = make(clock=drawing.clock, ticks=drawing.ticks)
    drawn = client.get("/board/fragment")
    assert drawn.status_code == 200 and drawing.now == 2.0
    etag = drawn.headers["ETag"]
    # Resting for 8 s: no new drawing. A view drawn before is served as drawn; one never drawn
    # gets the page that reloads itself; a screen that has the drawing gets 304.
    drawing.now += 7.5
    assert client.get("/board/fragment").get_data() == drawn.get_data() and drawing.now == 9.5
    assert client.get("/board/fragment", headers={"If-None-Match": etag}).status_code == 304
    assert client.get("/board?namespace=apps").status_code == 503 and drawing.now == 9.5
    drawing.now += 1.0  # rested: the next view asked for is drawn
    assert client.get("/board?namespace=apps").status_code == 200 and drawing.now == 12.5
    assert client.head("/board?namespace=apps").status_code == 200 and drawing.now == 12.5  # a second: kept
    drawing.now += 10.0  # rested, and the drawing is older than a second: drawn again
    assert client.get("/board/fragment").status_code == 200 and drawing.now == 24.5
