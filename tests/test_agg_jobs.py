"""Jobs: one leader among processes, the scheduled refresh, and retention."""

from __future__ import annotations

import multiprocessing
import sqlite3
import time
from datetime import datetime, timedelta, timezone

from conftest import APP_USAGE, publish

from ldp_telemetry.aggregator import estimation, jobs
from ldp_telemetry.shared import randomize

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)


def _try_lead(path: str, answer) -> None:
    answer.put(jobs.Leadership(path).held())


def test_only_one_process_leads_until_it_lets_go(tmp_path):
    path = str(tmp_path / "x.jobs.lock")
    leader, other = jobs.Leadership(path), jobs.Leadership(path)
    assert leader.held() and leader.held()
    assert not other.held()
    context = multiprocessing.get_context("fork")
    answer = context.Queue()
    child = context.Process(target=_try_lead, args=(path, answer))
    child.start()
    assert answer.get(timeout=30) is False  # another process cannot take the lock
    child.join()
    leader.release()
    assert other.held()
    other.release()


def test_a_second_app_on_the_same_database_skips_the_jobs(make_app, tmp_path):
    db = str(tmp_path / "one.db")
    first, second = make_app(LDP_DB=db), make_app(LDP_DB=db)
    ran = []
    assert jobs.run_if_leader(first, lambda app: ran.append("first"))
    assert not jobs.run_if_leader(second, lambda app: ran.append("second"))
    assert ran == ["first"]
    jobs.stop(first)
    assert jobs.run_if_leader(second, lambda app: ran.append("second"))
    jobs.stop(second)


def test_the_scheduler_refreshes_on_its_own(make_app):
    app = make_app(LDP_SCHEDULER=True, LDP_ESTIMATE_INTERVAL=0.2)
    try:
        client = app.test_client()
        publish(client)
        client.post("/api/v1/reports", json={"reports": [randomize(APP_USAGE, {"dark_mode": True, "os": "linux"})]})
        deadline = time.monotonic() + 30
        while not client.get("/api/v1/estimates?schema=app-usage").get_json()["estimates"]:
            assert time.monotonic() < deadline, "no refresh within 30 s"
            time.sleep(0.1)
    finally:
        jobs.stop(app)
    assert not app.extensions["ldp"]["scheduler"].running


def test_retention_deletes_old_raw_reports_and_keeps_counters(make_app):
    clock = [NOW]
    app = make_app(LDP_CLOCK=lambda: clock[0], LDP_RETENTION_DAYS=3)
    client = app.test_client()
    publish(client)
    old = [randomize(APP_USAGE, {"dark_mode": True, "os": "linux"}, window="2026-11-19") for _ in range(3)]
    new = [randomize(APP_USAGE, {"dark_mode": False, "os": "macos"}, window="2026-11-21") for _ in range(2)]
    client.post("/api/v1/reports", json={"reports": old + new})

    def table(sql):
        with sqlite3.connect(app.config["LDP_DB"]) as conn:
            return sorted(conn.execute(sql).fetchall())

    counters = table("SELECT * FROM counters")
    assert estimation.delete_expired_reports(app) == 0
    clock[0] = datetime(2026, 11, 23, 0, 0, tzinfo=timezone.utc)  # 2026-11-19 ended 3 days ago
    assert estimation.delete_expired_reports(app) == 3
    assert table("SELECT id FROM reports") == sorted((r["id"],) for r in new)
    assert table("SELECT * FROM counters") == counters
    # A retry of a deleted report is past retention at ingest too: it cannot be counted twice.
    assert client.post("/api/v1/reports", json={"reports": old}).status_code == 400
    clock[0] += timedelta(days=2)
    assert estimation.delete_expired_reports(app) == 2
