"""Records made before the client knows its schema: held in memory, randomised when it arrives.

DESIGN.md's three-line example runs in a fresh interpreter with an empty data folder against a
real ``ldp-telemetry serve`` on 127.0.0.1: with the server up, with it down at first and up
3 s later, and with a schema that never comes.
"""

from __future__ import annotations

import logging
import sqlite3
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timedelta, timezone

import requests

from client_support import BOOL_AND_OS, Clock, FlaskTransport
from conftest import ADMIN, APP_USAGE, publish, sql
from ldp_telemetry.client import TelemetryClient
from ldp_telemetry.shared import current_window

ENDPOINT = "http://aggregator.test"
RECORD = {"dark_mode": True, "os": "linux"}
FAST = {"backoff_base": 0.01, "backoff_cap": 0.1}


def three_lines(url: str, data_dir, extra: str = "", options: str = "") -> str:
    """DESIGN.md's example as a script (plus ``extra`` inside the with block), logging at DEBUG to stderr."""
    return textwrap.dedent(f"""
        import logging, sys
        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
        from ldp_telemetry.client import TelemetryClient

        with TelemetryClient({url!r}, schema="app-usage", max_epsilon=4.0, data_dir={str(data_dir)!r}{options}) as t:
            print(t.record({{"dark_mode": True, "os": "truthmarker-linux" if {bool(options)!r} else "linux"}}))
        """ + textwrap.indent(textwrap.dedent(extra), " " * 4))


def stored(db_path) -> list[tuple[str, int]]:
    """(window, version) of every report the aggregator stored (and counted: :func:`conftest.sql` settles)."""
    return sql(str(db_path), 'SELECT "window", version FROM reports')


def days_around(started: datetime) -> set[str]:
    """The day window of ``started`` and of now: the record's window is one of them."""
    return {current_window("day", started), current_window("day")}


def test_the_three_line_example_delivers_exactly_one_report_on_a_first_start(live_server, tmp_path):
    requests.post(live_server.url + "/api/v1/schemas", json=APP_USAGE, headers=ADMIN, timeout=10).raise_for_status()
    started = datetime.now(timezone.utc)
    done = subprocess.run([sys.executable, "-c", three_lines(live_server.url, tmp_path / "fresh")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "pending=True" in done.stdout  # the schema was not known when record() ran
    ((window, version),) = stored(live_server.db_path)
    assert window in days_around(started) and version == 1


def test_with_the_server_down_at_first_flush_waits_for_the_schema_and_delivers(live_server, tmp_path):
    requests.post(live_server.url + "/api/v1/schemas", json=APP_USAGE, headers=ADMIN, timeout=10).raise_for_status()
    live_server.stop()
    started = datetime.now(timezone.utc)
    script = three_lines(live_server.url, tmp_path / "fresh", extra="print('flushed', t.flush(120))\n")
    app = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(3)
        live_server.start()
        out, err = app.communicate(timeout=180)
    finally:
        app.kill()
    assert app.returncode == 0 and "flushed True" in out, err
    ((window, _),) = stored(live_server.db_path)
    assert window in days_around(started)


def test_when_the_schema_never_comes_the_pending_record_is_dropped_and_nothing_is_written(live_server, tmp_path):
    data_dir = tmp_path / "fresh"
    script = three_lines(live_server.url, data_dir, options=", pending_timeout=1",
                         extra="print('flushed', t.flush(60))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "flushed True" in done.stdout, done.stderr  # settled: the record was dropped
    assert "dropped 1 pending record(s): no schema within pending_timeout" in done.stderr
    assert stored(live_server.db_path) == []
    (outbox,) = data_dir.glob("outbox-*.sqlite3")
    assert sqlite3.connect(outbox).execute("SELECT COUNT(*) FROM outbox").fetchone() == (0,)
    for path in data_dir.iterdir():
        assert b"truthmarker" not in path.read_bytes(), path
    assert "truthmarker" not in done.stderr  # the DEBUG log


def test_a_pending_record_counts_in_the_window_it_was_made_in(app, client):
    # Made at 23:59 on one day (a past day: the server refuses future windows), randomised when the
    # schema arrives two minutes later: the report belongs to the day it was made in.
    transport = FlaskTransport(client)
    clock = Clock((datetime.now(timezone.utc) - timedelta(days=2)).replace(hour=23, minute=59))
    day = current_window("day", clock.now)
    with TelemetryClient(ENDPOINT, "app-usage", max_epsilon=4, data_dir=app.instance_path, transport=transport,
                         clock=clock, **FAST) as telemetry:
        result = telemetry.record(RECORD)
        assert result.pending and not result.queued and result.window is None
        clock.advance(minutes=2)
        publish(client, APP_USAGE)
        assert telemetry.wait_for_schema(10)
        assert telemetry.flush(10)
        assert list(telemetry.privacy_spent()["app-usage"]) == [day]
    assert stored(app.config["LDP_DB"]) == [(day, 1)]


def test_pending_records_are_bounded_and_a_bad_one_is_dropped_naming_the_attribute(app, client, caplog):
    caplog.set_level(logging.INFO, logger="ldp_telemetry.client")
    transport = FlaskTransport(client)
    with TelemetryClient(ENDPOINT, "app-usage", max_epsilon=4, data_dir=app.instance_path, transport=transport,
                         max_pending=3, **FAST) as telemetry:
        results = [telemetry.record(r) for r in (
            {"dark_mode": True, "os": "secret-beos"},  # not a category: dropped when the schema comes
            {"dark_mode": True, "browser": "secret-firefox", "os": "linux"},  # not an attribute
            RECORD,
            RECORD,  # the fourth: over max_pending
        )]
        assert [r.pending for r in results] == [True, True, True, False]
        assert "max_pending" in results[3].reason
        publish(client, APP_USAGE)
        assert telemetry.flush(10)
        assert telemetry.record(RECORD).reason.startswith("already reported")  # the pending one spent today
    assert len(stored(app.config["LDP_DB"])) == 1
    warnings = [r.getMessage() for r in caplog.records if "pending record" in r.getMessage()]
    assert any("os must be one of" in w for w in warnings) and any("browser" in w for w in warnings)
    assert not any("secret" in r.getMessage() for r in caplog.records)


def test_a_record_is_still_checked_at_once_when_the_schema_is_known(app, client):
    publish(client, BOOL_AND_OS)
    with TelemetryClient(ENDPOINT, "app-usage", max_epsilon=4, data_dir=app.instance_path,
                         transport=FlaskTransport(client)) as telemetry:
        assert telemetry.wait_for_schema(10)
        try:
            telemetry.record({"dark_mode": "yes", "os": "linux"})
        except ValueError as error:
            assert "dark_mode" in str(error)
        else:
            raise AssertionError("a bad record must raise once the schema is known")


def test_close_drops_pending_records_it_could_not_randomise(app, client, caplog):
    transport = FlaskTransport(client)
    transport.down = True
    telemetry = TelemetryClient(ENDPOINT, "app-usage", max_epsilon=4, data_dir=app.instance_path, transport=transport,
                                **FAST)
    assert telemetry.record(RECORD).pending
    started = time.monotonic()
    telemetry.close(0.5)
    # A generous bound (the close waits 0.5 s for the schema, plus a second for the sender's
    # last request to end), to show close() does not wait for pending_timeout (600 s).
    assert time.monotonic() - started < 5
    assert any("closed before the schema was known" in r.getMessage() for r in caplog.records)
    assert telemetry.privacy_spent() == {}
