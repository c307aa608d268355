"""record() without a server: validation, the ledger, the ε guardrail, and never raising.

The endpoint is a closed port on 127.0.0.1, so the real sender really fails to connect.
"""

from __future__ import annotations

import gc
import json
import logging
import sqlite3
import threading
import subprocess
import sys
import weakref
from datetime import datetime, timezone

import pytest

from client_support import BOOL_AND_OS, Clock, closed_endpoint, windows_spent
from ldp_telemetry import shared
from ldp_telemetry.client import TelemetryClient, randomize

DAY = {**BOOL_AND_OS, "window": "day"}


@pytest.fixture
def make_client(tmp_path):
    made = []

    def make(schema=DAY, **options):
        options.setdefault("max_epsilon", 4.0)
        options.setdefault("data_dir", tmp_path / "data")
        client = TelemetryClient(options.pop("endpoint", closed_endpoint()), schema, **options)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close(timeout=0)


@pytest.mark.parametrize("record, names", [
    ({"dark_mode": True, "os": "linux", "browser": "SECRET-firefox"}, "browser"),
    ({"dark_mode": True}, "os"),
    ({"dark_mode": "SECRET-yes", "os": "linux"}, "dark_mode"),
    ({"dark_mode": 1, "os": "linux"}, "dark_mode"),
    ({"dark_mode": True, "os": "SECRET-beos"}, "os"),
    ({"dark_mode": True, "os": 31337}, "os"),
])
def test_an_invalid_record_is_a_value_error_naming_the_attribute_not_the_value(make_client, record, names):
    client = make_client()
    with pytest.raises(ValueError, match=names) as error:
        client.record(record)
    assert "SECRET" not in str(error.value) and "31337" not in str(error.value)
    assert client.privacy_spent() == {}  # nothing spent on a rejected record


def test_record_is_queued_then_suppressed_in_the_same_window_and_allowed_in_the_next(make_client):
    clock = Clock(datetime(2026, 11, 21, 9, 30, tzinfo=timezone.utc))
    client = make_client(clock=clock)
    first = client.record({"dark_mode": True, "os": "linux"})
    assert (first.queued, first.reason, first.window) == (True, "queued", "2026-11-21")
    clock.advance(hours=14)  # still 2026-11-21
    second = client.record({"dark_mode": False, "os": "macos"})
    assert not second and second.window == "2026-11-21" and "already reported" in second.reason
    clock.advance(hours=1)  # 2026-11-22T00:30
    assert client.record({"dark_mode": False, "os": "macos"}).queued
    assert windows_spent(client) == {"app-usage": {"2026-11-21": 2.0, "2026-11-22": 2.0}}


def test_the_ledger_survives_a_restart(make_client):
    clock = Clock()
    first_run = make_client(clock=clock)
    first_run.record({"dark_mode": True, "os": "linux"})
    first_run.close(timeout=0)
    restarted = make_client(clock=clock)
    assert "already reported" in restarted.record({"dark_mode": True, "os": "linux"}).reason
    assert windows_spent(restarted) == {"app-usage": {shared.current_window("day", clock.now): 2.0}}


def test_two_clients_on_one_outbox_never_both_report_in_a_window(make_client):
    # Two instances of an app racing on one data_dir: each has its own in-memory ledger, so
    # both queue; the outbox commits a report only with its ledger row, so one is dropped.
    clock = Clock()
    first, second = make_client(clock=clock), make_client(clock=clock)
    assert first.record({"dark_mode": True, "os": "linux"}).queued
    assert second.record({"dark_mode": True, "os": "linux"}).queued
    first.close(timeout=0)
    second.close(timeout=0)
    assert sqlite3.connect(first.outbox_path).execute("SELECT COUNT(*) FROM outbox").fetchone() == (1,)


def test_a_greedy_schema_given_in_code_is_refused_and_nothing_is_written(tmp_path):
    greedy = {**DAY, "epsilon": 6.0}
    with pytest.raises(ValueError, match="max_epsilon 4"):
        TelemetryClient(closed_endpoint(), greedy, max_epsilon=4.0, data_dir=tmp_path / "data")
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("attribute", [
    {"name": "minutes", "type": "numeric", "range": [0, 120]},
    {"name": "minutes", "type": "numeric", "range": [0, 120], "mechanism": "pm"},
])
def test_a_schema_in_code_whose_numbers_break_the_math_is_a_value_error(tmp_path, attribute):
    # An epsilon of 5e-324 passed the (0, 20] check and then divided by zero deriving the
    # mechanism's constants: the constructor raised ZeroDivisionError. The shared schema model
    # now refuses it, naming the bound.
    tiny = {**DAY, "epsilon": 5e-324, "attributes": [attribute]}
    with pytest.raises(ValueError, match="epsilon is too small"):
        TelemetryClient(closed_endpoint(), tiny, max_epsilon=4.0, data_dir=tmp_path / "data")
    assert not (tmp_path / "data").exists()


def test_a_schema_within_budget_exactly_is_accepted(make_client):
    assert make_client({**DAY, "epsilon": 4.0}).schema.epsilon == 4.0


@pytest.mark.parametrize("options, message", [
    ({"max_epsilon": 0}, "max_epsilon"),
    ({"max_epsilon": float("nan")}, "max_epsilon"),
    ({"max_epsilon": True}, "max_epsilon"),
    ({"max_outbox": 0}, "max_outbox"),
    ({"max_batch": 2.5}, "max_batch"),
    ({"endpoint": "ftp://example.org"}, "endpoint"),
])
def test_bad_settings_are_value_errors(make_client, options, message):
    with pytest.raises(ValueError, match=message):
        make_client(**options)


def test_a_bad_schema_name_is_a_value_error(make_client):
    with pytest.raises(ValueError, match="schema must be a schema name"):
        make_client("App Usage")


def test_record_never_raises_when_the_network_is_down_the_outbox_full_or_the_client_closed(make_client):
    clock = Clock()
    client = make_client(clock=clock, max_outbox=3, backoff_base=0.01, backoff_cap=0.05)
    for _ in range(10):  # more than the outbox holds, with nothing listening
        assert client.record({"dark_mode": True, "os": "linux"}).queued
        clock.advance(days=1)
    assert not client.flush(timeout=0.3)
    client.close(timeout=0)
    closed = client.record({"dark_mode": True, "os": "linux"})
    assert (closed.queued, closed.reason) == (False, "the client is closed")
    client.close()  # closing twice is harmless


def test_the_client_keeps_no_reference_to_the_true_values(make_client):
    class Secret(str):
        """A category name that can be weakly referenced."""

    client = make_client({**DAY, "attributes": [
        {"name": "os", "type": "categorical", "categories": ["linux", "macos", "windows", "other"]}]})
    value = Secret("macos")
    ref = weakref.ref(value)
    record = {"os": value}
    assert client.record(record).queued
    del value, record
    gc.collect()
    assert ref() is None
    client.flush(timeout=0)


def test_a_sampled_schema_records_one_attribute_per_report(make_client, tmp_path):
    client = make_client({**DAY, "split": "sample"})
    assert client.record({"dark_mode": True, "os": "linux"}).queued
    client.close(timeout=0)
    (body,) = sqlite3.connect(client.outbox_path).execute("SELECT body FROM outbox").fetchone()
    report = json.loads(body)
    assert len(report["values"]) == 1
    shared.validate_report(report, client.schema)


def test_randomize_is_the_shared_function():
    assert randomize is shared.randomize
    report = randomize(DAY, {"dark_mode": True, "os": "linux"}, window="2026-11-21")
    assert shared.validate_report(report, shared.parse_schema(DAY)).window == "2026-11-21"


def test_warnings_go_to_the_client_logger(make_client, caplog):
    caplog.set_level(logging.INFO, logger="ldp_telemetry.client")
    client = make_client(backoff_base=0.01, backoff_cap=0.02)
    client.record({"dark_mode": True, "os": "linux"})
    client.flush(timeout=0.2)
    assert any(r.name == "ldp_telemetry.client" and "could not deliver" in r.getMessage() for r in caplog.records)


def test_the_client_imports_nothing_of_the_aggregator_stack():
    # An app embedding the client installs only requests; importing it must not need more.
    probe = ("import sys, ldp_telemetry.client; "
             "print(sorted(m for m in ('numpy', 'flask', 'sqlite_utils', 'apscheduler', 'click', 'platformdirs') "
             "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stderr


def test_threads_racing_in_one_window_queue_exactly_one_report(make_client):
    client = make_client()
    barrier, results = threading.Barrier(8), []

    def app_thread():
        barrier.wait()
        results.extend(client.record({"dark_mode": True, "os": "linux"}) for _ in range(50))

    threads = [threading.Thread(target=app_thread) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 400 and sum(r.queued for r in results) == 1


def test_ledger_entries_older_than_the_kept_span_are_forgotten(make_client):
    old = Clock(datetime(2024, 1, 1, tzinfo=timezone.utc))
    first = make_client(clock=old)
    first.record({"dark_mode": True, "os": "linux"})
    old.advance(days=100)
    first.record({"dark_mode": True, "os": "linux"})
    first.close(timeout=0)
    later = make_client(clock=Clock(datetime(2025, 3, 1, tzinfo=timezone.utc)))  # 425 days after the first
    assert windows_spent(later) == {"app-usage": {"2024-04-10": 2.0}}


def test_a_memoised_schema_uses_the_devices_secret_kept_in_the_data_folder(make_client, tmp_path):
    import os
    import stat

    memoised = {**DAY, "epsilon": 1.0, "epsilon_permanent": 3.0}
    clock = Clock(datetime(2026, 11, 21, tzinfo=timezone.utc))
    first = make_client(memoised, clock=clock)
    assert first.record({"dark_mode": True, "os": "linux"}).queued
    first.close(timeout=0)
    secret_file = tmp_path / "data" / "device-secret"
    secret = secret_file.read_bytes()
    assert len(secret) == 32 and stat.S_IMODE(os.stat(secret_file).st_mode) == 0o600
    clock.advance(days=1)
    again = make_client(memoised, clock=clock)  # a restart: the same device, the same secret
    assert again.record({"dark_mode": True, "os": "linux"}).queued
    again.close(timeout=0)
    assert secret_file.read_bytes() == secret
    rows = sqlite3.connect(again.outbox_path).execute("SELECT body FROM outbox").fetchall()
    assert [shared.validate_report(json.loads(b), shared.parse_schema(memoised)).window for (b,) in rows] == [
        "2026-11-21", "2026-11-22"]


def test_the_privacy_statement_says_what_reports_cost_over_time(make_client):
    clock = Clock(datetime(2026, 11, 21, tzinfo=timezone.utc))
    plain = make_client(clock=clock)
    for _ in range(3):
        assert plain.record({"dark_mode": True, "os": "linux"}).queued
        clock.advance(days=1)
    spent = sum(day["epsilon"] for day in plain.privacy_spent()["app-usage"].values())
    assert f"reported in 3 window(s): epsilon {spent:g} in all" in plain.privacy_statement()
    plain.close(timeout=0)
    memoised = make_client({**DAY, "epsilon": 1.0, "epsilon_permanent": 3.0}, clock=clock)
    assert memoised.record({"dark_mode": True, "os": "linux"}).queued
    statement = memoised.privacy_statement()
    assert "spends epsilon 1" in statement and "at most epsilon 3 about any one value" in statement
    memoised.close(timeout=0)
