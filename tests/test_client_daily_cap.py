"""The daily cap: at most ``max_epsilon_per_day`` ε per schema per UTC day, whatever the windows,
in memory and in the outbox's ledger, across processes sharing a data folder."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta, timezone

import pytest

from client_support import BOOL_AND_OS, Clock, FlaskTransport, closed_endpoint
from conftest import APP_USAGE, publish
from ldp_telemetry.client import TelemetryClient
from ldp_telemetry.client.ledger import refusal

ENDPOINT = "http://aggregator.test"
RECORD = {"dark_mode": True, "os": "linux"}


def ledger_by_day(path) -> dict[str, float]:
    """ε per UTC day in the ledger on disk."""
    connection = sqlite3.connect(path)
    try:
        rows = connection.execute('SELECT substr("window", 1, 10), SUM(epsilon) FROM ledger GROUP BY 1').fetchall()
    finally:
        connection.close()
    return dict(rows)


def test_a_server_moving_a_schema_to_hour_windows_gains_nothing_beyond_the_cap(app, client):
    # The case: day windows at ε 4, then hour windows at ε 3.99. The client used to send
    # 24 reports on the second day (95.76 ε under max_epsilon=4).
    publish(client, {**APP_USAGE, "epsilon": 4.0})
    clock = Clock((datetime.now(timezone.utc) - timedelta(days=3)).replace(hour=1))
    with TelemetryClient(ENDPOINT, "app-usage", max_epsilon=4.0, data_dir=app.instance_path,
                         transport=FlaskTransport(client), clock=clock, schema_refresh=0.05) as telemetry:
        assert telemetry.wait_for_schema(10)
        assert telemetry.record(RECORD).queued  # the day window: 4 ε
        publish(client, {**APP_USAGE, "version": 2, "window": "hour", "epsilon": 3.99})
        while telemetry.schema.version != 2:
            telemetry.wait_for_schema(0.05)
        results = []
        for _ in range(48):  # every hour of the rest of that day and of the next
            clock.advance(hours=1)
            results.append(telemetry.record(RECORD))
        assert telemetry.flush(10)
        spent = telemetry.privacy_spent()["app-usage"]
    first_day = clock.now.date() - timedelta(days=2)
    queued_days = [r.window[:10] for r in results if r.queued]
    # None more on the first day (its day report spent 4 ε), one hour on each later day.
    assert queued_days == [str(first_day + timedelta(days=1)), str(first_day + timedelta(days=2))]
    assert all("daily cap" in r.reason or "already reported" in r.reason for r in results if not r.queued)
    assert all(day["epsilon"] <= 4.0 and day["max_epsilon_per_day"] == 4.0 for day in spent.values())
    assert all(total <= 4.0 for total in ledger_by_day(app.instance_path + "/outbox-app-usage.sqlite3").values())


def test_the_cap_can_allow_more_than_one_report_a_day(tmp_path):
    clock = Clock(datetime(2026, 11, 21, 0, 30, tzinfo=timezone.utc))
    with TelemetryClient(closed_endpoint(), BOOL_AND_OS, max_epsilon=2, max_epsilon_per_day=6, data_dir=tmp_path,
                         clock=clock) as telemetry:
        queued = []
        for _ in range(5):
            queued.append(telemetry.record(RECORD).queued)
            clock.advance(hours=1)
        assert queued == [True, True, True, False, False]
        assert telemetry.privacy_spent()["app-usage"]["2026-11-21"]["epsilon"] == 6.0


def test_processes_sharing_a_data_folder_share_the_cap(tmp_path):
    # Another process records hours 0 and 1 of a day (4 ε, the cap); this process, which has not
    # seen them, queues hour 2, and the outbox's ledger refuses it when it stores it.
    day = datetime(2026, 11, 21, tzinfo=timezone.utc)
    script = textwrap.dedent(f"""
        import datetime
        from ldp_telemetry.client import TelemetryClient
        now = [datetime.datetime(2026, 11, 21, 0, 10, tzinfo=datetime.timezone.utc)]
        with TelemetryClient({closed_endpoint()!r}, {BOOL_AND_OS!r}, max_epsilon=4, max_epsilon_per_day=4,
                             data_dir={str(tmp_path)!r}, clock=lambda: now[0], close_timeout=0) as t:
            print(t.record({RECORD!r}).queued)
            now[0] += datetime.timedelta(hours=1)
            print(t.record({RECORD!r}).queued)
        """)
    clock = Clock(day + timedelta(hours=2, minutes=10))
    with TelemetryClient(closed_endpoint(), BOOL_AND_OS, max_epsilon=4, max_epsilon_per_day=4, data_dir=tmp_path,
                         clock=clock, close_timeout=0) as telemetry:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
        assert done.stdout.split() == ["True", "True"], done.stderr
        assert telemetry.record(RECORD).queued  # this process's memory does not know the other's
        path = telemetry.outbox_path
    # close() stored what was queued: the ledger refused it.
    assert ledger_by_day(path) == {"2026-11-21": 4.0}
    clock.advance(hours=1)
    with TelemetryClient(closed_endpoint(), BOOL_AND_OS, max_epsilon=4, data_dir=tmp_path, clock=clock,
                         close_timeout=0) as restarted:
        assert "daily cap" in restarted.record(RECORD).reason
    assert sqlite3.connect(path).execute("SELECT COUNT(*) FROM outbox").fetchone() == (2,)


@pytest.mark.parametrize("day, window, epsilon, refused", [
    ({}, "2026-11-21", 4.0, None),
    ({}, "2026-11-21", 4.5, "daily cap"),
    ({"2026-11-21T03": 1.0}, "2026-11-21T04", 3.0, None),
    ({"2026-11-21T03": 1.0}, "2026-11-21T04", 3.5, "daily cap"),
    ({"2026-11-21T03": 1.0}, "2026-11-21T03", 1.0, "already reported"),
    ({"2026-11-21T03": 1.0}, "2026-11-21", 1.0, "already reported"),  # the day holds that hour
    ({"2026-11-21": 1.0}, "2026-11-21T03", 1.0, "already reported"),  # the hour is in that day
])
def test_the_rule(day, window, epsilon, refused):
    reason = refusal(day, window, epsilon, 4.0)
    assert reason is None if refused is None else refused in reason
