"""What an app developer reads in the log (issue 22, points 4 and 5): the URL and the server's own
sentence when a schema cannot be fetched, the cause beside a drop, and a clipped number said once.
Real server (``live_server``, over HTTP) or a port where nothing listens; the real client."""

from __future__ import annotations

import logging

from client_support import closed_endpoint

from ldp_telemetry.client import TelemetryClient


def warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_wrong_schema_name_logs_the_url_and_the_servers_sentence(tmp_path, live_server, caplog):
    caplog.set_level(logging.INFO, logger="ldp_telemetry.client")
    with TelemetryClient(live_server.url, "myap", max_epsilon=4.0, data_dir=tmp_path, close_timeout=1) as t:
        assert t.record({"dark_mode": True}).pending
        t.flush(1)
    said = warnings(caplog)
    url = f"{live_server.url}/api/v1/schemas/myap"
    fetch = [m for m in said if "HTTP 404" in m]
    assert fetch and url in fetch[0] and "myap" in fetch[0].split("404", 1)[1]  # the server's reason, quoted
    # the drop says why, at WARNING, the level an app shows by default
    assert any(m.startswith("dropped 1 pending record(s)") and url in m and "HTTP 404" in m for m in said)


def test_a_dead_endpoint_names_itself_and_the_error_when_records_are_dropped(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="ldp_telemetry.client")
    endpoint = closed_endpoint()
    with TelemetryClient(endpoint, "app-usage", max_epsilon=4.0, data_dir=tmp_path, close_timeout=0.5) as t:
        assert t.record({"dark_mode": True}).pending
    drop = [m for m in warnings(caplog) if m.startswith("dropped 1 pending record(s)")]
    assert drop and f"{endpoint}/api/v1/schemas/app-usage" in drop[0] and "ConnectionError" in drop[0]


def test_a_number_outside_its_range_is_clipped_and_said_once_without_the_value(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="ldp_telemetry.client")
    schema = {"name": "startup", "version": 1, "epsilon": 2.0, "window": "hour",
              "attributes": [{"name": "startup_s", "type": "numeric", "range": [0, 10]},
                             {"name": "load_ms", "type": "histogram", "edges": [0, 50, 100]}]}
    with TelemetryClient(closed_endpoint(), schema, max_epsilon=4.0, data_dir=tmp_path, close_timeout=0) as t:
        assert t.record({"startup_s": 42.5, "load_ms": 70}).queued  # queued, counted at the range's end
        t.record({"startup_s": 43.5, "load_ms": 70})  # the ledger refuses a second one; nothing more is said
    with TelemetryClient(closed_endpoint(), schema, max_epsilon=4.0, data_dir=tmp_path / "b", close_timeout=0) as t:
        assert t.record({"startup_s": 5, "load_ms": 70}).queued  # inside: nothing said
    clipped = [m for m in warnings(caplog) if "clipped" in m]
    assert len(clipped) == 1
    assert "'startup_s'" in clipped[0] and "[0, 10]" in clipped[0] and "42" not in clipped[0]
    with TelemetryClient(closed_endpoint(), schema, max_epsilon=4.0, data_dir=tmp_path / "c", close_timeout=0) as t:
        assert t.record({"startup_s": 5, "load_ms": 250}).queued  # a histogram's last edge bounds it
    clipped = [m for m in warnings(caplog) if "clipped" in m]
    assert len(clipped) == 2 and "'load_ms'" in clipped[1] and "[0, 100]" in clipped[1]
