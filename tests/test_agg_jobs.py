"""Jobs: one leader among processes, the scheduled refresh, and retention."""

from __future__ import annotations

import multiprocessing
import time
from datetime import datetime, timedelta, timezone

import pytest
from conftest import read, settle, APP_USAGE, db_state, publish

from ldp_telemetry.aggregator.estimation import refresh
from ldp_telemetry.aggregator import jobs
from ldp_telemetry.aggregator import retention
from ldp_telemetry.aggregator.store import EstimatesQuery, Expired
from ldp_telemetry.aggregator import open_database
from ldp_telemetry.shared.windows import ROLLUP
from ldp_telemetry.shared import randomize

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)


def clocked_app(make_app):
    """An app with a schema published, 3 days of retention and a clock the test moves: (clock,
    app, store, client)."""
    clock = [NOW]
    app = make_app(LDP_CLOCK=lambda: clock[0], LDP_RETENTION_DAYS=3)
    client = app.test_client()
    publish(client)
    return clock, app, app.extensions["ldp"]["store"], client


def hourly_retention(app, clock: list[datetime], until: datetime) -> Expired:
    """What retention erases while the clock moves to ``until`` an hour at a time, as the
    scheduler runs it (each run moves the kept cutoff at most retention.MAX_ADVANCE)."""
    reports = windows = 0
    while clock[0] < until:
        clock[0] = min(until, clock[0] + timedelta(hours=1))
        expired = retention.expire(app)
        reports, windows = reports + expired.reports, windows + expired.windows
    return Expired(reports, windows)


pytestmark = pytest.mark.backends


def _try_lead(path: str, answer) -> None:
    answer.put(open_database(path).store.lead())


def test_only_one_process_leads_until_it_lets_go(new_db):
    path = new_db()
    open_database(path).store.migrate()
    leader, other = open_database(path).store, open_database(path).store
    assert leader.lead() and leader.lead()
    assert not other.lead()
    context = multiprocessing.get_context("fork")
    answer = context.Queue()
    child = context.Process(target=_try_lead, args=(path, answer))
    child.start()
    assert answer.get(timeout=30) is False  # another process cannot take the lock
    child.join()
    leader.resign()
    assert other.lead()
    other.close()
    leader.close()


def test_a_second_app_on_the_same_database_skips_the_jobs(make_app, new_db):
    db = new_db()
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


def test_retention_erases_old_windows_and_keeps_their_sums_in_the_rollup(make_app):
    clock, app, store, client = clocked_app(make_app)
    old = [randomize(APP_USAGE, {"dark_mode": True, "os": "linux"}, window="2026-11-19") for _ in range(3)]
    new = [randomize(APP_USAGE, {"dark_mode": False, "os": "macos"}, window="2026-11-21") for _ in range(2)]
    client.post("/api/v1/reports", json={"reports": old + new})
    refresh.refresh(app)

    def windows_estimated() -> set[str]:
        return {r.window for r in read(store, "estimates", EstimatesQuery("app-usage", 1))}

    def stored_ids() -> list[tuple[str]]:
        # The database itself: were they erased?
        return sorted(row[:1] for row in db_state(app)["reports"])

    before = read(store, "window_counters", "app-usage", 1, ["2026-11-19", "2026-11-21", ROLLUP])
    assert retention.expire(app) == Expired(reports=0, windows=0)
    # 2026-11-19 ended 3 days before the end of this:
    assert hourly_retention(app, clock, datetime(2026, 11, 23, 0, 0, tzinfo=timezone.utc)) == Expired(3, 1)
    assert stored_ids() == sorted((r["id"],) for r in new)
    after = read(store, "window_counters", "app-usage", 1, ["2026-11-19", "2026-11-21", ROLLUP])
    assert after["2026-11-19"].totals == {} and after["2026-11-19"].amounts == {}
    assert after["2026-11-21"] == before["2026-11-21"] and after[ROLLUP] == before[ROLLUP]
    assert windows_estimated() == {"2026-11-21", ROLLUP}
    assert read(store, "activity", "app-usage", 1).carried == {"dark_mode": 5, "os": 5}  # the rollup still counts them
    # A retry of a deleted report is past retention at ingest too: it cannot be counted twice.
    assert client.post("/api/v1/reports", json={"reports": old}).status_code == 400
    assert hourly_retention(app, clock, clock[0] + timedelta(days=2)) == Expired(reports=2, windows=1)
    assert windows_estimated() == {ROLLUP}


def test_a_clock_that_jumps_ahead_erases_at_most_a_day_per_run_and_nothing_counts_twice_after(make_app):
    # Issue 21: with the clock 40 days ahead, retention (which also runs at every start) erased
    # every window at once, and once the clock was back the same ids were accepted and counted again.
    clock, app, store, client = clocked_app(make_app)
    days = ["2026-11-19", "2026-11-20", "2026-11-21"]
    sent = {day: [randomize(APP_USAGE, {"dark_mode": True, "os": "linux"}, window=day) for _ in range(2)]
            for day in days}
    assert client.post("/api/v1/reports", json={"reports": [r for d in days for r in sent[d]]}).status_code == 202
    settle(app)
    rollup = read(store, "window_counters", "app-usage", 1, [ROLLUP])[ROLLUP]
    clock[0] = NOW + timedelta(days=40)
    # The first run ever may move the cutoff 6 hours past the oldest window's end: 2026-11-19 only.
    assert retention.expire(app) == Expired(reports=2, windows=1)
    clock[0] = NOW  # the clock is right again
    assert retention.expire(app) == Expired(reports=0, windows=0)
    kept = {r.window for r in read(store, "estimates", EstimatesQuery("app-usage", 1))} | set(
        w for w in days if read(store, "window_counters", "app-usage", 1, [w])[w].totals)
    assert {"2026-11-20", "2026-11-21"} <= kept
    # The erased window's reports, retried, are refused (the kept cutoff, not the clock, says so)
    # and the others are duplicates (SQLite finds them when it folds): the rollup counts each once.
    retry = client.post("/api/v1/reports", json={"reports": sent["2026-11-19"]})
    assert retry.status_code == 400 and "older than the retention period" in retry.get_data(as_text=True)
    again = client.post("/api/v1/reports", json={"reports": sent["2026-11-20"] + sent["2026-11-21"]})
    assert again.status_code == 202
    settle(app)
    assert read(store, "window_counters", "app-usage", 1, [ROLLUP])[ROLLUP] == rollup


def test_retention_walks_the_ids_in_chunks_and_erases_only_expired_reports(make_app, monkeypatch):
    # Chunks of 4 against 11 expired reports (random ids, so spread among the 9 kept ones):
    # the walk must resume after each chunk's last id and stop after the short last chunk.
    from ldp_telemetry.aggregator.store import store as store_module
    monkeypatch.setattr(store_module, "DELETE_CHUNK", 4)
    clock = [NOW]
    app = make_app(LDP_CLOCK=lambda: clock[0], LDP_RETENTION_DAYS=3)
    client = app.test_client()
    publish(client)
    old = [randomize(APP_USAGE, {"dark_mode": True, "os": "linux"}, window="2026-11-19") for _ in range(11)]
    new = [randomize(APP_USAGE, {"dark_mode": False, "os": "macos"}, window="2026-11-21") for _ in range(9)]
    assert client.post("/api/v1/reports", json={"reports": old + new}).status_code == 202
    assert hourly_retention(app, clock, datetime(2026, 11, 23, 0, 0, tzinfo=timezone.utc)) == Expired(11, 1)
    assert sorted(row[0] for row in db_state(app)["reports"]) == sorted(r["id"] for r in new)
    assert retention.expire(app) == Expired(reports=0, windows=0)
