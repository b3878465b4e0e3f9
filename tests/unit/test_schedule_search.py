"""The cold path's searches give what cronsim itself gives, found the slow, obvious way.

Month tables, starting cronsim right before a day's first fire, copies of the parsed
expression, wall-clock arithmetic over windows that overlap one another: each is checked here
against a fresh CronSim walked from the start, or the wall clock read minute by minute, in
zones that skip or repeat midnight (Santiago, Havana), change at 23:00 (Nuuk), by 30 minutes
(Lord Howe), twice within weeks (Casablanca), or never (Kathmandu), on 29 February, 5th and
last weekdays, and windows across midnight and the year's end.
"""

from __future__ import annotations

import itertools
import random
from datetime import UTC, datetime, timedelta

import pytest
from cronsim import CronSim

from admission.core.time.cron import HORIZON, ScheduleError, parse_cron, zone
from admission.core.time.schedule import Entry, parse_entry
from tests.builders import at

ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "America/Santiago",
    "America/Nuuk",
    "Australia/Lord_Howe",
    "Asia/Kathmandu",
    "America/Havana",
    "Africa/Casablanca",
]
EXPRESSIONS = [
    "30 2 * * *",
    "0 0 * * *",
    "30 23 * * 6",
    "*/15 * * * *",
    "* 2 * * *",
    "0 0 29 2 *",
    "0 12 * * MON#5",
    "5 3 L 2 1#5",
    "0 0 LW * *",
    "0 9 * * 1L",
    "*/30 0 */31 * 0#1",
    "59 23 31 12 *",
    "0 1-3 * * SUN",
    "15,45 0-1 * 3,10 0",
    "0-58 * * * *",
    "* 9-16 * * MON-FRI",
]
STRINGS = [
    "* 2 * * *",
    "0-58 * * * *",
    "* 9-16 * * MON-FRI",
    "* * 29 2 *",
    "* 0 * * 1#5",
    "*/20 23,0 * * *",
    "* * L * *",
    "* 1-3 * 3,4,9,10 0",
]
WINDOWS = [
    ("30 23 * * *", "2h"),
    ("*/15 * * * *", "30m"),
    ("0 18 * * 5", "62h"),
    ("0 0 29 2 *", "24h"),
    ("59 23 31 12 *", "3h"),
    ("0 12 * * MON#5", "90m"),
    ("* 9-16 * * MON-FRI", "1m"),
    ("0 * * * *", "61m"),
    ("30 2 * * *", "25h"),
    ("0 0 L * *", "9600h"),
]


def transitions(name: str, start: datetime, end: datetime) -> list[datetime]:
    """The instants the zone's UTC offset changes between ``start`` and ``end`` (to the minute)."""
    tz, found, t = zone(name), [], start
    while t < end:
        nxt = t + timedelta(hours=6)
        if t.astimezone(tz).utcoffset() != nxt.astimezone(tz).utcoffset():
            lo, hi = t, nxt
            while hi - lo > timedelta(minutes=1):
                mid = lo + (hi - lo) / 2
                lo, hi = (
                    (mid, hi)
                    if mid.astimezone(tz).utcoffset() == lo.astimezone(tz).utcoffset()
                    else (lo, mid)
                )
            found.append(hi)
        t = nxt
    return found


def instants(name: str) -> list[datetime]:
    """Around each clock change of a year and some dates cron finds hard, plus a few at random."""
    out = []
    for change in transitions(name, at("2026-11-01T00:00"), at("2027-11-01T00:00")):
        out += [change + timedelta(minutes=m) for m in (-181, -61, -1, 0, 1, 59, 121)]
    out += [
        at(t)
        for t in (
            "2026-11-22T02:13:30",
            "2026-11-30T11:59",
            "2026-12-31T23:30",
            "2027-01-01T00:00:30",
            "2028-02-28T23:59",
            "2028-02-29T12:00",
            "2027-03-29T12:00",
        )
    ]
    rng = random.Random(name)
    out += [
        at("2026-11-01T00:00") + timedelta(minutes=rng.randrange(400 * 24 * 60), seconds=rng.randrange(60))
        for _ in range(4)
    ]
    return out


def reference_next_fire(spec, start):
    """cronsim from ``start``: the first fire after it (as the code searched before month tables)."""
    for fire in itertools.islice(CronSim(spec.expr, start.astimezone(spec.zone)), 4):
        if fire.astimezone(UTC) > start:
            return fire.astimezone(UTC)
    return None


def reference_last_fire(spec, now):
    local = now.astimezone(spec.zone).replace(microsecond=0) + timedelta(seconds=1)
    for fire in itertools.islice(CronSim(spec.expr, local, reverse=True), 4):
        if fire.astimezone(UTC) <= now:
            return fire.astimezone(UTC)
    return None


def reference_active(entry, now):
    if entry.duration is None:
        return entry.spec.matches(now)
    fire = reference_next_fire(entry.spec, now - entry.duration)
    return fire is not None and fire <= now


def reference_window_end(entry, first, until):
    """Fire by fire from ``first``: when the windows that overlap one another end (None: after ``until``)."""
    latest = first
    for fire in CronSim(entry.spec.expr, first.astimezone(entry.spec.zone)):
        fire = fire.astimezone(UTC)
        if fire <= latest:
            continue
        if fire - latest > entry.duration:
            return latest + entry.duration
        if fire > until:
            return None
        latest = fire
    return latest + entry.duration


@pytest.mark.parametrize("name", ZONES)
def test_next_and_last_fire_are_cronsims_own(name):
    for expr in EXPRESSIONS:
        spec = parse_cron(expr, name)
        for now in instants(name):
            want = reference_next_fire(spec, now)
            got = spec.next_fire(now)
            assert got == (want if want is not None and want <= now + HORIZON - timedelta(days=1) else got), (
                expr,
                now,
            )
            if want is not None and want > now + HORIZON + timedelta(days=1):
                assert got is None, (expr, now)
            want = reference_last_fire(spec, now)
            got = spec.last_fire(now)
            if want is not None and want >= now - HORIZON + timedelta(days=1):
                assert got == want, (expr, now)
            else:
                assert got is None or got == want, (expr, now)


@pytest.mark.parametrize("name", ZONES)
def test_next_flip_is_the_first_minute_the_wall_clock_match_changes(name):
    for expr in STRINGS:
        spec = parse_cron(expr, name)
        for now in instants(name)[::3]:
            state, until = spec.matches(now), now + timedelta(days=2)
            minute = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
            while minute <= until and spec.matches(minute) == state:
                minute += timedelta(minutes=1)
            assert spec.next_flip(now, until=until) == (minute if minute <= until else None), (expr, now)


@pytest.mark.parametrize("name", ZONES)
def test_entries_are_active_as_cronsim_says_and_stay_so_until_their_next_change(name):
    for expr, duration in WINDOWS + [(s, None) for s in STRINGS[:3]]:
        entry = parse_entry({"cron": expr, "duration": duration} if duration else expr, name)
        for now in instants(name)[::2]:
            active = reference_active(entry, now)
            assert entry.active(now) is active, (expr, duration, now)
            change = entry.next_change(now)
            stable = entry.stable_until(now)
            assert stable is None or change is None or stable <= change
            probe = now + timedelta(seconds=17)
            while probe < min(change or now + timedelta(days=2), now + timedelta(days=2)):
                assert reference_active(entry, probe) is active, (expr, duration, now, probe, change)
                probe += timedelta(minutes=37)
            if change is not None and change < now + timedelta(days=2) and not active:
                assert reference_active(entry, change), (expr, duration, now, change)  # a start is exact


@pytest.mark.parametrize("name", ZONES)
def test_overlapping_windows_end_where_fires_first_leave_a_gap(name):
    for expr, duration in WINDOWS:
        entry = parse_entry({"cron": expr, "duration": duration}, name)
        for now in instants(name)[::2]:
            if not reference_active(entry, now):
                continue
            first = reference_next_fire(entry.spec, now - entry.duration)
            end = entry.next_change(now)
            want = reference_window_end(entry, first, now + timedelta(days=3))
            # Exact on days of steady clock; across a clock change a time it is open until at least.
            assert end is None or want is None or end <= want, (expr, duration, now, end, want)
            steady = not transitions(
                name,
                now - entry.duration,
                min(want or now + timedelta(days=3), now + timedelta(days=3)) + timedelta(hours=3),
            )
            if steady and want is not None:
                assert end == want, (expr, duration, now, end, want)


def test_a_remembered_answer_is_the_answer_a_new_search_gives():
    # Evaluation must stay a function of now: the spans an entry keeps change nothing.
    rng = random.Random(14)
    for name in ("Europe/Berlin", "America/Santiago", "UTC"):
        for expr, duration in WINDOWS + [(s, None) for s in STRINGS]:
            warm = parse_entry({"cron": expr, "duration": duration} if duration else expr, name)
            now = at("2026-10-20T00:00") + timedelta(minutes=rng.randrange(60 * 24 * 200))
            for _ in range(40):
                now += timedelta(minutes=rng.choice([1, 7, 59, 180, 60 * 24]), seconds=rng.randrange(60))
                cold = Entry(warm.spec, warm.duration)
                assert warm.active(now) == cold.active(now), (expr, duration, now)
                assert warm.stable_until(now) == Entry(warm.spec, warm.duration).stable_until(now), (
                    expr,
                    duration,
                    now,
                )
                assert warm.state_and_next_change(now) == Entry(
                    warm.spec, warm.duration
                ).state_and_next_change(now), (expr, duration, now)


@pytest.mark.parametrize("expr", EXPRESSIONS)
@pytest.mark.parametrize("name", ["UTC", "Europe/Berlin", "America/Santiago"])
def test_a_search_copies_the_parsed_expression_as_cronsim_would_build_it(expr, name):
    # cronsim's constructor, not its parser, decides how a search runs; a cronsim upgrade
    # that changes it fails here rather than in a gate.
    spec = parse_cron(expr, name)
    for start in (at("2026-03-29T00:59:59"), at("2026-10-25T01:30:00.5"), at("2026-11-22T02:13:30")):
        local = start.astimezone(spec.zone)
        for reverse in (False, True):
            assert vars(spec._sim(local, reverse)) == vars(CronSim(spec.expr, local, reverse)), (
                start,
                reverse,
            )


# -- edges pinned -----------------------------------------------------------------------------


def test_a_5th_monday_is_found_without_walking_the_days():
    assert parse_cron("0 12 * * MON#5").next_fire(at("2026-11-22T00:00")) == at("2026-11-30T12:00")
    assert parse_cron("0 12 * * MON#5").last_fire(at("2026-11-22T00:00")) == at("2026-08-31T12:00")


def test_29_february_is_found_when_within_the_horizon_only():
    feb29 = parse_cron("0 0 29 2 *")
    assert feb29.next_fire(at("2026-11-22T00:00")) is None  # 2028-02-29 is 464 days ahead
    assert feb29.next_fire(at("2027-03-01T00:00")) == at("2028-02-29T00:00")
    assert feb29.last_fire(at("2028-03-01T00:00")) == at("2028-02-29T00:00")
    window = parse_entry({"cron": "0 0 29 2 *", "duration": "24h"})
    assert window.active(at("2028-02-29T23:59")) and not window.active(at("2028-03-01T00:00"))
    assert window.next_change(at("2028-02-29T12:00")) == at("2028-03-01T00:00")


def test_windows_across_midnight_and_the_year_end():
    late = parse_entry({"cron": "30 23 * * *", "duration": "2h"})
    assert late.active(at("2026-12-31T23:30")) and late.active(at("2027-01-01T01:29"))
    assert late.next_change(at("2027-01-01T00:15")) == at("2027-01-01T01:30")
    new_year = parse_entry({"cron": "0 22 31 12 *", "duration": "4h"}, "Europe/Berlin")
    assert new_year.active(at("2027-01-01T00:30")) and new_year.next_change(at("2027-01-01T00:30")) == at(
        "2027-01-01T01:00"
    )


def test_windows_that_overlap_end_when_the_last_one_does():
    hourly = parse_entry({"cron": "0 9-17 * * MON-FRI", "duration": "90m"}, "Europe/Berlin")
    # Monday 2026-11-23: 09:00 to 17:00 CET, each window 90 minutes: open until 18:30 CET.
    assert hourly.next_change(at("2026-11-23T08:10")) == at("2026-11-23T17:30")
    every_quarter = parse_entry({"cron": "*/15 * * * *", "duration": "30m"})
    assert every_quarter.next_change(at("2026-11-22T02:13:30")) is None  # never a gap: open for good


def test_midnight_skipped_in_santiago_runs_a_fixed_time_job_right_after_the_gap():
    # 2026-09-06 00:00 -04 jumps to 01:00 -03: 00:30 does not exist; Debian cron runs it at 01:00.
    spec = parse_cron("30 0 * * *", "America/Santiago")
    assert spec.next_fire(at("2026-09-05T12:00")) == at("2026-09-06T04:00")
    window = parse_entry({"cron": "30 0 * * *", "duration": "1h"}, "America/Santiago")
    assert window.active(at("2026-09-06T04:30")) and not window.active(at("2026-09-06T05:00"))


def test_nuuk_moves_a_saturday_23_30_job_to_sunday_midnight():
    # America/Nuuk springs forward at 23:00 local on the last Saturday of March 2027 (01:00 UTC).
    spec = parse_cron("30 23 * * 6", "America/Nuuk")
    assert spec.next_fire(at("2027-03-27T12:00")) == reference_next_fire(spec, at("2027-03-27T12:00"))


def test_durations_longer_than_the_horizon_are_refused():
    with pytest.raises(ScheduleError, match="longer than 9600h"):
        parse_entry({"cron": "0 0 1 1 *", "duration": "9601h"})
    with pytest.raises(ScheduleError, match="too long"):
        parse_entry({"cron": "0 0 1 1 *", "duration": "9" * 40 + "h"})
    assert parse_entry({"cron": "0 0 1 1 *", "duration": "9600h"}).duration == HORIZON
