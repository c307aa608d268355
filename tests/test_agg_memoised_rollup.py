"""The `all` rollup of a memoised schema (DESIGN.md, "Longitudinal privacy"): a device's reports in
several windows repeat one permanent response, so the rollup's interval is no narrower than the
widest a single window can have; the per-window estimates are the usual ones at the effective (p, q)."""

from __future__ import annotations

import os
from datetime import datetime, timezone

import pytest
from conftest import ADMIN

from ldp_telemetry.shared import estimate, parse_schema, randomize
from ldp_telemetry.shared.estimators import no_narrower_than_a_window, wilson_interval
from ldp_telemetry.shared.windows import ROLLUP

pytestmark = pytest.mark.backends
NOW = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)
WINDOWS = ("2026-11-19", "2026-11-20", "2026-11-21")
MEMO = {"name": "memo", "version": 1, "epsilon": 1.0, "epsilon_permanent": 4.0, "window": "day",
        "attributes": [{"name": "flag", "type": "boolean"},
                       {"name": "load_ms", "type": "histogram", "edges": [0, 100, 1000]}]}


def test_the_rollup_interval_is_no_narrower_than_any_window_and_the_windows_are_the_usual(make_app):
    app = make_app(LDP_CLOCK=lambda: NOW)
    client = app.test_client()
    derived = client.post("/api/v1/schemas", json=MEMO, headers=ADMIN).get_json()
    schema = parse_schema(derived)
    # 600 devices, each with its own secret and fixed values, reporting in 1 to 3 windows
    reports = []
    for device in range(600):
        secret = os.urandom(32)
        record = {"flag": device % 3 == 0, "load_ms": device % 700}
        for window in WINDOWS[device % 3:]:
            reports.append(randomize(schema, record, window=window, device_secret=secret))
    for start in range(0, len(reports), 1000):
        assert client.post("/api/v1/reports", json={"reports": reports[start:start + 1000]}).status_code == 202
    assert client.post("/api/v1/estimates/refresh", headers=ADMIN).status_code == 200
    rows = client.get("/api/v1/estimates?schema=memo").get_json()["estimates"]
    flag = schema.attribute("flag")
    by_window = {r["window"]: r for r in rows if r["attribute"] == "flag"}
    for window in WINDOWS:  # each window: the Wilson-mapped estimate at the effective (p, q)
        carried = [r["values"]["flag"] for r in reports if r["window"] == window]
        e = estimate(sum(carried), len(carried), flag.p, flag.q)
        assert (by_window[window]["estimate"], by_window[window]["ci_low"], by_window[window]["ci_high"]) == \
            pytest.approx((e.estimate, e.ci_low, e.ci_high), rel=1e-12)
    rollup = by_window[ROLLUP]
    pooled = estimate(sum(r["values"]["flag"] for r in reports), len(reports), flag.p, flag.q)
    assert rollup["estimate"] == pytest.approx(pooled.estimate, rel=1e-12) and rollup["n"] == len(reports)
    widest = max(by_window[w]["ci_high"] - by_window[w]["ci_low"] for w in WINDOWS)
    assert rollup["ci_high"] - rollup["ci_low"] >= widest - 1e-12
    # and it is exactly the design's bound: the smallest window (200 reports) at a hit rate of 1/2
    low, high = wilson_interval(100, 200)
    half = (high - low) / 2 / (flag.p - flag.q)
    assert rollup["ci_low"] == pytest.approx(max(0.0, min(pooled.ci_low, pooled.estimate - half)), rel=1e-9)
    assert rollup["ci_high"] == pytest.approx(min(1.0, max(pooled.ci_high, pooled.estimate + half)), rel=1e-9)
    # a histogram's buckets get the same treatment
    buckets = [r for r in rows if r["attribute"] == "load_ms" and r["window"] == ROLLUP]
    assert len(buckets) == 2 and all(r["ci_high"] - r["ci_low"] >= 2 * half * 0.999 or r["ci_low"] == 0.0
                                     or r["ci_high"] == 1.0 for r in buckets)


def test_without_a_retained_window_the_rollup_has_no_interval():
    e = estimate(30, 100, 0.7, 0.3)
    assert no_narrower_than_a_window(e, 0.7, 0.3, None) == estimate(30, 100, 0.7, 0.3).__class__(
        e.estimate, e.estimate_clipped, 0.0, 1.0, e.n, e.hits)
