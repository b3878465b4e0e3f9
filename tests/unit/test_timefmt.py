from datetime import timedelta

import pytest

from admission.core.base.timefmt import LATEST, format_duration, format_time, parse_duration, parse_time
from tests.builders import at


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1h", timedelta(hours=1)),
        ("62h", timedelta(hours=62)),
        ("30s", timedelta(seconds=30)),
        ("1h30m", timedelta(minutes=90)),
        ("2h45m30s", timedelta(hours=2, minutes=45, seconds=30)),
        ("1.5h", timedelta(minutes=90)),
        ("500ms", timedelta(milliseconds=500)),
        ("0", timedelta(0)),
        ("-5m", timedelta(minutes=-5)),
    ],
)
def test_go_durations_parse(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "1", "h", "1d", "1h 30m", "one hour", "1hh", None, 5])
def test_bad_go_durations_are_refused_with_the_syntax(text):
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_durations_format_like_go():
    assert format_duration(timedelta(hours=62)) == "62h0m0s"
    assert format_duration(timedelta(seconds=5)) == "5s"
    assert format_duration(timedelta(minutes=90, seconds=1)) == "1h30m1s"


@pytest.mark.parametrize(
    "text", ["2021-03-26T10:00:00Z", "2021-03-26T10:00:00.000Z", "2021-03-26T12:00:00+02:00"]
)
def test_rfc3339_timestamps_parse_to_utc(text):
    assert parse_time(text) == at("2021-03-26T10:00")


@pytest.mark.parametrize(
    "text", ["", "yesterday", "2021-03-26", "2021-03-26T10:00:00", "2021-13-01T00:00:00Z", None]
)
def test_bad_timestamps_are_refused(text):
    with pytest.raises(ValueError):
        parse_time(text)


@pytest.mark.parametrize(
    "text", ["9999-12-31T23:59:59Z", "3000-01-01T00:00:00Z", "3000-01-01T03:00:00+02:00"]
)
def test_instants_past_the_horizon_are_refused(text):
    # Arithmetic from them (a toggle plus its window) would leave the calendar.
    with pytest.raises(ValueError, match="too late"):
        parse_time(text)
    assert parse_time("2999-12-31T23:59:59Z") < LATEST


def test_times_format_as_kubernetes_does():
    assert format_time(at("2021-03-26T10:00:00")) == "2021-03-26T10:00:00Z"


def test_one_formatter_per_precision_all_in_utc_with_z():
    from datetime import datetime, timedelta, timezone

    from admission.core.base.timefmt import format_distinct_time, format_log_time

    instant = datetime(2026, 6, 10, 14, 0, 5, 123456, tzinfo=timezone(timedelta(hours=2)))
    assert format_time(instant) == "2026-06-10T12:00:05Z"
    assert format_distinct_time(instant) == "2026-06-10T12:00:05.123456Z"
    assert format_log_time(instant) == "2026-06-10T12:00:05.123Z"
    later = instant + timedelta(microseconds=1)  # within the second: still distinct and in order
    assert format_time(later) == format_time(instant) and format_distinct_time(later) > format_distinct_time(
        instant
    )
    assert parse_time(format_distinct_time(instant)) == instant
