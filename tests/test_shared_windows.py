"""Aggregation windows: names, parsing, and the canonical form the server counts by."""

from datetime import datetime, timedelta, timezone

import pytest

from ldp_telemetry.shared.windows import current_window, window_of, window_start

UTC = timezone.utc


@pytest.mark.parametrize(
    ("moment", "kind", "expected"),
    [
        (datetime(2026, 11, 21, 13, 59, 59, tzinfo=UTC), "day", "2026-11-21"),
        (datetime(2026, 11, 21, 13, 59, 59, tzinfo=UTC), "hour", "2026-11-21T13"),
        (datetime(2026, 1, 2, 3, 4), "hour", "2026-01-02T03"),  # naive is taken as UTC
        # 01:30 at UTC+2 is 23:30 UTC of the day before
        (datetime(2026, 3, 1, 1, 30, tzinfo=timezone(timedelta(hours=2))), "day", "2026-02-28"),
        (datetime(2026, 3, 1, 1, 30, tzinfo=timezone(timedelta(hours=2))), "hour", "2026-02-28T23"),
    ],
)
def test_window_of_names_the_utc_window(moment, kind, expected):
    assert window_of(moment, kind) == expected


@pytest.mark.parametrize("kind", ["hour", "day"])
def test_window_start_inverts_window_of(kind):
    moment = datetime(2026, 11, 21, 13, 45, tzinfo=UTC)
    start = window_start(window_of(moment, kind), kind)
    assert start.tzinfo is not None
    assert start <= moment < start + (timedelta(hours=1) if kind == "hour" else timedelta(days=1))


def test_current_window_brackets_now():
    before = datetime.now(UTC)
    hour, day = current_window("hour"), current_window("day")
    after = datetime.now(UTC)
    assert hour in {window_of(before, "hour"), window_of(after, "hour")}
    assert day in {window_of(before, "day"), window_of(after, "day")}
    assert current_window("day", datetime(2026, 5, 6, 7, tzinfo=UTC)) == "2026-05-06"


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("2026-11-21T13", "day"),  # an hour where a day is expected
        ("2026-11-21", "hour"),
        ("2026-11-21 13", "hour"),
        ("2026-11-21T13:00", "hour"),
        ("2026-1-21", "day"),
        ("2026-02-30", "day"),  # no such day
        ("2026-11-21T24", "hour"),  # no such hour
        ("0000-01-01", "day"),
        ("2026-11-2\u0661", "day"),  # ARABIC-INDIC DIGIT ONE: strptime takes it, a window name must not
        ("202\uff16-11-21", "day"),  # FULLWIDTH DIGIT SIX
        (" 2026-11-21", "day"),
        ("2026-11-21\n", "day"),
        ("", "day"),
        (20261121, "day"),
        (None, "hour"),
    ],
)
def test_window_start_rejects_what_is_not_a_canonical_window(name, kind):
    with pytest.raises(ValueError, match="window"):
        window_start(name, kind)


@pytest.mark.parametrize("call", [lambda: current_window("week"), lambda: window_of(datetime.now(UTC), "week"),
                                  lambda: window_start("2026-11-21", "week")])
def test_unknown_window_kind_is_a_value_error(call):
    with pytest.raises(ValueError, match="week"):
        call()
