"""The durable outbox: survives restarts, stays bounded, never holds a true value."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import stat
import sys
from pathlib import Path

import pytest

from client_support import BOOL_AND_OS, Clock, closed_endpoint
from ldp_telemetry import shared
from ldp_telemetry.client import TelemetryClient, default_data_dir
from ldp_telemetry.client.outbox import Outbox, OutboxError

RECORD = {"dark_mode": True, "os": "linux"}


def outbox_rows(path: Path) -> list[dict]:
    connection = sqlite3.connect(path)
    try:
        return [json.loads(body) for (body,) in connection.execute("SELECT body FROM outbox ORDER BY seq")]
    finally:
        connection.close()


def record_hours(client: TelemetryClient, clock: Clock, hours: int) -> list[str]:
    """One record per hour for ``hours`` hours from the clock's time; the windows used."""
    windows = []
    for _ in range(hours):
        windows.append(client.record(RECORD).window)
        clock.advance(hours=1)
    return windows


def test_reports_survive_a_restart_and_only_randomised_reports_are_stored(tmp_path):
    endpoint, clock = closed_endpoint(), Clock()
    first = TelemetryClient(endpoint, BOOL_AND_OS, max_epsilon=4, max_epsilon_per_day=96, data_dir=tmp_path, clock=clock)
    windows = record_hours(first, clock, 4)
    first.close(timeout=0)
    second = TelemetryClient(endpoint, BOOL_AND_OS, max_epsilon=4, max_epsilon_per_day=96, data_dir=tmp_path, clock=clock)
    windows += record_hours(second, clock, 2)
    second.close(timeout=0)
    rows = outbox_rows(second.outbox_path)
    assert [r["window"] for r in rows] == windows
    schema = shared.parse_schema(BOOL_AND_OS)
    assert all(shared.validate_report(r, schema) for r in rows)  # exactly the wire format
    assert len({r["id"] for r in rows}) == 6


def test_the_outbox_is_bounded_dropping_the_oldest_with_a_warning(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="ldp_telemetry.client")
    endpoint, clock = closed_endpoint(), Clock()
    first = TelemetryClient(endpoint, BOOL_AND_OS, max_epsilon=4, max_epsilon_per_day=96, data_dir=tmp_path, clock=clock, max_outbox=3)
    windows = record_hours(first, clock, 3)
    first.close(timeout=0)
    second = TelemetryClient(endpoint, BOOL_AND_OS, max_epsilon=4, max_epsilon_per_day=96, data_dir=tmp_path, clock=clock, max_outbox=3)
    windows += record_hours(second, clock, 2)
    second.close(timeout=0)
    assert [r["window"] for r in outbox_rows(second.outbox_path)] == windows[-3:]
    assert any("outbox is full" in r.getMessage() for r in caplog.records)


def test_the_data_folder_and_the_outbox_files_are_made_owner_only(tmp_path):
    # Issue 27: the outbox was created 0644, readable by anyone on the machine.
    folder = tmp_path / "fresh" / "ldp-telemetry"
    umask = os.umask(0o022)  # the usual umask, which let SQLite make the file 0644
    try:
        client = TelemetryClient(closed_endpoint(), BOOL_AND_OS, max_epsilon=4, data_dir=folder)
        client.record(RECORD)
        files = sorted(folder.iterdir())
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in files}  # -wal and -shm while it is open
        client.close(timeout=0)
    finally:
        os.umask(umask)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert client.outbox_path.name in modes and "device-secret" in modes
    assert modes == {name: 0o600 for name in modes}


def test_an_outbox_is_per_endpoint_but_the_ledger_is_per_device(tmp_path):
    clock = Clock()
    first = TelemetryClient(closed_endpoint(), BOOL_AND_OS, max_epsilon=4, max_epsilon_per_day=96, data_dir=tmp_path, clock=clock)
    assert first.record(RECORD).queued
    first.close(timeout=0)
    # Pointing the app at another server does not reset the budget spent in this window,
    # and the other server's client does not send the first one's reports.
    other = TelemetryClient(closed_endpoint(), BOOL_AND_OS, max_epsilon=4, max_epsilon_per_day=96, data_dir=tmp_path, clock=clock)
    assert "already reported" in other.record(RECORD).reason
    assert other.flush(timeout=0)  # nothing of its own to send
    other.close(timeout=0)
    assert len(outbox_rows(first.outbox_path)) == 1


def test_no_true_value_reaches_the_outbox_files_or_the_logs(tmp_path, caplog):
    # OUE puts a bit vector on the wire, never a category name, and a schema given in code is
    # not cached: so the marker can reach the disk or the logs only if a true value leaks.
    marker = "truthmarker7f3a"
    schema = {"name": "secrets", "version": 1, "epsilon": 1.0, "window": "hour", "attributes": [
        {"name": "site", "type": "categorical", "mechanism": "oue",
         "categories": [f"{marker}-{i}" for i in range(6)]}]}
    caplog.set_level(logging.DEBUG)
    clock = Clock()
    client = TelemetryClient(closed_endpoint(), schema, max_epsilon=1, max_epsilon_per_day=24, data_dir=tmp_path, clock=clock,
                             backoff_base=0.01, backoff_cap=0.02)
    for i in range(20):
        assert client.record({"site": f"{marker}-{i % 6}"}).queued
        clock.advance(hours=1)
    secret = "hunter2"  # invalid true values: the error names the attribute, never the value
    for bad in ({"site": secret}, {"site": [secret]}):
        with pytest.raises(ValueError, match="site") as error:
            client.record(bad)
        assert secret not in str(error.value)
    client.flush(timeout=0.2)  # let the sender fail and log
    client.close(timeout=0)
    assert len(outbox_rows(client.outbox_path)) == 20
    for path in tmp_path.iterdir():  # the database, its WAL and shared-memory files
        assert marker.encode() not in path.read_bytes() and secret.encode() not in path.read_bytes(), path
    logged = [r.getMessage() for r in caplog.records]
    assert logged and not any(marker in m or secret in m for m in logged)


@pytest.mark.parametrize("platform, environ, expected", [
    ("linux", {"XDG_DATA_HOME": "/xdg"}, "/xdg/ldp-telemetry"),
    ("linux", {"XDG_DATA_HOME": "relative/path"}, "/home/u/.local/share/ldp-telemetry"),  # invalid: ignored
    ("linux", {}, "/home/u/.local/share/ldp-telemetry"),
    ("darwin", {"XDG_DATA_HOME": "/xdg"}, "/home/u/Library/Application Support/ldp-telemetry"),
    ("win32", {"LOCALAPPDATA": "/appdata/local"}, "/appdata/local/ldp-telemetry"),
    ("win32", {}, "/home/u/AppData/Local/ldp-telemetry"),
])
def test_the_default_data_dir_is_the_platforms_per_user_data_folder(monkeypatch, platform, environ, expected):
    if sys.platform == "win32":
        pytest.skip("POSIX home folders in the expectations")
    monkeypatch.setattr(sys, "platform", platform)
    monkeypatch.setenv("HOME", "/home/u")
    for name in ("XDG_DATA_HOME", "LOCALAPPDATA"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert default_data_dir() == Path(expected)


@pytest.mark.parametrize("spoil", ["folder_is_a_file", "corrupt_file"])
def test_an_unusable_outbox_never_breaks_the_app_and_records_nothing(tmp_path, caplog, spoil):
    if spoil == "folder_is_a_file":
        data_dir = tmp_path / "not-a-folder"
        data_dir.write_text("")
    else:
        data_dir = tmp_path
        (tmp_path / "outbox-app-usage.sqlite3").write_bytes(b"this is not a database, " * 100)
    with TelemetryClient(closed_endpoint(), BOOL_AND_OS, max_epsilon=4, data_dir=data_dir) as client:
        result = client.record(RECORD)
        assert not result.queued and "cannot be used" in result.reason
        assert client.privacy_spent() == {}
    assert any(r.levelname == "ERROR" and "cannot be used" in r.getMessage() for r in caplog.records)


def test_no_true_value_of_a_pending_record_reaches_the_files_or_the_debug_log(make_app, tmp_path, caplog):
    # Records made before the schema is known are held in memory only. A fetched schema is cached
    # on disk with its category names, so the markers here are values that never become reports:
    # records that turn out not to fit, that expire, or that are pending when the client closes.
    # (Records that fit are randomised like any other: the test above scans those.)
    from conftest import publish

    from client_support import FlaskTransport

    marker = "truthmarker9c1d"
    schema = {"name": "secrets", "version": 1, "epsilon": 1.0, "window": "day", "attributes": [
        {"name": "site", "type": "categorical", "mechanism": "oue", "categories": [f"c{i}" for i in range(6)]},
        {"name": "flag", "type": "boolean"}]}
    caplog.set_level(logging.DEBUG)
    app = make_app()
    server = app.test_client()
    transport = FlaskTransport(server)
    data_dir = tmp_path / "device"
    fast = {"backoff_base": 0.01, "backoff_cap": 0.05}
    with TelemetryClient("http://aggregator.test", "secrets", max_epsilon=1, data_dir=data_dir, transport=transport,
                         **fast) as client:
        assert client.record({"site": f"{marker}-a", "flag": True}).pending  # not a category
        assert client.record({"site": "c1", "flag": f"{marker}-b"}).pending  # not a boolean
        assert client.record({"site": "c2", "flag": False}).pending  # fits: randomised, sent
        publish(server, schema)
        assert client.flush(10)
    with TelemetryClient("http://aggregator.test", "other", max_epsilon=1, data_dir=data_dir, transport=transport,
                         pending_timeout=0.2, **fast) as client:  # never published: expires
        assert client.record({"site": f"{marker}-c"}).pending
        assert client.flush(10)
    transport.down = True
    with TelemetryClient("http://aggregator.test", "third", max_epsilon=1, data_dir=data_dir, transport=transport,
                         close_timeout=0.2, **fast) as client:  # pending when it closes
        assert client.record({"site": f"{marker}-d"}).pending
    files = [p for p in data_dir.iterdir()]
    assert len(files) >= 4  # the outbox files of three schemas and the device's secret, at least
    for path in files:
        assert marker.encode() not in path.read_bytes(), path
    logged = [r.getMessage() for r in caplog.records]
    assert any("site" in m and "pending" in m for m in logged) and any("flag" in m for m in logged)
    assert not any(marker in m for m in logged)


def test_the_client_keeps_no_reference_to_a_pending_records_values(app, client):
    import gc
    import weakref

    from conftest import publish

    from client_support import FlaskTransport

    class Secret(str):
        """A category name that can be weakly referenced."""

    with TelemetryClient("http://aggregator.test", "app-usage", max_epsilon=4, data_dir=tmp_dir(app),
                         transport=FlaskTransport(client), backoff_base=0.01, backoff_cap=0.05) as telemetry:
        value = Secret("linux")
        ref = weakref.ref(value)
        assert telemetry.record({"dark_mode": True, "os": value}).pending
        del value
        gc.collect()
        assert ref() is not None  # held, in memory, while the schema is unknown
        publish(client)
        assert telemetry.flush(10)
        gc.collect()
        assert ref() is None


def tmp_dir(app) -> str:
    return app.instance_path + "/device"


def test_the_outbox_raises_its_own_error_never_the_databases(tmp_path):
    # Its callers handle OutboxError alone; a sqlite3 error reaching them was a sender stopped.
    spoiled = tmp_path / "spoiled.sqlite3"
    spoiled.write_bytes(b"this is not a database, " * 100)
    with pytest.raises(OutboxError, match="could not open the outbox") as opened:
        Outbox(spoiled, "http://aggregator.test", max_reports=10, max_bytes=10_000)
    assert isinstance(opened.value.__cause__, sqlite3.DatabaseError) and not isinstance(opened.value, sqlite3.Error)
    outbox = Outbox(tmp_path / "fine.sqlite3", "http://aggregator.test", max_reports=10, max_bytes=10_000)
    outbox.close()
    for use in (lambda: outbox.peek(limit=1, max_bytes=1000, max_windows=1), lambda: outbox.remove([1]),
                lambda: outbox.cached_schema("app-usage"), lambda: outbox.ledger_rows("2026-01-01")):
        with pytest.raises(OutboxError):
            use()


def test_an_outbox_failing_under_a_running_client_is_logged_and_the_sender_goes_on(tmp_path, caplog):
    client = TelemetryClient(closed_endpoint(), BOOL_AND_OS, max_epsilon=4, data_dir=tmp_path, backoff_base=0.01,
                             backoff_cap=0.05)
    try:
        client._outbox.close()  # noqa: SLF001 -- the real outbox, made unusable under the sender
        assert client.record(RECORD).queued
        assert not client.flush(0.5)  # the report cannot be stored, so it is not delivered either
        assert any("could not store reports in the outbox" in r.getMessage() for r in caplog.records)
        assert client._sender.is_alive()  # noqa: SLF001
    finally:
        client.close(1)
