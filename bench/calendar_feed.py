"""GateKeeper calendars: what following a busy calendar costs the controller (fetch + parse) and
what deciding from it costs a review (evaluation from the GateKeeper's status).

The feed: a year of a busy team calendar, about 2,000 occurrences: weekly and weekday series in
Europe/Berlin and America/New_York with EXDATEs and moved occurrences (RECURRENCE-ID), monthly
series, one-off meetings, all-day events, X-WR-TIMEZONE, CATEGORIES. Measured:

- fetch: one GET over HTTPS on loopback (our fetch, a local server with a certificate from
  admission.pki), wall time;
- parse: ``expand`` in this process (thread CPU time) for the controller's 35-day horizon and for
  the whole year, and ``parse_in_child`` (wall time, and the child's CPU time), as the controller runs it;
- evaluation: a gate whose GateKeeper holds the parsed events in status, as bench/gatekeeper.py
  measures GateKeepers: "cold" (compile + first evaluation, with and without the next
  transition) and "warm" (one evaluation per minute for an hour), thread CPU time; and the same
  for the bounds (4 calendars of 500 intervals each, alternating). Target: the GateKeeper bound,
  5 ms (bench/README.md).

    .venv/bin/python bench/calendar_feed.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import http.server
import resource
import ssl
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from admission.core.gates import gates, gatespec  # noqa: E402
from admission.core.time.subscriptions import HORIZON, MAX_INTERVALS, FeedEvent, parse_calendar, status_entry  # noqa: E402
from admission.ical.fetch import Auth, Policy, fetch, parse_networks  # noqa: E402
from admission.ical.parse import expand, parse_in_child  # noqa: E402

NOW = datetime(2026, 3, 20, 9, 30, tzinfo=UTC)
YEAR_START = datetime(2026, 1, 1, tzinfo=UTC)
FEED = {"url": "https://calendar.example.com/team.ics", "name": "team", "staleAfter": "24h"}


def busy_year() -> bytes:
    """About 2,000 occurrences in 2026."""
    lines = ["BEGIN:VCALENDAR", "VERSION:2.0", "PRODID:-//bench//busy//EN", "X-WR-TIMEZONE:Europe/Berlin"]

    def event(uid: str, *props: str, summary: str) -> None:
        lines.extend(
            [
                "BEGIN:VEVENT",
                f"UID:{uid}",
                f"SUMMARY:{summary}",
                "DTSTAMP:20251201T000000Z",
                *props,
                "END:VEVENT",
            ]
        )

    for i in range(20):  # 20 weekly series, 52 each, 3 cancelled and one moved
        zone = "Europe/Berlin" if i % 2 else "America/New_York"
        day = 5 + i % 5
        event(
            f"weekly-{i}",
            f"DTSTART;TZID={zone}:202601{day:02d}T{9 + i % 8:02d}0000",
            f"DTEND;TZID={zone}:202601{day:02d}T{10 + i % 8:02d}0000",
            "RRULE:FREQ=WEEKLY;COUNT=52",
            *[f"EXDATE;TZID={zone}:2026{m:02d}{day + 7:02d}T{9 + i % 8:02d}0000" for m in (3, 6, 9)],
            f"CATEGORIES:{'release' if i % 4 == 0 else 'meeting'}",
            summary=f"Weekly {i}",
        )
        event(
            f"weekly-{i}",
            f"RECURRENCE-ID;TZID={zone}:202605{day + 7 - 1 if day + 6 <= 28 else day:02d}T{9 + i % 8:02d}0000",
            f"DTSTART;TZID={zone}:202605{day + 7:02d}T{14 + i % 4:02d}0000",
            f"DTEND;TZID={zone}:202605{day + 7:02d}T{15 + i % 4:02d}0000",
            summary=f"Weekly {i} (moved)",
        )
    for i in range(3):  # weekday stand-ups for part of the year: 3 x 200
        event(
            f"standup-{i}",
            f"DTSTART;TZID=Europe/Berlin:2026{1 + 4 * i:02d}05T093000",
            "DURATION:PT15M",
            "RRULE:FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;COUNT=200",
            summary=f"Stand-up {i}",
        )
    for i in range(10):  # monthly reviews
        event(
            f"monthly-{i}",
            f"DTSTART:202601{10 + i:02d}T130000Z",
            f"DTEND:202601{10 + i}T150000Z",
            "RRULE:FREQ=MONTHLY;COUNT=12",
            summary=f"Monthly review {i}",
        )
    for i in range(250):  # one-off meetings and freezes
        day = datetime(2026, 1, 1) + timedelta(days=(i * 37) % 365, hours=8 + i % 9)
        event(
            f"once-{i}",
            f"DTSTART:{day:%Y%m%dT%H%M%S}Z",
            f"DTEND:{day + timedelta(hours=2):%Y%m%dT%H%M%S}Z",
            f"CATEGORIES:{'freeze' if i % 10 == 0 else 'meeting'}",
            summary=f"Meeting {i}",
        )
    for i in range(60):  # all-day events, some over a weekend
        day = datetime(2026, 1, 1) + timedelta(days=(i * 61) % 365)
        event(
            f"allday-{i}",
            f"DTSTART;VALUE=DATE:{day:%Y%m%d}",
            f"DTEND;VALUE=DATE:{day + timedelta(days=1 + i % 3):%Y%m%d}",
            summary=f"Holiday {i}",
        )
    lines.append("END:VCALENDAR")
    return ("\r\n".join(lines) + "\r\n").encode()


def serve(body: bytes, directory: Path) -> tuple[http.server.ThreadingHTTPServer, bytes]:
    from tests.doubles.feedserver import pem_pair

    ca, cert, key = pem_pair(directory, ["127.0.0.1"])

    class Answer(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "text/calendar")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, ca


def keeper_with(statuses: list[dict], calendars: list[dict]) -> dict:
    return {
        "metadata": {"name": "k", "namespace": "default"},
        "spec": {"gate": "g", "calendars": calendars},
        "status": {"calendars": statuses},
    }


def evaluation(keeper: dict, rounds: int) -> tuple[float, float, float, float, gates.GateState]:
    """Best of ``rounds``, CPU ms: compiling the gate with its GateKeeper (a watch thread does it
    at each status write), the first evaluation (what a review pays), the same with the next
    transition (a denial, the status), and the worst of one evaluation per minute for an hour."""
    gate = {"metadata": {"name": "g", "namespace": "default"}, "spec": {"default": "opened"}}
    compiling, decided, cold, warm = [], [], [], []
    for _ in range(rounds):
        started = time.thread_time()
        compiled = gatespec.compile_gate(gate, [keeper])
        compiling.append(time.thread_time() - started)
        started = time.thread_time()
        state = gates.evaluate(compiled, NOW)
        decided.append(time.thread_time() - started)
        _ = state.next_transition
        cold.append(time.thread_time() - started)
        worst = 0.0
        for minute in range(1, 61):
            started = time.thread_time()
            _ = gates.evaluate(compiled, NOW + timedelta(minutes=minute, seconds=minute % 7)).next_transition
            worst = max(worst, time.thread_time() - started)
        warm.append(worst)
    return min(compiling) * 1e3, min(decided) * 1e3, min(cold) * 1e3, min(warm) * 1e3, state


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"# .venv/bin/python bench/calendar_feed.py --rounds {args.rounds}")
    body = busy_year()
    year = expand(body, YEAR_START, YEAR_START + timedelta(days=365), max_events=10**6)
    print(
        f"feed: {len(body):,} bytes, {body.count(b'BEGIN:VEVENT')} VEVENTs, {len(year.events):,} occurrences in 2026"
    )

    with tempfile.TemporaryDirectory() as tmp:
        httpd, ca = serve(body, Path(tmp))
        policy = Policy(allowed_networks=parse_networks("127.0.0.0/8"))
        url = f"https://127.0.0.1:{httpd.server_address[1]}/team.ics"
        fetched = []
        for _ in range(args.rounds):
            started = time.perf_counter()
            assert fetch(url, auth=Auth(ca_pem=ca), policy=policy).body == body
            fetched.append(time.perf_counter() - started)
        httpd.shutdown()
    print(f"fetch over loopback HTTPS: {min(fetched) * 1e3:.1f} ms wall (best of {args.rounds})")

    for label, end in (("35-day horizon", NOW + HORIZON), ("whole year", YEAR_START + timedelta(days=365))):
        start = NOW if label.startswith("35") else YEAR_START
        cpu = []
        for _ in range(args.rounds):
            started = time.thread_time()
            found = expand(body, start, end, max_events=10**6)
            cpu.append(time.thread_time() - started)
        print(f"parse + expand in process, {label}: {min(cpu) * 1e3:.0f} ms CPU, {len(found.events)} events")
    walls, cpus = [], []
    for _ in range(args.rounds):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        horizon = parse_in_child(body, NOW, NOW + HORIZON)
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    print(
        f"parse in the child (as the controller does), 35 days: {min(walls) * 1e3:.0f} ms wall, "
        f"{min(cpus) * 1e3:.0f} ms CPU of the child, {len(horizon.events)} events"
    )

    cal = parse_calendar(FEED)
    busy = status_entry(
        cal, None, NOW - timedelta(minutes=3), events=horizon.events, complete_until=NOW + HORIZON
    )
    bounds_cals = [{**FEED, "url": f"https://calendar.example.com/{i}.ics"} for i in range(4)]
    bounds = [
        status_entry(
            parse_calendar(c),
            None,
            NOW - timedelta(minutes=3),
            events=[
                FeedEvent(
                    NOW + timedelta(minutes=30 * (2 * k + i % 2) - 60),
                    NOW + timedelta(minutes=30 * (2 * k + i % 2) - 20),
                    f"u{k}",
                    f"Event {k}",
                )
                for k in range(MAX_INTERVALS)
            ],
            complete_until=NOW + HORIZON,
        )
        for i, c in enumerate(bounds_cals)
    ]
    print(
        "\n| gate | intervals in status | state | next transition | compile CPU ms (per status write, "
        "watch thread) | first evaluation CPU ms, state | with next transition | warm CPU ms, worst minute |"
    )
    print("|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for name, keeper in (
        ("busy calendar, 35 days", keeper_with([busy], [FEED])),
        ("4 calendars x 500 intervals (the bounds), interleaved", keeper_with(bounds, bounds_cals)),
    ):
        compiling, decided, cold, warm, state = evaluation(keeper, args.rounds)
        worst = max(worst, compiling + cold, warm)
        count = sum(len(s["intervals"]) for s in keeper["status"]["calendars"])
        nxt = state.next_transition.isoformat() if state.next_transition else "unknown"
        print(
            f"| {name} | {count} | {'open' if state.open else 'closed'} ({state.reason}) | {nxt} | "
            f"{compiling:.2f} | {decided:.3f} | {cold:.3f} | {warm:.3f} |"
        )
    print(
        f"\nworst (best of {args.rounds} rounds): {worst:.2f} ms for compile + first evaluation with the next "
        f"transition (target <= 5 ms, the GateKeeper bound)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
