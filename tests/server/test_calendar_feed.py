"""GET /calendar.ics from the real server: built by a niced child of each worker, never in the
worker that answers reviews (admission.webhook.feeds); the default feed as soon as a worker's
gate cache is ready, so a fresh server's first calendar request gets the calendar."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson
import pytest
from icalendar import Calendar

from tests.builders import changed, flux, gate, keeper, request, review
from tests.polling import until
from tests.processes import serving_gates_dir
from tests.procfs import children

GATES = [
    gate("change-freeze", default="opened"),
    keeper(
        "nightly", "change-freeze", closed=[{"cron": "0 1 * * *", "duration": "2h"}], timeZone="Europe/Berlin"
    ),
    gate("flappy", default="opened"),
    keeper("flaps", "flappy", closed=["*/2 * * * *"]),
]


BUILT = 'gate_admission_calendar_builds_total{result="built"}'


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # --calendar-wait 0: a query with no feed yet answers 503 at once, whatever the machine's speed.
    with serving_gates_dir(
        tmp_path_factory.mktemp("calendar"), GATES, "--workers", "2", "--threads", "4", "--calendar-wait", "0"
    ) as srv:
        yield srv


def get(server, path: str):
    conn = server.connection()
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def builders(server) -> list[int]:
    """The calendar builder processes: children of the server's workers."""
    return [
        pid
        for worker in server.children()
        for pid in children(worker)
        if b"admission.webhook.feeds" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]


def niceness(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[16])  # field 19 of proc(5), counted after the name


def test_a_fresh_servers_first_calendar_request_gets_the_calendar(tmp_path):
    with serving_gates_dir(tmp_path, GATES[:2], "--workers", "2", "--calendar-wait", "0") as fresh:
        # Each worker builds the default feed once its gates are read, before anyone asks: no
        # request has been made when the two builds are counted.
        until(fresh.metrics, lambda seen: seen.get(BUILT, 0) >= 2, timeout=60)
        status, headers, body = get(fresh, "/calendar.ics")  # the first; it does not wait (--calendar-wait 0)
    assert status == 200 and headers["Content-Type"] == "text/calendar; charset=utf-8"
    summaries = [str(e["SUMMARY"]) for e in Calendar.from_ical(body).walk("VEVENT")]
    assert summaries == ["Gate flux-system/change-freeze closed"] * 14  # nightly, for the default 14 days


def test_every_first_fetch_of_a_fresh_server_gets_the_calendar_however_many_arrive_together(tmp_path):
    # A fleet of spokes, or calendar apps that ignore Retry-After, arrive together after a
    # rollout: each waits (--calendar-wait, 5 s by default) for the one build in progress.
    with serving_gates_dir(tmp_path, GATES, "--workers", "2", "--threads", "4") as fresh:
        start = threading.Barrier(8)

        def first_fetch(_):
            start.wait(timeout=30)
            status, _, body = get(fresh, "/calendar.ics")
            return status, body

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(first_fetch, range(8)))
    assert [status for status, _ in answers] == [200] * 8, [body[:80] for _, body in answers]
    assert all(b"Gate flux-system/change-freeze closed" in body for _, body in answers)


def test_the_feed_is_built_by_a_niced_child_process_while_reviews_go_on(server):
    # Not the default feed (built at start): this query's first build starts now.
    status, headers, body = get(server, "/calendar.ics?namespace=flux-system&days=14")
    assert status == 503 and headers["Retry-After"] == "10"
    assert json.loads(body) == {"error": "the calendar is being built; retry shortly"}
    # Reviews are answered while the build runs.
    held = flux(gates="flux-system/flappy")
    deny = orjson.dumps(review(request("UPDATE", changed(held, path="./b"), held)))
    assert server.request("POST", "/validate", deny)[0] == 200

    status, headers, body = until(
        lambda: get(server, "/calendar.ics?namespace=flux-system&days=14"), lambda r: r[0] != 503, timeout=60
    )
    assert status == 200 and headers["Content-Type"] == "text/calendar; charset=utf-8"
    summaries = [str(e["SUMMARY"]) for e in Calendar.from_ical(body).walk("VEVENT")]
    assert summaries.count("Gate flux-system/change-freeze closed") == 14
    assert summaries.count("Gate flux-system/flappy closed") == 500  # capped per gate
    pids = builders(server)
    assert pids and all(niceness(pid) == 10 for pid in pids)


def test_the_server_log_stays_json_lines(server):
    until(
        lambda: get(server, "/calendar.ics?namespace=flux-system&days=2"), lambda r: r[0] == 200, timeout=60
    )
    lines = server.log().splitlines()
    assert json.loads(lines[0])["msg"] == "serving certificate written"  # --generate-certs, before serving
    for line in lines:  # a builder's stray output or traceback would show here
        assert isinstance(json.loads(line), dict), line
