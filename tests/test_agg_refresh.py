"""The refresh's bounded work (DESIGN.md, "Bounded work per schema"): it writes only the rows whose
numbers changed, and one schema version's size or traffic never holds back another's estimates
(driven with a clock of the test's own: no sleeping, no wall time)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from conftest import ADMIN, APP_USAGE, publish, read, store_of

from ldp_telemetry.aggregator.estimation import refresh
from ldp_telemetry.aggregator.questions import backfill
from ldp_telemetry.aggregator.store import EstimatesQuery
from ldp_telemetry.shared import new_report_id, parse_schema
from ldp_telemetry.shared.reports import randomize
from ldp_telemetry.shared.windows import ROLLUP, window_of

pytestmark = pytest.mark.backends

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)
# Issue 27's kind of schema, smaller: hourly, ε = 0.3 (g = 2: a report supports about half of the
# candidates), one string attribute; at 1,000 candidates a read takes 20 windows (VALUES_PER_READ).
BIG = {"name": "a-big", "version": 1, "epsilon": 0.3, "window": "hour",
       "attributes": [{"name": "page", "type": "string", "candidates": [f"/page/{i}" for i in range(1_000)]}]}
HOURS = [window_of(NOW - timedelta(hours=h), "hour") for h in range(24)]
INTERVAL = 60.0


class Ticking:
    """A clock that moves ``step`` seconds at each reading: every look at the time costs a lot."""

    def __init__(self, step: float):
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def big_traffic(client, schema) -> None:
    """One anonymous report in each of the big schema's 24 windows: every one of them dirty again."""
    reports = [randomize(schema, {"page": "/page/7"}, window=w) for w in HOURS]
    assert client.post("/api/v1/reports", json={"reports": reports}).status_code == 202


def small_report(client) -> None:
    report = {"id": new_report_id(), "schema": "app-usage", "version": 1, "window": "2026-11-21", "epsilon": 2.0,
              "values": {"dark_mode": True, "os": "linux"}}
    assert client.post("/api/v1/reports", json={"reports": [report]}).status_code == 202


def rollup_n(app, schema: str) -> int | None:
    rows = read(store_of(app), "estimates", EstimatesQuery(schema, 1, since=ROLLUP, limit=1))  # the rollup alone
    return rows[0].n if rows else None


def test_a_big_schema_kept_stale_by_anonymous_traffic_never_holds_back_another(make_app):
    app = make_app(LDP_CLOCK=lambda: NOW, LDP_ESTIMATE_INTERVAL=INTERVAL)
    client = app.test_client()
    big = parse_schema(publish(client, BIG))
    publish(client, APP_USAGE)
    big_traffic(client, big)
    refresh.refresh(app)  # filled: every window estimated
    for run in range(1, 4):
        big_traffic(client, big)  # re-dirtied: 24 windows and the rollup, 25,000 values
        small_report(client)
        # Each look at the clock takes 20 s of the run's 30: the big schema (first: older, or first by name)
        # gets one read of 20 windows, then the small one has its turn in the same run.
        result = refresh.refresh(app, INTERVAL * refresh.RUN_SHARE, clock=Ticking(20.0))
        assert rollup_n(app, "app-usage") == run  # the small schema's new report, by the next run
        assert result.unfinished == 1 and {s.schema for s in read(store_of(app), "stale_windows", 0.95)} == {"a-big"}
        if run == 2:  # round robin: the second run went on after the first's 20 windows, to the rollup
            assert rollup_n(app, "a-big") == 24 * 3
    # The traffic stops: what is left of the big schema is done within two more runs.
    runs = [refresh.refresh(app, INTERVAL * refresh.RUN_SHARE, clock=Ticking(20.0)) for _ in range(2)]
    assert runs[-1].unfinished == 0 and read(store_of(app), "stale_windows", 0.95) == []
    assert rollup_n(app, "a-big") == 24 * 4
    assert {r.n for r in read(store_of(app), "estimates", EstimatesQuery("a-big", 1, limit=100_000))
            if r.window != ROLLUP} == {4}


STRINGS = {"name": "homes", "version": 1, "epsilon": 4.0, "window": "day", "attributes": [
    {"name": "home", "type": "string", "candidates": ["example.org", "example.com", "example.net"]},
    {"name": "dark_mode", "type": "boolean"}]}


def test_windows_re_marked_without_a_change_write_only_their_new_rows(make_app):
    """A completed back-fill marks every window dirty: the refresh then writes the added
    candidate's rows alone, not the unchanged rows of the listed ones and the boolean."""
    app = make_app(LDP_CLOCK=lambda: NOW)
    client = app.test_client()
    schema = parse_schema(publish(client, STRINGS))
    reports = [randomize(schema, {"home": "example.org", "dark_mode": True}, window=w)
               for w in ("2026-11-20", "2026-11-21") for _ in range(5)]
    assert client.post("/api/v1/reports", json={"reports": reports}).status_code == 202
    assert refresh.refresh(app).written == 3 * (3 + 1)  # two windows and the rollup
    before = {(r.window, r.attribute, r.value): r for r in read(store_of(app), "estimates", EstimatesQuery("homes", 1))}
    added = client.post("/api/v1/schemas/homes/1/candidates", json={"attribute": "home", "candidates": ["new.org"]},
                        headers=ADMIN)
    assert added.status_code == 202
    while read(store_of(app), "filling"):
        backfill.backfill(app)
    assert {s.window for s in read(store_of(app), "stale_windows", 0.95)} == {"2026-11-20", "2026-11-21", ROLLUP}
    result = refresh.refresh(app)
    assert (result.written, result.windows) == (3, 2)  # the new candidate's row in each window and the rollup
    after = {(r.window, r.attribute, r.value): r for r in read(store_of(app), "estimates", EstimatesQuery("homes", 1))}
    assert {k: v for k, v in after.items() if k[2] != "new.org"} == before
    assert {k[0] for k in after if k[2] == "new.org"} == {"2026-11-20", "2026-11-21", ROLLUP}
