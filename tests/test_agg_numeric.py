"""Numeric and histogram attributes through the aggregator: publish, validate, count, estimate.

The estimates are read through a real ``ldp-telemetry serve`` on 127.0.0.1 and compared with an
independent computation from the very reports that were sent: the formulas of DESIGN.md written
out here (mean, sample variance, the mechanism's variance at the estimate, the normal interval
mapped to the range; Wilson for duchi and the buckets), not the aggregator's code path.
"""

from __future__ import annotations

import math
import statistics
from datetime import datetime, timedelta, timezone

import pytest
import requests
from conftest import ADMIN, read, settle
from statsmodels.stats.proportion import proportion_confint

from ldp_telemetry.shared import parse_schema, randomize
from ldp_telemetry.shared.windows import ROLLUP, current_window

pytestmark = pytest.mark.backends

NUMERIC = {
    "name": "usage-numbers", "version": 1, "epsilon": 4.0, "window": "day",
    "attributes": [
        {"name": "session_minutes", "type": "numeric", "range": [0, 120], "mechanism": "pm"},
        {"name": "crashes", "type": "numeric", "range": [0, 10], "mechanism": "duchi"},
        {"name": "latency", "type": "numeric", "range": [-50, 50], "mechanism": "laplace"},
        {"name": "load_ms", "type": "histogram", "edges": [0, 50, 100, 250, 1000]},
    ],
}
Z95 = 1.959963984540054


def independent(attribute: dict, values: list, epsilon: float) -> dict[str, tuple[float, float, float, int]]:
    """value -> (estimate, ci_low, ci_high, n) from the wire values, by DESIGN.md's formulas."""
    n = len(values)
    lo, hi = attribute.get("range", (0, 1))
    span = hi - lo

    def units(t):
        return lo + (t + 1) * span / 2

    def clip(x):
        return min(hi, max(lo, x))

    e = math.exp(epsilon)
    if attribute["mechanism"] == "duchi":
        c = (e + 1) / (e - 1)
        ones = sum(values)
        low, high = proportion_confint(ones, n, alpha=0.05, method="wilson")
        return {"mean": (units(c * (2 * ones / n - 1)), clip(units(c * (2 * low - 1))), clip(units(c * (2 * high - 1))), n)}
    if attribute["type"] == "numeric":
        mean = statistics.fmean(values)
        sample = statistics.variance(values)
        t = min(1.0, max(-1.0, mean))
        if attribute["mechanism"] == "pm":
            z = math.exp(epsilon / 2)
            theory = t * t / (z - 1) + (z + 3) / (3 * (z - 1) ** 2) + 2.0 ** -42
        else:  # laplace: 2 b², b = 2/ε
            theory = 8 / epsilon ** 2 + 2.0 ** -42
        half = Z95 * math.sqrt(max(sample, theory) / n)
        return {"mean": (units(mean), clip(units(mean - half)), clip(units(mean + half)), n)}
    # a histogram's buckets: GRR hits per bucket name
    d = len(attribute["categories"])
    p, q = e / (e + d - 1), 1 / (e + d - 1)
    out = {}
    for bucket in attribute["categories"]:
        hits = sum(v == bucket for v in values)
        low, high = proportion_confint(hits, n, alpha=0.05, method="wilson")
        out[bucket] = ((hits / n - q) / (p - q), max(0.0, (low - q) / (p - q)), min(1.0, (high - q) / (p - q)), n)
    return out


def test_estimates_through_the_http_api_equal_an_independent_computation(live_server):
    url = live_server.url
    response = requests.post(f"{url}/api/v1/schemas", json=NUMERIC, headers=ADMIN, timeout=10)
    assert response.status_code == 201, response.text
    derived = response.json()
    assert [a["mechanism"] for a in derived["attributes"]][:3] == ["pm", "duchi", "laplace"]
    schema = parse_schema(derived)
    today = current_window("day")
    yesterday = current_window("day", datetime.now(timezone.utc) - timedelta(days=1))
    sent: dict[str, list[dict]] = {today: [], yesterday: []}
    for i in range(2400):
        window = today if i % 3 else yesterday
        record = {"session_minutes": (i * 7) % 130, "crashes": i % 4, "latency": (i % 11) * 5 - 20,
                  "load_ms": (i * 37) % 1200}
        sent[window].append(randomize(schema, record, window=window))
    everything = sent[today] + sent[yesterday]
    for start in range(0, len(everything), 1000):
        response = requests.post(f"{url}/api/v1/reports", json={"reports": everything[start:start + 1000]}, timeout=30)
        assert response.status_code == 202, response.text
    assert requests.post(f"{url}/api/v1/estimates/refresh", headers=ADMIN, timeout=60).status_code == 200
    body = requests.get(f"{url}/api/v1/estimates", params={"schema": "usage-numbers"}, timeout=10).json()
    got = {(e["window"], e["attribute"], e["value"]): e for e in body["estimates"]}
    for window, reports in ((today, sent[today]), (yesterday, sent[yesterday]), (ROLLUP, everything)):
        for attribute in derived["attributes"]:
            values = [r["values"][attribute["name"]] for r in reports]
            for value, (est, low, high, n) in independent(attribute, values, attribute["epsilon"]).items():
                row = got.pop((window, attribute["name"], value))
                assert row["n"] == n and row["epsilon"] == attribute["epsilon"]
                assert row["estimate"] == pytest.approx(est, rel=1e-9, abs=1e-9)
                assert (row["ci_low"], row["ci_high"]) == (pytest.approx(low, rel=1e-9, abs=1e-9),
                                                           pytest.approx(high, rel=1e-9, abs=1e-9))
                if attribute["type"] == "numeric":
                    lo, hi = attribute["range"]
                    assert row["estimate_clipped"] == pytest.approx(min(hi, max(lo, est)), rel=1e-9, abs=1e-9)
    assert got == {}  # nothing else: one row per window, attribute and value ("mean" for a numeric one)


def test_numeric_reports_are_validated_and_counted_sparsely(make_app):
    from ldp_telemetry.aggregator import context

    app = make_app()
    client = app.test_client()
    assert client.post("/api/v1/schemas", json=NUMERIC, headers=ADMIN).status_code == 201
    schema = parse_schema(client.get("/api/v1/schemas/usage-numbers").get_json())
    window = current_window("day")
    good = randomize(schema, {"session_minutes": 30, "crashes": 0, "latency": 0, "load_ms": 75}, window=window)
    bad = [
        ("session_minutes", True), ("session_minutes", 1e9), ("session_minutes", "3"),
        ("crashes", 1.0), ("crashes", 2), ("crashes", False),
        ("latency", 1e300), ("load_ms", 75), ("load_ms", "[0, 50]"),
    ]
    for name, value in bad:
        report = {**good, "id": good["id"][:-4] + "abcd", "values": {**good["values"], name: value}}
        response = client.post("/api/v1/reports", json={"reports": [report]})
        assert response.status_code == 400, (name, value)
        assert response.get_json()["details"][0]["field"] == f"values.{name}"
    assert client.post("/api/v1/reports", json={"reports": [good]}).status_code == 202
    settle(app)
    counters = read(context.store(app), "window_counters", "usage-numbers", 1, [window])[window]
    assert counters.totals == {"session_minutes": 1, "crashes": 1, "latency": 1, "load_ms": 1}
    y = good["values"]["session_minutes"]
    # Σ and Σ² of a number; duchi's bit counted only when it is 1; one hit for the reported bucket
    assert counters.amounts.get("session_minutes", {}) == ({"sum": y, "sumsq": y * y} if y else {})
    assert counters.amounts.get("crashes", {}) == ({"sum": 1} if good["values"]["crashes"] else {})
    assert counters.amounts["load_ms"] == {good["values"]["load_ms"]: 1}
