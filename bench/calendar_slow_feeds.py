"""Slow calendar feeds and a fast one: how long one tenant's trickling feeds hold back another
GateKeeper's status.

``--namespaces`` N namespaces, each with ``--feeds`` M calendars (GateKeepers of at most 4) on a
local HTTPS server that trickles a byte every 0.2 s, so each fetch takes the whole
``--deadline``; and one GateKeeper of one fast feed in a namespace of its own. The controller's
calendar loop (``CalendarSync.run``, ``--workers`` fetch threads, the real fetch, the parse in
process) runs against FakeKube; wall clock, from the start, until:

- the fast GateKeeper's status is written (and how many slow fetches were still in flight then);
- every slow calendar has been fetched once (its error written).

``--scenario start``: every GateKeeper is there when the loop starts (a controller starting, or
a new leader). ``--scenario added``: the fast GateKeeper is created once the slow fetches are in
flight (a new freeze), timed from its creation. ``--source DIR`` runs another checkout's
``admission`` package (before/after: ``git archive 9cd431c admission | tar -x -C /tmp/before``).

    .venv/bin/python bench/calendar_slow_feeds.py [--namespaces 3] [--feeds 4] [--deadline 5]
        [--scenario start|added] [--source /tmp/before]
"""

from __future__ import annotations

import argparse
import base64
import logging
import math
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--namespaces", type=int, default=3)
    parser.add_argument("--feeds", type=int, default=4, help="slow calendars per namespace")
    parser.add_argument(
        "--deadline", type=float, default=5.0, help="the fetch deadline (--calendar-timeout), s"
    )
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--scenario", choices=("start", "added"), default="start")
    parser.add_argument("--source", help="a checkout whose admission package to measure (default: this one)")
    args = parser.parse_args()
    logging.getLogger("admission.calendars").setLevel(logging.ERROR)  # a line per slow feed otherwise
    sys.path.insert(0, str(Path(args.source or ROOT).resolve()))
    sys.path.insert(1, str(ROOT))  # tests.doubles.feedserver, tests.doubles.fakekube

    import admission.kube.calendarsync as measured
    from admission.core.base import names
    from admission.ical.fetch import Policy, fetch, parse_networks
    from admission.ical.parse import expand
    from admission.kube.calendarsync import CalendarSync
    from tests.doubles.fakekube import FakeKube
    from tests.doubles.feedserver import FeedServer

    feed = (
        b"BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//bench//EN\r\nBEGIN:VEVENT\r\nUID:f@b\r\n"
        b"SUMMARY:Freeze\r\nDTSTART:20991219T000000Z\r\nDTEND:20991228T000000Z\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
    )
    server = FeedServer(Path(tempfile.mkdtemp()))
    server.routes["/slow.ics"] = server.trickle
    server.routes["/fast.ics"] = server.body(feed)
    ca = base64.b64encode(server.ca_pem).decode()

    def keeper(namespace: str, name: str, urls: list[str]) -> dict:
        cals = [
            {"url": url, "name": f"c{i}", "caBundle": ca, "interval": "15m"} for i, url in enumerate(urls)
        ]
        return {
            "apiVersion": names.GATING_API_VERSION,
            "kind": names.GATEKEEPER_KIND,
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"gate": "freeze", "calendars": cals},
        }

    kube, present = FakeKube(), []
    for n in range(args.namespaces):
        urls = [server.url(f"/slow.ics?ns={n}&feed={i}") for i in range(args.feeds)]
        for k in range(0, len(urls), 4):
            kube.add(names.GATEKEEPER_PLURAL, keeper(f"tenant-{n:03d}", f"slow-{k // 4}", urls[k : k + 4]))
            present.append((f"tenant-{n:03d}", f"slow-{k // 4}"))
    fast_key = ("zz-fast", "fast")  # sorts last: no head start from the listing's order

    def add_fast() -> None:
        kube.add(names.GATEKEEPER_PLURAL, keeper(*fast_key, [server.url("/fast.ics")]))
        present.append(fast_key)

    in_flight, lock = [0], threading.Lock()

    def counting(url, **kw):
        slow = "/slow.ics" in url
        with lock:
            in_flight[0] += slow
        try:
            return fetch(url, **kw)
        finally:
            with lock:
                in_flight[0] -= slow

    landed: list[tuple[float, int]] = []
    errors: set[tuple[str, str, str]] = set()
    patch = kube.patch_namespaced_custom_object_status

    def recording(group, version, namespace, plural, name, body, **kw):
        if (namespace, name) == fast_key and not landed:
            with lock:
                landed.append((time.monotonic(), in_flight[0]))
        for cal in (body.get("status") or {}).get("calendars") or []:
            if cal.get("error"):
                errors.add((namespace, name, cal["url"]))
        return patch(group, version, namespace, plural, name, body, **kw)

    kube.patch_namespaced_custom_object_status = recording
    policy = Policy(
        total_timeout=args.deadline, connect_timeout=1.0, allowed_networks=parse_networks("127.0.0.0/8")
    )
    sync = CalendarSync(
        kube,
        kube,
        lambda: [kube.get(names.GATEKEEPER_PLURAL, *key) for key in list(present)],
        policy=policy,
        fetcher=counting,
        workers=args.workers,
        parser=lambda body, start, end, **kw: expand(body, start, end, **kw),
    )
    slow_total = args.namespaces * args.feeds
    if args.scenario == "start":
        add_fast()
    stopped, wake = threading.Event(), threading.Event()
    loop = threading.Thread(target=sync.run, args=(stopped, wake, lambda: True), daemon=True)
    began = time.monotonic()
    loop.start()
    limit = began + math.ceil(slow_total / max(1, args.workers)) * args.deadline * 2 + 30
    if args.scenario == "added":
        while in_flight[0] < min(args.workers, slow_total) // 2 and time.monotonic() < limit:
            time.sleep(0.01)
        began = time.monotonic()
        add_fast()
        wake.set()  # the controller's poke on the GateKeeper's watch event
    while (not landed or len(errors) < slow_total) and time.monotonic() < limit:
        time.sleep(0.01)
    all_slow = time.monotonic() - began
    stopped.set()
    wake.set()
    loop.join(5)
    server.stop()

    command = "python bench/calendar_slow_feeds.py " + " ".join(sys.argv[1:])
    print(f"command: {command}")
    print(f"code: {Path(measured.__file__).resolve().parents[2]}")
    print(
        f"{args.namespaces} namespaces x {args.feeds} trickling feeds, 1 fast feed, deadline {args.deadline:g}s, "
        f"{args.workers} workers, scenario {args.scenario}"
    )
    if landed:
        print(
            f"fast GateKeeper's status written after: {landed[0][0] - began:.2f} s "
            f"(slow fetches in flight then: {landed[0][1]})"
        )
    else:
        print("fast GateKeeper's status: never written")
    print(f"every slow calendar fetched once after: {all_slow:.2f} s ({len(errors)} of {slow_total})")


if __name__ == "__main__":
    main()
