from datetime import timedelta

import pytest

from admission.core.time.cron import ScheduleError, parse_cron
from admission.core.time.schedule import parse_entry
from tests.builders import at


@pytest.mark.parametrize(
    "expr, now, active",
    [
        ("* * 20-30 11 *", "2026-11-20T00:00", True),  # Black Friday, first minute
        ("* * 20-30 11 *", "2026-11-30T23:59", True),  # last minute
        ("* * 20-30 11 *", "2026-12-01T00:00", False),
        ("* * 20-30 11 *", "2026-11-19T23:59", False),
        ("* 0-4 * * *", "2026-05-01T04:59", True),  # covers 00:00-04:59
        ("* 0-4 * * *", "2026-05-01T05:00", False),
        ("0 18 * * 5", "2026-11-20T18:00", True),  # a Friday, only that minute
        ("0 18 * * 5", "2026-11-20T18:01", False),
        ("@always", "2026-01-01T00:00", True),
        ("@never", "2026-01-01T00:00", False),
        ("@daily", "2026-01-01T00:00", True),
        ("@daily", "2026-01-01T00:01", False),
        ("@hourly", "2026-01-01T07:00", True),
        ("@weekly", "2026-11-22T00:00", True),  # a Sunday
        ("@monthly", "2026-11-01T00:00", True),
        ("@yearly", "2027-01-01T00:00", True),
        ("*/15 * * * *", "2026-01-01T10:45", True),
        ("*/15 * * * *", "2026-01-01T10:46", False),
        ("* * * * MON-FRI", "2026-11-21T12:00", False),  # a Saturday
        ("* * * DEC *", "2026-12-24T12:00", True),
    ],
)
def test_minute_match_strings_are_active_in_every_matching_minute(expr, now, active):
    assert parse_cron(expr).matches(at(now)) is active


def test_seconds_inside_a_matching_minute_match():
    assert parse_cron("0 18 * * 5").matches(at("2026-11-20T18:00:59"))


def test_time_zone_and_cron_tz_prefix_read_the_wall_clock_of_that_zone():
    # 09:00 in Berlin (CET, UTC+1 in November) is 08:00 UTC.
    assert parse_cron("* 9 * * *", "Europe/Berlin").matches(at("2026-11-21T08:30"))
    assert not parse_cron("* 9 * * *", "Europe/Berlin").matches(at("2026-11-21T09:30"))
    # A CRON_TZ prefix overrides the GateKeeper's timeZone.
    assert parse_cron("CRON_TZ=America/New_York * 9 * * *", "Europe/Berlin").matches(at("2026-11-21T14:30"))


@pytest.mark.parametrize(
    "expr, why",
    [
        ("* * *", "five fields"),
        ("61 * * * *", "invalid cron"),
        ("* * * * * *", "five fields"),
        ("@every 1h", "unknown cron macro"),
        ("CRON_TZ=Mars/Olympus * * * * *", "unknown time zone"),
        ("", "non-empty"),
    ],
)
def test_bad_cron_strings_say_why(expr, why):
    with pytest.raises(ScheduleError, match=why):
        parse_cron(expr)


def test_unknown_default_zone_is_an_error():
    with pytest.raises(ScheduleError, match="unknown time zone 'Nowhere/Land'"):
        parse_cron("* * * * *", "Nowhere/Land")


@pytest.mark.parametrize(
    "expr, now, flip",
    [
        ("* * 20-30 11 *", "2026-11-21T20:00", "2026-12-01T00:00"),
        ("* * 20-30 11 *", "2026-06-01T00:00", "2026-11-20T00:00"),
        ("* 0-4 * * *", "2026-11-22T02:10:30", "2026-11-22T05:00"),
        ("* 0-4 * * *", "2026-11-21T20:00", "2026-11-22T00:00"),
        ("0 18 * * 5", "2026-11-20T18:00", "2026-11-20T18:01"),
        ("0 18 * * 5", "2026-11-21T00:00", "2026-11-27T18:00"),
        ("*/15 * * * *", "2026-01-01T10:46", "2026-01-01T11:00"),
        ("* * 15-31 12 *", "2026-12-20T00:00", "2027-01-01T00:00"),
    ],
)
def test_next_flip_is_the_first_minute_the_match_changes(expr, now, flip):
    assert parse_cron(expr).next_flip(at(now)) == at(flip)


def test_always_and_never_never_flip():
    assert parse_cron("@always").next_flip(at("2026-01-01T00:00")) is None
    assert parse_cron("* * * * *").next_flip(at("2026-01-01T00:00")) is None
    assert parse_cron("@never").next_flip(at("2026-01-01T00:00")) is None


def test_a_date_beyond_the_horizon_has_no_known_flip():
    # 29 February 2028 is more than 400 days after March 2026.
    assert parse_cron("* * 29 2 *").next_flip(at("2026-03-01T00:00")) is None


def test_minute_match_follows_the_wall_clock_across_dst():
    berlin = "Europe/Berlin"
    # 2026-03-29: 02:00 CET jumps to 03:00 CEST; '* 2 * * *' has no minute that day.
    spec = parse_cron("* 2 * * *", berlin)
    assert spec.next_flip(at("2026-03-28T23:00")) == at("2026-03-30T00:00")  # 02:00 CEST on the 30th
    # 2026-10-25: 03:00 CEST falls back to 02:00 CET; the hour 02:xx happens twice.
    assert spec.matches(at("2026-10-25T00:30"))  # 02:30 CEST
    assert spec.matches(at("2026-10-25T01:30"))  # 02:30 CET
    assert spec.next_flip(at("2026-10-25T00:00")) == at("2026-10-25T02:00")  # 03:00 CET


def test_windows_last_duration_from_each_fire_time():
    friday = parse_entry({"cron": "0 18 * * 5", "duration": "62h"})
    assert friday.active(at("2026-11-20T18:00"))  # Friday 18:00
    assert friday.active(at("2026-11-23T07:59:59"))  # Monday 07:59:59
    assert not friday.active(at("2026-11-23T08:00"))  # Monday 08:00
    assert not friday.active(at("2026-11-20T17:59:59"))
    assert friday.next_change(at("2026-11-21T12:00")) == at("2026-11-23T08:00")
    assert friday.next_change(at("2026-11-23T09:00")) == at("2026-11-27T18:00")


def test_windows_open_once_across_a_dst_fall_back():
    # 02:30 happens twice in Berlin on 2026-10-25; the window opens at the first only.
    entry = parse_entry({"cron": "30 2 * * *", "duration": "30m"}, "Europe/Berlin")
    assert entry.active(at("2026-10-25T00:45"))  # 02:45 CEST
    assert not entry.active(at("2026-10-25T01:45"))  # 02:45 CET: no second opening
    assert entry.next_change(at("2026-10-25T01:00")) == at("2026-10-26T01:30")


def test_windows_in_a_spring_forward_gap_open_right_after_it():
    entry = parse_entry({"cron": "30 2 * * *", "duration": "1h"}, "Europe/Berlin")
    # 02:30 does not exist on 2026-03-29; Debian cron runs the job at 03:00 CEST.
    assert entry.next_change(at("2026-03-28T12:00")) == at("2026-03-29T01:00")
    assert entry.active(at("2026-03-29T01:30"))
    assert not entry.active(at("2026-03-29T02:00"))


def test_durations_are_elapsed_time_not_wall_clock():
    # A 24h window that spans the spring-forward night ends at 19:00 local, not 18:00.
    entry = parse_entry({"cron": "0 18 28 3 *", "duration": "24h"}, "Europe/Berlin")
    assert entry.active(at("2026-03-29T15:59"))  # 17:59 CEST
    assert not entry.active(at("2026-03-29T17:00"))  # 19:00 CEST = 24h after 18:00 CET


@pytest.mark.parametrize(
    "item, why",
    [
        ({"cron": "0 18 * * 5", "duration": "forever"}, "invalid duration"),
        ({"cron": "0 18 * * 5", "duration": "-1h"}, "must be positive"),
        ({"cron": "0 18 * * 5", "length": "1h"}, "unknown fields"),
        ({"duration": "1h"}, "non-empty string"),
        (42, "cron string"),
    ],
)
def test_bad_entries_say_why(item, why):
    with pytest.raises(ScheduleError, match=why):
        parse_entry(item)


def test_an_entry_without_duration_is_minute_match():
    entry = parse_entry({"cron": "* 0-4 * * *"})
    assert entry.duration is None and entry.active(at("2026-01-01T04:59"))


def test_window_next_change_when_inactive_is_the_next_fire():
    entry = parse_entry({"cron": "0 18 * * 5", "duration": timedelta(hours=1) and "1h"})
    assert entry.next_change(at("2026-11-20T19:00")) == at("2026-11-27T18:00")


@pytest.mark.parametrize("text", [["* * * * *"], {"cron": "* * * * *"}, 42, None])
def test_a_cron_that_is_not_a_string_is_a_schedule_error_not_a_type_error(text):
    # Found by bench/fuzz.py: the cache hashed a list before the type was checked.
    with pytest.raises(ScheduleError, match="non-empty string"):
        parse_cron(text)
    with pytest.raises(ScheduleError, match="non-empty string"):
        parse_entry({"cron": text, "duration": "1h"})


@pytest.mark.parametrize("zone_name", ["America", "Europe", "a" * 300])
def test_a_zone_that_is_a_directory_or_too_long_a_name_is_unknown(zone_name):
    # Found by bench/fuzz.py: ZoneInfo raises IsADirectoryError / ENAMETOOLONG (OSError) for these.
    with pytest.raises(ScheduleError, match="unknown time zone"):
        parse_entry("* * * * *", zone_name)


def test_absurdly_long_cron_strings_are_refused():
    with pytest.raises(ScheduleError, match="more than 256"):
        parse_cron("* * * * " + ",".join(["1"] * 200))
