"""The real client posting to the real aggregator: through ``app.test_client()`` (FlaskTransport)
and over real HTTP to an ``ldp-telemetry serve`` process on 127.0.0.1."""

from __future__ import annotations

import logging
import math
import time
import sqlite3

import pytest
import requests

from client_support import BOOL_AND_OS, Clock, FlaskTransport, hours_ago
from conftest import ADMIN, APP_USAGE, publish, sql
from ldp_telemetry.client import TelemetryClient
from ldp_telemetry.shared import mechanisms, parse_schema
from ldp_telemetry.shared.reports import MAX_BATCH_WINDOWS

ENDPOINT = "http://aggregator.test"
RECORD = {"dark_mode": True, "os": "linux"}
FAST = {"backoff_base": 0.01, "backoff_cap": 0.1}  # real waits, kept short
HOURLY = {"max_epsilon_per_day": 48.0}  # every hour of a day at ε 2 (the default cap is max_epsilon: 2 hours)


def stored_versions(db_path) -> list[int]:
    return [v for (v,) in sql(str(db_path), "SELECT version FROM reports ORDER BY version")]


def stored_reports(db_path) -> list[tuple[str, str]]:
    """(id, window) of every report the aggregator stored (and counted: :func:`conftest.sql` settles)."""
    return sql(str(db_path), 'SELECT id, "window" FROM reports ORDER BY "window"')


def outbox_count(client: TelemetryClient) -> int:
    connection = sqlite3.connect(client.outbox_path)
    try:
        return connection.execute("SELECT COUNT(*) FROM outbox").fetchone()[0]
    finally:
        connection.close()


def queue_offline(data_dir, transport: FlaskTransport, hours: list[int]) -> list[str]:
    """Record one report for each of ``hours`` (hours ago) while the network is down, then
    stop: the reports wait in the outbox, so the next client posts them as one batch."""
    transport.down, clock = True, Clock()
    with TelemetryClient(ENDPOINT, BOOL_AND_OS, max_epsilon=4, data_dir=data_dir, transport=transport,
                         clock=clock, **FAST, **HOURLY) as telemetry:
        windows = []
        for hour in hours:
            hours_ago(clock, hour)
            windows.append(telemetry.record(RECORD).window)
    transport.down = False
    return windows


def deliver(data_dir, transport: FlaskTransport) -> None:
    with TelemetryClient(ENDPOINT, BOOL_AND_OS, max_epsilon=4, data_dir=data_dir, transport=transport,
                         **FAST) as telemetry:
        assert telemetry.flush(10)


def test_reports_arrive_once_and_the_estimates_move_toward_the_truth(app, client):
    # 3 devices x 400 hourly windows; the true values are fixed shares, so the estimate of each
    # is unbiased with the conditional variance of mechanisms.variance (population fixed).
    publish(client, BOOL_AND_OS)
    schema = parse_schema(BOOL_AND_OS)
    os_cycle = ["linux"] * 10 + ["macos"] * 5 + ["windows"] * 3 + ["other"] * 2
    devices, hours, made = 3, 400, 0
    for device in range(devices):
        clock = Clock()
        with TelemetryClient(ENDPOINT, "app-usage", max_epsilon=4, data_dir=app.instance_path + f"/d{device}",
                             transport=FlaskTransport(client), clock=clock, **HOURLY) as telemetry:
            assert telemetry.wait_for_schema(10)
            for hour in range(hours):
                hours_ago(clock, hour)
                made += telemetry.record({"dark_mode": hour % 4 != 0, "os": os_cycle[hour % 20]}).queued
            assert telemetry.flush(30)
            assert outbox_count(telemetry) == 0  # acknowledged reports are removed
    assert made == devices * hours
    assert len(stored_reports(app.config["LDP_DB"])) == made
    assert client.post("/api/v1/estimates/refresh", headers=ADMIN).status_code == 200
    rollup = {(e["attribute"], e["value"]): e for e in client.get("/api/v1/estimates?schema=app-usage").get_json()["estimates"]
              if e["window"] == "all"}
    truth = {("dark_mode", True): 0.75, ("os", "linux"): 0.5, ("os", "macos"): 0.25, ("os", "windows"): 0.15,
             ("os", "other"): 0.1}
    for (name, value), share in truth.items():
        attribute = schema.attribute(name)
        row = rollup[(name, value)]
        assert row["n"] == made
        sd = math.sqrt(mechanisms.variance(attribute.p, attribute.q, made, share))
        # The device coins are the OS CSPRNG (not seeded): 4.5 standard deviations make a false
        # failure of any of these 5 checks about 5 x 6.8e-6 = 3.4e-5 (normal approximation).
        assert abs(row["estimate"] - share) < 4.5 * sd, (name, value, row["estimate"], share, sd)


def test_a_lost_answer_is_retried_and_counted_once(app, client):
    publish(client, BOOL_AND_OS)

    class LosesFirstAnswer(FlaskTransport):
        """The server stores the batch, then the answer is lost on the way back."""

        def post_json(self, url, body, timeout):
            response = super().post_json(url, body, timeout)
            if self.posts == 1:
                raise ConnectionError("connection reset after the request was sent")
            return response

    transport = LosesFirstAnswer(client)
    queue_offline(app.instance_path, transport, list(range(5)))
    deliver(app.instance_path, transport)
    assert transport.batch_sizes == [5, 5]  # the same batch, sent again
    assert len(stored_reports(app.config["LDP_DB"])) == 5
    assert "ldp_reports_duplicate_total 5.0" in client.get("/metrics").get_data(as_text=True)


def test_only_the_reports_the_server_names_as_invalid_are_dropped(app, client, caplog):
    # A report made 40 days ago is past the server's retention (30 days): the real server
    # rejects the whole batch naming its index; the client drops that one and resends the rest.
    publish(client, BOOL_AND_OS)
    caplog.set_level(logging.WARNING, logger="ldp_telemetry.client")
    transport = FlaskTransport(client)
    windows = queue_offline(app.instance_path, transport, [2, 40 * 24, 1, 0])
    deliver(app.instance_path, transport)
    assert transport.batch_sizes == [4, 3]
    stored = [w for _, w in stored_reports(app.config["LDP_DB"])]
    assert sorted(stored) == sorted(windows[:1] + windows[2:])
    assert any("rejected 1 report(s) with HTTP 400" in r.getMessage() for r in caplog.records)


def test_the_client_learns_a_lower_batch_limit_from_the_server(make_app):
    app = make_app(LDP_MAX_BATCH=3)  # a batch of more is a 400 without per-report details
    client = app.test_client()
    publish(client, BOOL_AND_OS)
    transport = FlaskTransport(client)
    queue_offline(app.instance_path, transport, list(range(10)))
    deliver(app.instance_path, transport)
    assert transport.batch_sizes == [10, 5, 2, 2, 2, 2, 2]
    assert len(stored_reports(app.config["LDP_DB"])) == 10


def test_a_schema_is_fetched_cached_and_used_when_the_server_is_down_at_start(app, client):
    publish(client, APP_USAGE)
    transport = FlaskTransport(client)
    with TelemetryClient(ENDPOINT, "app-usage", max_epsilon=4, data_dir=app.instance_path, transport=transport) as first:
        assert first.wait_for_schema(10)
        assert first.schema.to_dict() == client.get("/api/v1/schemas/app-usage").get_json()
    transport.down = True
    with TelemetryClient(ENDPOINT, "app-usage", max_epsilon=4, data_dir=app.instance_path, transport=transport,
                         **FAST) as second:
        assert second.schema is not None  # from the cache, at once
        assert second.record(RECORD).queued
        assert not second.flush(0.2)
        transport.down = False
        assert second.flush(10)
    assert len(stored_reports(app.config["LDP_DB"])) == 1


def test_without_a_schema_nothing_is_recorded(app, client):
    transport = FlaskTransport(client)
    transport.down = True
    with TelemetryClient(ENDPOINT, "app-usage", max_epsilon=4, data_dir=app.instance_path, transport=transport,
                         **FAST) as telemetry:
        result = telemetry.record(RECORD)
        assert not result.queued and "not known yet" in result.reason
        assert telemetry.privacy_spent() == {}


def test_a_greedy_schema_from_the_server_is_refused(app, client, caplog):
    publish(client, {**APP_USAGE, "epsilon": 8.0})
    caplog.set_level(logging.ERROR, logger="ldp_telemetry.client")
    with TelemetryClient(ENDPOINT, "app-usage", max_epsilon=4, data_dir=app.instance_path,
                         transport=FlaskTransport(client)) as telemetry:
        with pytest.raises(ValueError, match="max_epsilon 4"):
            telemetry.wait_for_schema(10)
        result = telemetry.record(RECORD)
        assert not result.queued and "max_epsilon 4" in result.reason
        assert telemetry.privacy_spent() == {}
        assert telemetry.flush(1)
    assert any("refused" in r.getMessage() for r in caplog.records)
    assert stored_reports(app.config["LDP_DB"]) == []


def test_over_real_http(live_server, tmp_path):
    requests.post(live_server.url + "/api/v1/schemas", json=BOOL_AND_OS, headers=ADMIN, timeout=10).raise_for_status()
    clock = Clock()
    with TelemetryClient(live_server.url, "app-usage", max_epsilon=4, data_dir=tmp_path / "device",
                         clock=clock, **HOURLY) as telemetry:
        assert telemetry.wait_for_schema(10)
        for hour in range(20):
            hours_ago(clock, hour)
            assert telemetry.record(RECORD).queued
        assert telemetry.flush(20)
    assert len(stored_reports(live_server.db_path)) == 20


def test_an_outage_loses_nothing_and_counts_nothing_twice(live_server, tmp_path):
    requests.post(live_server.url + "/api/v1/schemas", json=BOOL_AND_OS, headers=ADMIN, timeout=10).raise_for_status()
    device, clock = tmp_path / "device", Clock()
    with TelemetryClient(live_server.url, "app-usage", max_epsilon=4, data_dir=device, clock=clock) as telemetry:
        assert telemetry.wait_for_schema(10)  # cached from here on
    live_server.stop()
    made = []
    for run in range(2):  # two runs of the app while the server is down
        with TelemetryClient(live_server.url, "app-usage", max_epsilon=4, data_dir=device, clock=clock,
                             **FAST, **HOURLY) as telemetry:
            for hour in range(run * 15, run * 15 + 15):
                hours_ago(clock, hour)
                made.append(telemetry.record(RECORD).window)
            assert not telemetry.flush(0.3)
    assert len(set(made)) == 30
    live_server.start()
    with TelemetryClient(live_server.url, "app-usage", max_epsilon=4, data_dir=device, clock=clock,
                         **FAST) as telemetry:
        assert telemetry.flush(30)
    stored = stored_reports(live_server.db_path)
    assert sorted(w for _, w in stored) == sorted(made)  # every report, each once
    assert len({i for i, _ in stored}) == 30


def test_a_new_version_is_picked_up_and_a_greedy_one_refused_keeping_the_last_good(app, client, caplog):
    publish(client, APP_USAGE)
    transport = FlaskTransport(client)
    with TelemetryClient(ENDPOINT, "app-usage", max_epsilon=4, data_dir=app.instance_path, transport=transport,
                         schema_refresh=0.05) as telemetry:
        assert telemetry.wait_for_schema(10) and telemetry.schema.version == 1
        publish(client, {**APP_USAGE, "version": 2, "epsilon": 3.0})
        assert wait_until(lambda: telemetry.schema.version == 2)
        publish(client, {**APP_USAGE, "version": 3, "epsilon": 8.0})
        assert wait_until(lambda: any("version 3" in r.getMessage() for r in caplog.records))
        assert telemetry.schema.version == 2  # the greedy version is refused; the accepted one stays
        assert telemetry.record(RECORD).queued
        assert telemetry.flush(10)
    assert len(stored_reports(app.config["LDP_DB"])) == 1


def wait_until(condition, timeout: float = 10.0) -> bool:
    """Poll ``condition`` until it holds (True) or ``timeout`` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def test_a_schema_published_after_the_app_started_is_picked_up(app, client):
    with TelemetryClient(ENDPOINT, "app-usage", max_epsilon=4, data_dir=app.instance_path,
                         transport=FlaskTransport(client), **FAST) as telemetry:
        assert not telemetry.wait_for_schema(0.2)  # 404 so far: asked again after a backoff
        result = telemetry.record(RECORD)
        # Held in memory until the schema comes (issue 10), and then the window's one report: a
        # second record() in the window would race it for the ledger, so none is made here.
        assert result.pending and "not known yet" in result.reason
        publish(client, APP_USAGE)
        assert telemetry.wait_for_schema(10)
        assert telemetry.flush(10)
    assert len(stored_reports(app.config["LDP_DB"])) == 1


def test_close_right_after_record_delivers_the_report(live_server, tmp_path):
    # A one-shot app records and closes at once: the report must go out in close(), not wait on
    # disk for the next start. Repeated, because the race was between the sender's turn and close().
    requests.post(live_server.url + "/api/v1/schemas", json=BOOL_AND_OS, headers=ADMIN, timeout=10).raise_for_status()
    for device in range(5):
        telemetry = TelemetryClient(live_server.url, BOOL_AND_OS, max_epsilon=4, data_dir=tmp_path / f"d{device}")
        assert telemetry.record({"dark_mode": True, "os": "linux"}).queued
        telemetry.close()
    assert len(stored_reports(live_server.db_path)) == 5


def test_a_record_that_fits_only_the_previous_version_is_recorded_under_it(app, client, caplog):
    # The server publishes v2 with another attribute while the app still sends v1's records: the
    # app must not get a ValueError for the server's change; v1 stays valid on the server.
    publish(client, APP_USAGE)
    transport = FlaskTransport(client)
    with TelemetryClient(ENDPOINT, "app-usage", max_epsilon=4, data_dir=app.instance_path, transport=transport,
                         schema_refresh=0.05) as telemetry:
        assert telemetry.wait_for_schema(10)
        with_plan = {**APP_USAGE, "version": 2, "attributes": [*APP_USAGE["attributes"], {"name": "plan", "type": "boolean"}]}
        publish(client, with_plan)
        assert wait_until(lambda: telemetry.schema.version == 2)
        assert telemetry.record(RECORD).queued
        assert not telemetry.record(RECORD).queued  # suppressed by the ledger: no second warning
        with pytest.raises(ValueError):  # a record that fits neither version is still the app's mistake
            telemetry.record({"dark_mode": True})
        assert telemetry.flush(10)
    assert len(stored_reports(app.config["LDP_DB"])) == 1
    assert stored_versions(app.config["LDP_DB"]) == [1]
    assert sum("recorded under 1" in r.getMessage() for r in caplog.records) == 1


def test_moving_a_schema_from_day_to_hour_windows_buys_no_second_report_that_day(app, client):
    # Windows overlap (a day holds 24 hours): the ledger counts a report in the day as spent for
    # every hour of it, so a server cannot multiply a device's budget by changing the window kind.
    publish(client, APP_USAGE)
    transport = FlaskTransport(client)
    clock = Clock()
    with TelemetryClient(ENDPOINT, "app-usage", max_epsilon=4, data_dir=app.instance_path, transport=transport,
                         schema_refresh=0.05, clock=clock) as telemetry:
        assert telemetry.wait_for_schema(10)
        assert telemetry.record(RECORD).queued  # the day window
        publish(client, {**APP_USAGE, "version": 2, "window": "hour"})
        assert wait_until(lambda: telemetry.schema.version == 2)
        assert not telemetry.record(RECORD).queued  # an hour of the day already spent
        clock.advance(days=1)
        assert telemetry.record(RECORD).queued  # the next day: a new hour window


def test_hour_and_day_windows_of_one_device_overlap_across_processes(app, client):
    # Two app processes on one data folder, one still on a day schema (v1), one on an hour schema
    # (v2): the outbox ledger, shared by both, lets only one report out for that day.
    publish(client, APP_USAGE)
    hourly = {**APP_USAGE, "version": 2, "window": "hour"}
    publish(client, hourly)
    transport = FlaskTransport(client)
    clock = Clock()
    with TelemetryClient(ENDPOINT, hourly, max_epsilon=4, data_dir=app.instance_path, transport=transport,
                         clock=clock) as by_hour:
        with TelemetryClient(ENDPOINT, APP_USAGE, max_epsilon=4, data_dir=app.instance_path, transport=transport,
                             clock=clock) as by_day:
            assert by_hour.record(RECORD).queued
            assert by_hour.flush(10)
            by_day.record(RECORD)  # this process has not seen the hour report: it queues, the outbox refuses
            assert by_day.flush(10)
    assert len(stored_reports(app.config["LDP_DB"])) == 1


def test_an_hour_already_spent_blocks_its_day(app, client):
    publish(client, APP_USAGE)
    transport = FlaskTransport(client)
    clock = Clock()
    hourly = {**APP_USAGE, "version": 2, "window": "hour"}
    with TelemetryClient(ENDPOINT, hourly, max_epsilon=4, data_dir=app.instance_path + "/a", transport=transport,
                         clock=clock) as telemetry:
        assert telemetry.record(RECORD).queued
    with TelemetryClient(ENDPOINT, APP_USAGE, max_epsilon=4, data_dir=app.instance_path + "/a", transport=transport,
                         clock=clock) as telemetry:
        assert not telemetry.record(RECORD).queued  # an hour of this day was spent: the day is too


def test_batches_name_at_most_the_windows_the_server_takes(app, client):
    # 40 reports in 40 hourly windows wait in the outbox: the server refuses a batch naming more
    # than MAX_BATCH_WINDOWS windows (400), so the client splits them.
    publish(client, BOOL_AND_OS)
    transport = FlaskTransport(client)
    queue_offline(app.instance_path, transport, list(range(40)))
    deliver(app.instance_path, transport)
    assert transport.batch_sizes == [MAX_BATCH_WINDOWS, 40 - MAX_BATCH_WINDOWS]
    assert len(stored_reports(app.config["LDP_DB"])) == 40
