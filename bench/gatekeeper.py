"""Worst-case cost of evaluating one gate whose GateKeepers are as hostile as the CRD allows.

Each candidate is schema-valid (manifests/crds: at most 16 entries per list, and the code's 32
entries per gate over all its GateKeepers). For each: the first evaluation after the GateKeepers
are read (caches of parsed crons, entries and day tables cleared: "cold"), as an allowed review
pays it (the state: compile + evaluate) and as a denial or a status write pays it (the state
and its next transition, which is searched for only when asked); then one evaluation per minute
for an hour after it, next transition included, as lookups would ("warm"). Times are the
thread's CPU time: on a shared machine wall-clock figures measure the neighbours. Prints the
worst of each and the command.

    .venv/bin/python bench/gatekeeper.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from admission.core.base import names  # noqa: E402
from admission.core.gates import gates, gatespec
from admission.core.time import cron, crondays, localtime, schedule

NOW = datetime(2026, 11, 22, 2, 13, 30, tzinfo=UTC)
PER_LIST = gatespec.MAX_ENTRIES_PER_LIST


def keeper(name: str, closed: list, opened: list = (), zone: str | None = None) -> dict:
    spec = {
        "gate": "g",
        "type": "cronexpression",
        "cronjob": {"closed": list(closed), "opened": list(opened)},
    }
    if zone:
        spec["timeZone"] = zone
    return {"metadata": {"name": name, "namespace": "default"}, "spec": spec}


def window(cron: str, duration: str = "1m") -> dict:
    return {"cron": cron, "duration": duration}


# The hostile GateKeeper, cut to the schema's bounds: two strings that together match every
# minute (so the state never changes and the next transition is searched for ever), and
# copies of a window that fires once every four years.
ALTERNATING = ["*/2 * * * *", "1-59/2 * * * *"]
CANDIDATES = {
    "hostile: alternating minutes + 30 copies of Feb 29 windows": [
        keeper("a", ALTERNATING + [window("0 0 29 2 *")] * (PER_LIST - 2), [window("0 0 29 2 *")] * PER_LIST),
    ],
    "32 distinct Feb 29 windows (nothing shared)": [
        keeper("a", [window(f"{m} 0 29 2 *") for m in range(PER_LIST)]),
        keeper("b", [window(f"{m} 1 29 2 *") for m in range(PER_LIST)]),
    ],
    "alternating minutes + 30 distinct Feb 29 windows": [
        keeper(
            "a",
            ALTERNATING + [window(f"{m} 0 29 2 *") for m in range(PER_LIST - 2)],
            [window(f"{m} 1 29 2 *") for m in range(PER_LIST)],
        ),
    ],
    "32 distinct sparse minute-match strings": [
        keeper("a", [f"{m} 0 29 2 *" for m in range(PER_LIST)], [f"{m} 1 29 2 *" for m in range(PER_LIST)]),
    ],
    "32 windows on 5th Mondays or Feb 29, DST zone": [
        keeper(
            "a",
            [window(f"{m} 2 29 2 MON#5", "61m") for m in range(PER_LIST)],
            [window(f"{m} 3 L 2 1#5", "2h") for m in range(PER_LIST)],
            zone="America/Santiago",
        ),
    ],
    "alternating minutes in two zones + overlapping long windows": [
        keeper(
            "a",
            ALTERNATING + [window(f"*/{k} * * * *", "400h") for k in range(2, PER_LIST)],
            [f"CRON_TZ=Asia/Kathmandu {m}-59/7 * * * *" for m in range(PER_LIST)],
        ),
    ],
    # The 1st of a month that is also its 5th Monday: never. Every day in the 400-day horizon
    # is looked at; cronsim alone walks 50 years before it gives up.
    "32 never-firing entries (1st AND 5th Monday), DST zone": [
        keeper(
            "a",
            [window(f"{m} 0 */31 * 1#5", "9600h") for m in range(PER_LIST)],
            [f"{m} 1 */31 * {d}#5" for m in range(PER_LIST // 2) for d in (1, 2)],
            zone="America/Santiago",
        ),
    ],
    # Windows as long as allowed, each on its own rare day (5th weekdays, last days), in a
    # zone that skips and repeats midnight: every entry is active and overlaps the others.
    "32 maximal windows on distinct rare days, DST zone": [
        keeper(
            "a",
            [
                window(f"{m} 0 L * {d}#5", "9600h")
                for m, d in zip(range(PER_LIST), [1, 2, 3, 4, 5, 6, 0] * 3, strict=False)
            ],
        ),
        keeper(
            "b",
            [
                window(f"{m} 0 */30 * {d}L", "9599h")
                for m, d in zip(range(PER_LIST), [1, 2, 3, 4, 5, 6, 0] * 3, strict=False)
            ],
            zone="America/Santiago",
        ),
    ],
    # Windows every 15 minutes lasting 30 overlap for ever, in zones whose clocks change on
    # different days; an open request 44 hours away is when the gate opens.
    "32 never-ending chains of overlapping windows in 8 zones + an open request": [
        keeper(f"z{i}", [window(f"{m}-59/15 * * * *", "30m") for m in range(i * 4, i * 4 + 4)], zone=z)
        for i, z in enumerate(
            [
                "UTC",
                "Europe/Berlin",
                "America/New_York",
                "America/Santiago",
                "Australia/Lord_Howe",
                "Asia/Kathmandu",
                "America/Nuuk",
                "Africa/Casablanca",
            ]
        )
    ],
}
GATE = {"metadata": {"name": "g", "namespace": "default"}, "spec": {"default": "opened"}}
GATES = {
    "32 never-ending chains of overlapping windows in 8 zones + an open request": {
        "metadata": {
            "name": "g",
            "namespace": "default",
            "annotations": {names.OPEN_ANNOTATION: "2026-11-23T22:13:00Z"},
        },
        "spec": {"default": "opened", "window": "24h"},
    }
}


def clear_caches() -> None:
    schedule._entry.cache_clear()
    cron._parse_cron.cache_clear()
    crondays.day_table.cache_clear()
    localtime.steady_offset.cache_clear()
    localtime.unsteady_days.cache_clear()


def measure(keepers: list[dict], gate: dict = GATE) -> tuple[float, float, float, gates.GateState]:
    clear_caches()
    started = time.thread_time()
    compiled = gatespec.compile_gate(gate, keepers)
    state = gates.evaluate(compiled, NOW)
    decided = time.thread_time() - started
    _ = state.next_transition
    cold = time.thread_time() - started
    warm = 0.0
    for minute in range(1, 61):
        started = time.thread_time()
        _ = gates.evaluate(compiled, NOW + timedelta(minutes=minute, seconds=minute % 7)).next_transition
        warm = max(warm, time.thread_time() - started)
    return decided, cold, warm, state


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"# .venv/bin/python bench/gatekeeper.py --rounds {args.rounds}")
    print(
        "| candidate | entries | state | next transition | cold CPU ms, state only (min / max) "
        "| cold CPU ms, with next transition (min / max) | warm CPU ms, worst minute (min / max) |"
    )
    print("|---|---|---|---|---|---|---|")
    worst_decided = worst_cold = worst_warm = 0.0
    for name, keepers in CANDIDATES.items():
        entries = sum(
            len(k["spec"]["cronjob"]["closed"]) + len(k["spec"]["cronjob"]["opened"]) for k in keepers
        )
        decideds, colds, warms = [], [], []
        for _ in range(args.rounds):
            decided, cold, warm, state = measure(keepers, GATES.get(name, GATE))
            decideds.append(decided * 1000)
            colds.append(cold * 1000)
            warms.append(warm * 1000)
        assert state.reason != names.REASON_INVALID, state.message
        worst_decided = max(worst_decided, min(decideds))
        worst_cold, worst_warm = max(worst_cold, min(colds)), max(worst_warm, min(warms))
        nxt = state.next_transition.isoformat() if state.next_transition else "unknown"
        print(
            f"| {name} | {entries} | {'open' if state.open else 'closed'} ({state.reason}) | {nxt} | "
            f"{min(decideds):.2f} / {max(decideds):.2f} | "
            f"{min(colds):.2f} / {max(colds):.2f} | {min(warms):.2f} / {max(warms):.2f} |"
        )
    print(
        f"\nworst (best of {args.rounds} rounds): cold {worst_decided:.2f} ms for the state, {worst_cold:.2f} ms "
        f"with the next transition, warm {worst_warm:.2f} ms (target <= 5 ms)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
