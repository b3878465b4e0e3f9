"""The freeze calendar's cost: GET /calendar.ics work (intervals + iCalendar) for many gates.

Usage: python bench/freeze_calendar.py [--gates 100] [--days 14] [--dense-every 10]
Each gate has a GateKeeper with a nightly 2h window and a weekend freeze in Europe/Berlin, and
every tenth (--dense-every; 0: none) a schedule that flips every 2 minutes instead (the worst
case the step bound and the 500-event cap exist for).
Prints the time to compute the intervals, to render the text timeline and the ICS, and its size.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from datetime import UTC, datetime

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from admission.store.calendar import calendars, to_ics, to_lines  # noqa: E402
from admission.store.index import GateIndex  # noqa: E402

NOW = datetime(2026, 12, 20, 10, 0, tzinfo=UTC)


def world(count: int, dense_every: int = 10) -> GateIndex:
    gates, keepers = [], []
    for i in range(count):
        name = f"gate-{i}"
        gates.append({"kind": "Gate", "metadata": {"name": name, "namespace": "flux-system"}, "spec": {}})
        closed = (
            ["*/2 * * * *"]
            if dense_every and i % dense_every == dense_every - 1
            else [{"cron": "0 1 * * *", "duration": "2h"}, {"cron": "0 18 * * 5", "duration": "62h"}]
        )
        keepers.append(
            {
                "kind": "GateKeeper",
                "metadata": {"name": f"keeper-{i}", "namespace": "flux-system"},
                "spec": {"gate": name, "timeZone": "Europe/Berlin", "cronjob": {"closed": closed}},
            }
        )
    index = GateIndex()
    index.replace_all(gates, keepers)
    return index


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gates", type=int, default=100)
    parser.add_argument("--dense-every", type=int, default=10)
    parser.add_argument("--days", type=int, default=14)
    args = parser.parse_args()
    index = world(args.gates, args.dense_every)
    started = time.perf_counter()
    cals = calendars(index, NOW, args.days)
    computed = time.perf_counter()
    text = "\n".join(to_lines(cals, NOW, args.days))
    texted = time.perf_counter()
    ics = to_ics(cals, NOW)
    done = time.perf_counter()
    events = ics.count(b"BEGIN:VEVENT")
    print(
        f"python bench/freeze_calendar.py --gates {args.gates} --days {args.days} --dense-every {args.dense_every}  "
        f"({platform.machine()}, CPython {platform.python_version()})"
    )
    print(
        f"intervals {computed - started:.2f}s  text {texted - computed:.2f}s ({len(text) // 1024} KiB)  "
        f"ics {done - texted:.2f}s ({events} events, {len(ics) // 1024} KiB)"
    )


if __name__ == "__main__":
    main()
