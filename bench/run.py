"""`make bench`: measure the system as an operator would size it; print each figure beside its target.

    python -m bench.run [--quick] [--runs 3] [--seconds 5] [--sizes 100000,1000000,10000000]
                        [--synchronous full] [--out bench-results/bench.json]

Ingest runs over real HTTP against ``ldp-telemetry serve`` (granian, 2 workers) and the same app
under gunicorn's sync workers, each beside the same server path with no database
(:mod:`bench.ceiling`), and beside the naive durable app (:mod:`bench.naive`, on gunicorn); the
servers take turns, run by run, and figures are medians of ``--runs`` runs, since the machine is
shared and noisy. Every server listens on 127.0.0.1 and is stopped at the end; every load stops
by itself.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, ContextManager

import requests

from ldp_telemetry.aggregator import create_app
from ldp_telemetry.aggregator.estimation.refresh import refresh
from ldp_telemetry.aggregator import open_database
from ldp_telemetry.aggregator.settings import BY_NAME
from ldp_telemetry.shared import parse_schema

from . import amplification, breakdowns, bulkload, discovery, encoders, hostile, ingest, olh_reference, refresh_million, send, servers, strings

REFRESH_SCHEMA = parse_schema({
    "name": "refresh-bench", "version": 1, "epsilon": 10.0,
    "attributes": [{"name": f"flag{i}", "type": "boolean"} for i in range(8)]
    + [{"name": "os", "type": "categorical", "categories": ["linux", "macos", "windows", "other"]},
       {"name": "page", "type": "categorical", "categories": [f"p{i}" for i in range(32)]}],
})


STEPS = ("record", "send", "encoders", "js-bundle", "js-record", "refresh", "refresh-million", "ingest", "nodes",
         "estimates", "estimates-postgres", "hostile", "olh-reference", "backfill", "backfill-postgres",
         "ingest-strings", "discovery", "discovery-job", "backfill-breakdown", "ingest-breakdowns", "amplification")
JS = Path(__file__).resolve().parent.parent / "js"
JS_RECORD_TARGET_US = 50  # issue 20: record() in Node; DESIGN.md: "well under a millisecond" anywhere
CONNECTIONS = 4  # keep-alive connections of the load generator: two per worker
# Issue 26 ("Speed"): ours (`serve --workers 2`, defaults) against the parse-only ceiling on
# granian, measured in the same run, by reports per request; and, on 100-report requests, ahead
# of the naive durable app (bench/naive.py on gunicorn). Replaces issue 11's 0.7 and 0.6 against
# the faster of two servers' ceilings.
INGEST_RATIO_TARGETS = {100: 0.3, 1: 0.4}
NAIVE_RATIO_TARGET = 1.0  # ours / the naive durable app, 100-report requests: "ahead of" it
DEFAULT_SYNCHRONOUS = BY_NAME["LDP_SYNCHRONOUS"].default  # the targets are of `serve`'s defaults


def _js_built() -> str | None:
    """Builds js/dist with the locked dev tools (installed first if need be); None when built,
    else why not."""
    try:
        if not (JS / "node_modules").exists():
            subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=JS, check=True, capture_output=True)
        subprocess.run(["npm", "run", "build"], cwd=JS, check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as e:
        return f"no Node or npm, or the build failed ({type(e).__name__})"
    return None


def bench_js_bundle() -> dict[str, Any]:
    """The JavaScript client's <script> bundle, minified and gzipped (js/scripts/size.mjs); else
    the reason it was skipped."""
    why = _js_built()
    if why:
        return {"skipped": why}
    done = subprocess.run(["node", "scripts/size.mjs", "--json"], cwd=JS, check=True, capture_output=True, text=True)
    return json.loads(done.stdout)


def bench_js_record(rounds: int = 3, calls: int = 20_000) -> dict[str, Any]:
    """The JavaScript client's ``record()`` in Node (data folder) and headless Chromium (IndexedDB,
    the <script> bundle), with the schema and record of :func:`bench_record` (js/scripts/bench-record.mjs
    says how it is timed); else the reason it was skipped."""
    why = _js_built()
    if why:
        return {"skipped": why}
    given = {"schema": dict(encoders.BENCH_SCHEMA.to_dict(), window="hour"), "record": encoders.RECORD,
             "calls": calls, "rounds": rounds}
    done = subprocess.run(["node", "scripts/bench-record.mjs", json.dumps(given)], cwd=JS, check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def median_of(runs: int, measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run ``measure`` ``runs`` times; the median of every numeric figure, and the runs themselves."""
    return medians([measure() for _ in range(runs)])


def medians(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of every numeric figure of ``results`` (runs of one measure), the failures
    summed, and the runs themselves."""
    merged: dict[str, Any] = {k: statistics.median(r[k] for r in results)
                              for k, v in results[0].items() if isinstance(v, (int, float))}
    merged["failed"] = sum(r.get("failed", 0) for r in results)
    merged["runs"] = results
    return merged


BATCHES = (100, 1)  # reports per request of the ingest loads
Contender = tuple[str, str, str]  # (HTTP server, what runs on it: ceiling, naive or ours, LDP_SYNCHRONOUS)


def _ingest_contenders(folder: Path, modes: list[str]) -> dict[Contender, Callable[[], ContextManager[str]]]:
    """The servers the ingest step measures, each a function starting it (on the same database
    each time): the issue's three first (the parse-only ceiling on granian, the naive durable app
    on gunicorn, ours on granian), then gunicorn's ceiling and ours on gunicorn."""
    out: dict[Contender, Callable[[], ContextManager[str]]] = {
        ("granian", "ceiling", ""): lambda: servers.ceiling(folder, http_server="granian"),
        ("gunicorn", "naive", ""): lambda: servers.naive(folder)}
    for mode in modes:
        out[("granian", "ours", mode)] = lambda m=mode: servers.aggregator(
            folder / f"ingest-granian-{m}.db", synchronous=m, http_server="granian")
    out[("gunicorn", "ceiling", "")] = lambda: servers.ceiling(folder, http_server="gunicorn")
    for mode in modes:
        out[("gunicorn", "ours", mode)] = lambda m=mode: servers.aggregator(
            folder / f"ingest-gunicorn-{m}.db", synchronous=m, http_server="gunicorn")
    return out


def bench_ingest(runs: int, seconds: float, modes: list[str]) -> dict[str, Any]:
    """Ingest over HTTP, 100-report then 1-report requests, on every server of
    :func:`_ingest_contenders`. They take turns: each run starts each server in turn, loads it and
    stops it, so the machine's changing load falls alike on all of them and the ratios of one run
    compare like with like."""
    schema = encoders.BENCH_SCHEMA
    loads: dict[Contender, list[dict[str, Any]]] = {}
    lags: dict[Contender, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="ldp-bench-") as folder:
        contenders = _ingest_contenders(Path(folder), modes)
        for run in range(runs):
            for key, start in contenders.items():
                ours = key[1] == "ours"
                with start() as url:
                    if ours and run == 0:
                        servers.publish(url, schema.to_dict())
                    loads.setdefault(key, []).append({f"batch{batch}": ingest.measure(
                        url, schema, batch=batch, seconds=seconds, connections=CONNECTIONS) for batch in BATCHES})
                    if ours:  # the SQLite store counts a moment after it answers: how far behind the load it was
                        lags.setdefault(key, []).append(_count_lag(Path(folder) / f"ingest-{key[0]}-{key[2]}.db"))
        out: dict[str, Any] = {"load_generator": ingest.load_generator(),
                               **{name: {"ours": {}} for name in servers.HTTP_SERVERS}}
        for key, results in loads.items():
            http_server, what, mode = key
            figures = {f"batch{b}": medians([r[f"batch{b}"] for r in results]) for b in BATCHES}
            if what != "ours":
                out[http_server][what] = figures
                continue
            out[http_server]["ours"][mode] = figures
            figures["count_lag_seconds"] = statistics.median(lags[key])
            acknowledged = sum(r["reports"] for b in BATCHES for r in figures[f"batch{b}"]["runs"])
            stored = stored_reports(str(Path(folder) / f"ingest-{http_server}-{mode}.db"))
            # A load generator stops at its deadline with requests in flight: the server may
            # have stored those without the generator reading the 202. So: nothing
            # acknowledged is missing, and the extra is at most one request per connection per run.
            in_flight = runs * CONNECTIONS * sum(BATCHES)
            figures["no_acknowledged_report_lost"] = acknowledged <= stored <= acknowledged + in_flight
            figures["stored"], figures["acknowledged"] = stored, acknowledged
    return out


def _count_lag(db: Path) -> float:
    """Seconds until the database at ``db`` has counted all that its server acknowledged."""
    database = open_database(str(db))
    try:
        started = time.perf_counter()
        database.writer.settle()
        return time.perf_counter() - started
    finally:
        database.store.close()


def stored_reports(location: str) -> int:
    """How many reports the database at ``location`` holds, once what was acknowledged is counted."""
    database = open_database(location)
    try:
        database.writer.settle()
        return database.store.run_tx("footprint", lambda tx: tx.footprint(), write=False)["reports"]
    finally:
        database.store.close()


def bench_nodes(runs: int, seconds: float, counts: tuple[int, ...] = (1, 2, 3)) -> dict[str, Any]:
    """Ingest of 100-report batches spread evenly over 1, 2 and 3 aggregator nodes sharing one
    PostgreSQL, beside one node on SQLite (LDP_SYNCHRONOUS=full), CONNECTIONS per node. Every
    node, the database and the load generator share this machine's cores, so the figures say what
    the database costs per report and how the nodes contend, not how far separate machines scale."""
    schema = encoders.BENCH_SCHEMA
    out: dict[str, Any] = {"load_generator": ingest.load_generator()}

    def load(urls: list[str]) -> dict[str, Any]:
        servers.publish(urls[0], schema.to_dict())
        return median_of(runs, lambda: ingest.measure_spread(urls, schema, batch=100, seconds=seconds,
                                                               connections=CONNECTIONS))

    with tempfile.TemporaryDirectory(prefix="ldp-bench-") as folder, ExitStack() as stack:
        db = Path(folder) / "nodes-sqlite.db"
        with servers.aggregator(db) as url:
            out["sqlite"] = load([url])
        try:
            base = stack.enter_context(servers.postgres_database())
        except RuntimeError as exc:
            out["postgres_skipped"] = str(exc)
            return out
        for count in counts:
            servers.create_schema(base, f"nodes{count}")
            location = f"{base}?options=-csearch_path%3Dnodes{count}"
            with servers.nodes(location, count, Path(folder)) as urls:
                figures = out[f"postgres_{count}"] = load(urls)
            acknowledged = sum(r["reports"] for r in figures["runs"])
            figures["stored"] = stored_reports(location)
            # As for one node: nothing acknowledged missing, at most one request per connection extra.
            figures["no_acknowledged_report_lost"] = (
                acknowledged <= figures["stored"] <= acknowledged + runs * count * CONNECTIONS * 100)
            figures["acknowledged"] = acknowledged
    return out


def bench_estimates(sizes: list[int], requests_per_size: int = 300, postgres: bool = False) -> dict[str, Any]:
    """GET /api/v1/estimates latency as the database grows (one database, loaded in steps): the
    SQLite file, or with ``postgres`` a database made for the run on PostgreSQL."""
    schema = encoders.BENCH_SCHEMA
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="ldp-bench-") as folder, ExitStack() as stack:
        if postgres:
            try:
                db: Path | str = stack.enter_context(servers.postgres_database())
            except RuntimeError as exc:
                return {"skipped": str(exc)}
        else:
            db = Path(folder) / "estimates.db"
        loaded = 0
        for size in sizes:
            started = time.perf_counter()
            bulkload.add_reports(db, schema, loaded, size - loaded)
            load_seconds = time.perf_counter() - started
            loaded = size
            with servers.aggregator(db, log_path=Path(folder) / "estimates.log") as url:
                auth = {"Authorization": f"Bearer {servers.ADMIN_TOKEN}"}
                requests.post(url + "/api/v1/estimates/refresh", headers=auth, timeout=600).raise_for_status()
                session = requests.Session()
                latencies = []
                for _ in range(requests_per_size):
                    sent = time.perf_counter()
                    response = session.get(url + "/api/v1/estimates", params={"schema": schema.name}, timeout=30)
                    latencies.append((time.perf_counter() - sent) * 1000)
                    response.raise_for_status()
                rows = len(response.json()["estimates"])
            latencies.sort()
            out[str(size)] = {"p50_ms": round(latencies[len(latencies) // 2], 3),
                              "p99_ms": round(latencies[int(len(latencies) * 0.99)], 3),
                              "rows": rows, "load_seconds": round(load_seconds, 1),
                              "db_mib": None if postgres else round(Path(db).stat().st_size / 2**20, 1)}
    return out


def bench_refresh(runs: int, reports_per_window: int = 200, windows: int = 30) -> dict[str, Any]:
    """The refresh job for 1 schema x 10 attributes x 30 windows, every window changed."""
    from ldp_telemetry.shared import randomize

    schema = REFRESH_SCHEMA
    record = {a.name: a.kind.example(a) for a in schema.attributes}
    with tempfile.TemporaryDirectory(prefix="ldp-bench-") as folder:
        app = create_app({"LDP_DB": f"{folder}/refresh.db", "LDP_ADMIN_TOKEN": servers.ADMIN_TOKEN,
                          "LDP_SCHEDULER": False, "LDP_SYNCHRONOUS": "normal"})
        client = app.test_client()
        published = client.post("/api/v1/schemas", json=schema.to_dict(),
                                headers={"Authorization": f"Bearer {servers.ADMIN_TOKEN}"})
        assert published.status_code == 201, published.json
        today = datetime.now(timezone.utc)
        days = [(today - timedelta(days=i)).strftime("%Y-%m-%d") for i in range(windows)]
        durations, written = [], 0
        for _ in range(runs):
            for day in days:  # touch every window so the refresh recomputes all 30 and the rollup
                body = {"reports": [randomize(schema, record, window=day) for _ in range(reports_per_window)]}
                assert client.post("/api/v1/reports", json=body).status_code == 202
            app.extensions["ldp"]["writer"].settle()  # counted first: the refresh alone is measured
            started = time.perf_counter()
            written = refresh(app).written
            durations.append((time.perf_counter() - started) * 1000)
    return {"median_ms": round(statistics.median(durations), 2), "runs_ms": [round(d, 2) for d in durations],
            "estimate_rows": written, "attributes": len(schema.attributes), "windows": windows}


def _ratio_in_turns(ours: dict[str, Any], other: dict[str, Any], unit: str) -> float:
    """The median over the runs of ours / the other server in ``unit``: the servers took turns
    within each run, so a run's ratio compares them under the same load of the machine."""
    return statistics.median(o[unit] / b[unit] for o, b in zip(ours["runs"], other["runs"]))


def _ingest_rows(ing: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """The ingest step's rows: issue 26's comparison (ours on granian beside the parse-only ceiling
    on granian and the naive durable app, in reports per second), then gunicorn's figures."""
    rows: list[tuple[str, str, str, str]] = []

    def row(name: str, value: float, fmt: str, target: str, ok: bool | None) -> None:
        rows.append((name, format(value, fmt), target, "-" if ok is None else ("ok" if ok else "MISSED")))

    unit = "reports_per_second"
    granian, gunicorn = ing["granian"], ing["gunicorn"]
    for batch in BATCHES:
        ceiling, naive = granian["ceiling"][f"batch{batch}"], gunicorn["naive"][f"batch{batch}"]
        row(f"ingest, {batch}-report requests: parse-only ceiling on granian, reports/s", ceiling[unit], ",.0f", "-", None)
        row("  naive durable app on gunicorn (one executemany, no validation), reports/s", naive[unit], ",.0f", "-", None)
        row("    its failed requests (5xx, errors)", naive["failed"], "d", "-", None)
        for mode, figures in granian["ours"].items():
            ours, aimed = figures[f"batch{batch}"], mode == DEFAULT_SYNCHRONOUS
            row(f"  ours on granian (serve), LDP_SYNCHRONOUS={mode}{' (default)' if aimed else ''}, reports/s",
                ours[unit], ",.0f", "-", None)
            ratio, target = _ratio_in_turns(ours, ceiling, unit), INGEST_RATIO_TARGETS[batch]
            row("    ours / the parse-only ceiling (median of the runs' ratios)", ratio, ".2f",
                f">= {target}" if aimed else "-", ratio >= target if aimed else None)
            ahead = aimed and batch == 100
            ratio = _ratio_in_turns(ours, naive, unit)
            row("    ours / the naive durable app (the same)", ratio, ".2f", f"> {NAIVE_RATIO_TARGET:g}" if ahead else "-",
                ratio > NAIVE_RATIO_TARGET if ahead else None)
            row("    p99 latency ms", ours["p99_ms"], ".1f", "< 50", ours["p99_ms"] < 50)
            row("    failed requests (5xx, errors)", ours["failed"], "d", "0", ours["failed"] == 0)
    for batch in BATCHES:
        ceiling = gunicorn["ceiling"][f"batch{batch}"]
        row(f"ingest on gunicorn, {batch}-report requests: parse-only ceiling, reports/s", ceiling[unit], ",.0f", "-", None)
        for mode, figures in gunicorn["ours"].items():
            ours = figures[f"batch{batch}"]
            row(f"  ours, LDP_SYNCHRONOUS={mode}, reports/s", ours[unit], ",.0f", "-", None)
            row("    ours / this server's ceiling", ours[unit] / ceiling[unit], ".2f", "-", None)
            row("    p99 latency ms", ours["p99_ms"], ".1f", "< 50", ours["p99_ms"] < 50)
            row("    failed requests (5xx, errors)", ours["failed"], "d", "0", ours["failed"] == 0)
    for http_server in servers.HTTP_SERVERS:
        for mode, figures in ing[http_server]["ours"].items():
            row(f"ours on {http_server}, {mode}: stored - acknowledged (in flight at cut-off)",
                figures["stored"] - figures["acknowledged"], "d", ">= 0", figures["no_acknowledged_report_lost"])
            row("  seconds until every acknowledged report was counted, after a load (median)",
                figures["count_lag_seconds"], ".2f", "-", None)
    for mode in granian["ours"]:
        for batch in BATCHES:
            row(f"ours on granian / ours on gunicorn, {mode}, {batch}-report requests",
                granian["ours"][mode][f"batch{batch}"][unit] / gunicorn["ours"][mode][f"batch{batch}"][unit], ".2f",
                "-", None)
    return rows


def bench_record(rounds: int = 3, calls: int = 20_000) -> dict[str, Any]:
    """``TelemetryClient.record()``: queued (a new window each call) and suppressed (the same
    window); per figure the median over ``rounds`` fresh clients."""
    import logging

    logging.getLogger("ldp_telemetry.client").setLevel(logging.ERROR)  # the unreachable server is on purpose
    per_round = [_record_round(calls) for _ in range(rounds)]
    return {label: {figure: statistics.median(r[label][figure] for r in per_round) for figure in per_round[0][label]}
            for label in per_round[0]}


def _record_round(calls: int) -> dict[str, dict[str, float]]:
    from ldp_telemetry.client import TelemetryClient

    schema = dict(encoders.BENCH_SCHEMA.to_dict(), window="hour")
    moments = iter(datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(hours=i) for i in range(1, calls + 1))
    current = [datetime(2026, 1, 1, tzinfo=timezone.utc)]
    out: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="ldp-bench-") as folder:
        # Nothing listens on port 9: the sender backs off in the background; record() must not care.
        # A new hour each call: the daily cap must allow every hour of a day.
        with TelemetryClient("http://127.0.0.1:9", schema, max_epsilon=10, max_epsilon_per_day=24 * 10, data_dir=folder,
                             clock=lambda: current[0], max_outbox=10 * calls, close_timeout=0.1) as client:
            for label, advance in (("queued", True), ("suppressed", False)):
                # Wall time is what the app waits, including for the GIL while the sender thread
                # persists the burst; thread CPU time is what record() itself costs the app's thread.
                wall, cpu = [], []
                for _ in range(calls):
                    if advance:
                        current[0] = next(moments)
                    started, started_cpu = time.perf_counter_ns(), time.thread_time_ns()
                    result = client.record(encoders.RECORD)
                    cpu.append((time.thread_time_ns() - started_cpu) / 1000)
                    wall.append((time.perf_counter_ns() - started) / 1000)
                    assert result.queued == advance, result
                wall.sort()
                out[label] = {"median_us": round(wall[len(wall) // 2], 2),
                              "p99_us": round(wall[int(len(wall) * 0.99)], 2),
                              "cpu_median_us": round(statistics.median(cpu), 2)}
    return out


def report(results: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(figure, measured, target, verdict) rows."""
    rows = []

    def row(name: str, value: float, fmt: str, target: str, ok: bool | None) -> None:
        rows.append((name, format(value, fmt), target, "-" if ok is None else ("ok" if ok else "MISSED")))

    ing = results.get("ingest")
    if ing:
        rows += _ingest_rows(ing)
    nod = results.get("nodes")
    if nod:
        row("ingest, 100-report batches, 1 node on SQLite, reports per second", nod["sqlite"]["reports_per_second"],
            ",.0f", "-", None)
        if "postgres_skipped" in nod:
            rows.append(("  on PostgreSQL: skipped, " + nod["postgres_skipped"], "-", "-", "-"))
        for key in sorted(k for k in nod if k.startswith("postgres_") and k != "postgres_skipped"):
            figures, count = nod[key], key.removeprefix("postgres_")
            row(f"  {count} node(s) on one PostgreSQL, reports per second", figures["reports_per_second"], ",.0f",
                "-", None)
            row("    p99 latency ms", figures["p99_ms"], ".1f", "-", None)
            row("    failed requests (5xx, errors)", figures["failed"], "d", "0", figures["failed"] == 0)
            row("    stored - acknowledged (in flight at cut-off)", figures["stored"] - figures["acknowledged"], "d",
                ">= 0", figures["no_acknowledged_report_lost"])
    est = results.get("estimates")
    if est:
        sizes = sorted(est, key=int)
        for size in sizes:
            row(f"GET /api/v1/estimates p50 ms, {int(size):,} reports", est[size]["p50_ms"], ".2f",
                "<= 20" if size == sizes[-1] else "-", est[size]["p50_ms"] <= 20 if size == sizes[-1] else None)
            row(f"  p99 ms, {int(size):,} reports", est[size]["p99_ms"], ".2f", "-", None)
        flat = est[sizes[-1]]["p50_ms"] <= 2 * est[sizes[0]]["p50_ms"] + 1
        row("  p50 largest / smallest", est[sizes[-1]]["p50_ms"] / est[sizes[0]]["p50_ms"], ".2f", "flat (<= 2x)", flat)
    pge = results.get("estimates-postgres")
    if pge and "skipped" in pge:
        rows.append(("GET /api/v1/estimates on PostgreSQL: skipped, " + pge["skipped"], "-", "-", "-"))
    elif pge:
        for size in sorted(pge, key=int):
            row(f"GET /api/v1/estimates on PostgreSQL, p50 ms, {int(size):,} reports", pge[size]["p50_ms"], ".2f",
                "-", None)
            row(f"  p99 ms, {int(size):,} reports", pge[size]["p99_ms"], ".2f", "-", None)
    ref = results.get("refresh")
    if ref:
        row(f"refresh, 1 schema x {ref['attributes']} attributes x {ref['windows']} windows, ms", ref["median_ms"],
            ".1f", "-", None)
    big = results.get("refresh-million")
    if big:
        row(f"refresh writing {big['rows']:,} estimate rows ({big['attributes']} attributes x {big['categories']:,} "
            f"categories x {big['windows']} windows and the rollup), SQLite, s", big["seconds"], ".2f",
            f"<= {big['target_seconds']:g}", big["seconds"] <= big["target_seconds"] and big["rows"] >= 0.99 * big["target_rows"])
        row("  estimate rows written per second", big["rows_per_second"], ",.0f", "-", None)
    hos = results.get("hostile")
    if hos:
        row(f"hostile batch ({hos['reports']} hourly windows, 1 x {hostile.CATEGORIES} categories): status",
            hos["one_request_status"], "d", "400", hos["one_request_status"] == 400)
        # Sparse: one row per report in its window (the category it names), plus at most one per
        # category in the rollup; dense counters wrote reports x categories.
        bound = hos["reports"] + hostile.CATEGORIES
        row("  sent in accepted batches: counter rows", hos["counter_rows"], ",d", f"<= {bound:,}",
            hos["counter_rows"] <= bound)
        row("  database + WAL, MB", hos["bytes"] / 1e6, ".1f", "-", None)
        row("  refresh of all of it, ms", hos["refresh_ms"], ",.0f", "-", None)
        row(f"  1-report ingests beside it ({hos['side_ingests']}), p50 ms", hos["side_ingest_p50_ms"], ".1f", "-", None)
        row("    p99 ms", hos["side_ingest_p99_ms"], ".1f", "< 50", hos["side_ingest_p99_ms"] < 50)
        row("    worst ms", hos["side_ingest_max_ms"], ".1f", "< 2000", hos["side_ingest_max_ms"] < 2000)
        row(f"  anonymous reads during and after it ({hos['anonymous_reads']}: dashboard, estimates JSON and CSV), "
            "worst ms", hos["anonymous_read_max_ms"], ",.1f", "< 2000", hos["anonymous_read_max_ms"] < 2000)
        row("    largest answer, MB", hos["anonymous_read_max_bytes"] / 1e6, ".2f", "<= 5",
            hos["anonymous_read_max_bytes"] <= 5e6)
    rec = results.get("record")
    if rec:
        row("client record() median us (queued)", rec["queued"]["median_us"], ".1f", "<= 20", rec["queued"]["median_us"] <= 20)
        row("  p99 us (queued)", rec["queued"]["p99_us"], ".1f", "-", None)
        row("  median CPU us of the calling thread (queued)", rec["queued"]["cpu_median_us"], ".1f", "-", None)
        row("  median us (suppressed: same window)", rec["suppressed"]["median_us"], ".1f", "-", None)
    jsr = results.get("js-record")
    if jsr and "skipped" in jsr:
        rows.append(("js: record(): skipped, " + jsr["skipped"], "-", "-", "-"))
    elif jsr:
        node, chromium = jsr["node"], jsr["chromium"]
        row("js: record() median us, Node, data folder (queued)", node["queued"]["median_us"], ".1f",
            f"< {JS_RECORD_TARGET_US}", node["queued"]["median_us"] < JS_RECORD_TARGET_US)
        row("  p99 us, Node (queued)", node["queued"]["p99_us"], ".1f", "-", None)
        row("  median us, Node (suppressed: same window)", node["suppressed"]["median_us"], ".1f", "-", None)
        if "skipped" in chromium:
            rows.append(("  in Chromium: skipped, " + chromium["skipped"], "-", "-", "-"))
        else:
            block = chromium["block"]
            row(f"  median us, Chromium, IndexedDB (queued; means of {block} calls)", chromium["queued"]["median_us"],
                ".1f", "< 1000", chromium["queued"]["median_us"] < 1000)
            row(f"  p99 us, Chromium (queued; of the {block}-call means)", chromium["queued"]["p99_us"], ".1f", "-", None)
            row("  median us, Chromium (suppressed: same window)", chromium["suppressed"]["median_us"], ".1f", "-", None)
    snd = results.get("send")
    if snd:
        row("client send, one post_json of 1 report, median ms", snd["batch1"]["median_ms"], ".3f", "-", None)
        row("  p99 ms", snd["batch1"]["p99_ms"], ".3f", "-", None)
        row("  of 100 reports, median ms", snd["batch100"]["median_ms"], ".3f", "-", None)
        row("  p99 ms", snd["batch100"]["p99_ms"], ".3f", "-", None)
    js = results.get("js-bundle")
    if js and "skipped" in js:
        rows.append(("js: browser bundle: skipped, " + js["skipped"], "-", "-", "-"))
    elif js:
        # The ceiling is js/scripts/size.mjs's (DESIGN.md "JavaScript client"), given with the figure.
        row("js: browser bundle (ldp-telemetry.min.js), minified + gzipped, bytes", js["gzipped"], ",d",
            f"<= {js['budget']:,}", js["gzipped"] <= js["budget"])
        row("  minified, bytes", js["minified"], ",d", "-", None)
        row("js: relay module (ldp-telemetry-relay.min.js, optional), minified + gzipped, bytes",
            js["relay"]["gzipped"], ",d", "-", None)
    enc = results.get("encoders")
    if enc:
        row("randomize, one report (rr + grr), us", enc["ours_randomize_report"], ".2f", "-", None)
        row("  pure-LDP encoders for the same report, us", enc["pure_report"], ".2f", "-", None)
        row("  randomize / pure-LDP", enc["randomize_ratio"], ".2f", "<= 3", enc["randomize_ratio"] <= 3)
        row("  our encoders alone / pure-LDP", enc["encoders_ratio"], ".2f", "-", None)
        row("  OUE d=16 encoder us: ours / pure-LDP", enc["ours_oue16"] / enc["pure_oue16"], ".2f", "-", None)
    lhs = results.get("olh-reference")
    if lhs:
        worst = lhs["max_relative_difference"]
        row(f"string estimates vs pure-LDP's LHServer (our hash), {lhs['reports']:,} reports x {lhs['candidates']} "
            "candidates, largest relative difference", worst, ".1e", "<= 1e-9", worst <= 1e-9 and lhs["n_equal"])
    for step in ("backfill", "backfill-postgres"):  # the targets: 10 s on each database
        bf = results.get(step)
        if bf and "skipped" in bf:
            rows.append(("back-fill on PostgreSQL: skipped, " + bf["skipped"], "-", "-", "-"))
        elif bf:
            row(f"back-fill of {bf['candidates']:,} new candidates over {bf['reports']:,} stored reports "
                f"({bf['database']}), s", bf["seconds"], ".2f", f"<= {bf['target_seconds']:g}",
                bf["seconds"] <= bf["target_seconds"])
            row("  (report, candidate) pairs per second", bf["cells_per_second"], ",.0f", "-", None)
    bb = results.get("backfill-breakdown")
    if bb:
        row(f"back-fill of one breakdown added over {bb['reports']:,} stored reports (SQLite), s", bb["seconds"], ".2f",
            f"<= {bb['target_seconds']:g}", bb["seconds"] <= bb["target_seconds"])
    def with_and_without(figures: dict[str, Any], feature: str, what: str) -> None:
        """Ingest of a schema with ``what`` (its runs under ``feature``) beside the same without it."""
        for name in ("plain", feature):
            row(f"ingest over HTTP, 100-report batches, {'with' if name == feature else 'without'} {what}, "
                "reports/s", statistics.median(r["reports_per_second"] for r in figures[name]), ",.0f", "-", None)
        row("  with / without", figures["ratio"], ".2f", f">= {figures['target_ratio']}",
            figures["ratio"] >= figures["target_ratio"])

    ib = results.get("ingest-breakdowns")
    if ib:
        with_and_without(ib, "breakdowns", f"{ib['count']} breakdowns")
    ist = results.get("ingest-strings")
    if ist:
        with_and_without(ist, "strings", f"a string attribute of {ist['candidates']:,} candidates")
    dis = results.get("discovery")
    if dis:
        for point in dis["grid"].values():
            n, epsilon = point["n"], point["epsilon"]
            aimed = (n, epsilon) == (1_000_000, 4.0)
            row(f"discovery, Zipf(1.1) over {discovery.SITES:,} names, n = {n:,}, eps {epsilon:g}: top-{discovery.TOP} "
                f"recall (median of {point['runs']})", point["recall"], ".2f",
                f">= {discovery.RECALL_TARGET}" if aimed else "-", point["recall"] >= discovery.RECALL_TARGET if aimed else None)
            row("  strings found", point["found"], ".0f", "-", None)
            row(f"  smallest share found (the planner's; {point['levels']} levels of {point['per_level']:,} reports), %",
                100 * point["threshold_share"], ".2f", "-", None)
            row(f"  runs with a string of share 0 (of {point['runs']}; stated rate {discovery.ALPHA:.0%})",
                point["false_runs"], "d", "-", None)
            row("  seconds of one run", point["seconds"], ".2f", f"<= {discovery.SECONDS_TARGET:g}" if n == 1_000_000 else "-",
                point["seconds"] <= discovery.SECONDS_TARGET if n == 1_000_000 else None)
        row("  peak RSS of the step (simulation included), MB", dis["peak_rss_mb"], ".0f", "-", None)
    job = results.get("discovery-job")
    if job:
        row(f"discovery job over {job['n']:,} reports stored in SQLite (eps {job['epsilon']:g}), seconds", job["seconds"],
            ".1f", f"<= {discovery.SECONDS_TARGET:g}", job["seconds"] <= discovery.SECONDS_TARGET)
        row("  its peak RSS (its own process: reading, sampling, PEM), MB", job["peak_rss_mb"], ".0f", "-", None)
        row("  candidates added", job["added"], "d", "-", None)
        aimed = (job["n"], job["epsilon"]) == (1_000_000, 4.0)  # the target's point; --quick stores 100,000
        row(f"  top-{discovery.TOP} recall", job["recall"], ".2f", f">= {discovery.RECALL_TARGET}" if aimed else "-",
            job["recall"] >= discovery.RECALL_TARGET if aimed else None)
    amp = results.get("amplification")
    if amp:
        for eps0, point in amp["points"].items():
            row(f"shuffle_epsilon, crowd {amp['crowd']:,}, eps0 {float(eps0):g}, delta {amp['delta']:g}: first call, ms",
                point["first_ms"], ".1f", f"<= {amp['target_ms']:g}", point["first_ms"] <= amp["target_ms"])
            row("  epsilon", point["epsilon"], ".4f", "-", None)
            row("  cached call, us", point["cached_us"], ".2f", "-", None)
        m, eps0, delta = amp["issue_point"]
        row(f"shuffle_epsilon, crowd {m:,}, eps0 {eps0:g}, delta {delta:g} (issue 30: Wang et al.)",
            amp["issue_point_epsilon"], ".4f", f"~ {amp['issue_epsilon']:g}",
            abs(amp["issue_point_epsilon"] - amp["issue_epsilon"]) <= 0.005)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Measure ldp-telemetry; print figures beside targets.")
    parser.add_argument("--quick", action="store_true", help="Small sizes and short runs (a smoke run).")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0, help="Seconds per ingest run.")
    parser.add_argument("--sizes", default="100000,1000000,10000000", help="Stored reports for the estimates test.")
    parser.add_argument("--synchronous", default="full,normal", help="LDP_SYNCHRONOUS modes to measure ingest at.")
    parser.add_argument("--only", default=",".join(STEPS), help=f"Comma-separated steps of {', '.join(STEPS)}.")
    parser.add_argument("--out", default="bench-results/bench.json")
    parser.add_argument("--step", choices=STEPS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.seconds, args.sizes = 1, 2.0, "10000,100000"
    only = set(args.only.split(","))
    if only - set(STEPS):
        parser.error(f"unknown step(s) {', '.join(sorted(only - set(STEPS)))}; the steps are {', '.join(STEPS)}")
    results: dict[str, Any] = {"machine": {"python": platform.python_version(), "cpus": _cpus(),
                                           "when": datetime.now(timezone.utc).isoformat(timespec="seconds")}}
    steps: dict[str, Callable[[], Any]] = {
        "encoders": encoders.run,
        "js-bundle": bench_js_bundle,
        "js-record": bench_js_record,
        "record": bench_record,
        "send": send.run,
        "refresh": lambda: bench_refresh(max(3, args.runs)),
        "refresh-million": refresh_million.run,
        "ingest": lambda: bench_ingest(args.runs, args.seconds, args.synchronous.split(",")),
        "nodes": lambda: bench_nodes(args.runs, args.seconds),
        "estimates": lambda: bench_estimates([int(s) for s in args.sizes.split(",")]),
        "estimates-postgres": lambda: bench_estimates([int(s) for s in args.sizes.split(",")], postgres=True),
        "hostile": hostile.run,
        "olh-reference": olh_reference.run,
        "backfill": lambda: strings.backfill(100_000 if args.quick else 1_000_000),
        "backfill-postgres": lambda: strings.backfill(100_000 if args.quick else 1_000_000, postgres=True),
        "ingest-strings": lambda: strings.ingest(args.seconds, args.runs),
        "discovery": lambda: discovery.run(1 if args.quick else args.runs),
        "discovery-job": lambda: discovery.job(100_000 if args.quick else 1_000_000),
        "backfill-breakdown": lambda: breakdowns.backfill(100_000 if args.quick else 1_000_000),
        "ingest-breakdowns": lambda: breakdowns.ingest(args.seconds, args.runs),
        "amplification": amplification.run,
    }
    if args.step:  # one step, in this process: print its figures as JSON for the parent
        print(json.dumps(steps[args.step](), default=str))
        return 0
    for name in steps:
        if name in only:
            print(f"... {name}", flush=True)
            results[name] = _in_own_process(name, argv or sys.argv[1:])
    rows = report(results)
    width = max(len(r[0]) for r in rows)
    print(f"\n{'figure':<{width}}  {'measured':>12}  {'target':>12}  verdict")
    for name, value, target, verdict in rows:
        print(f"{name:<{width}}  {value:>12}  {target:>12}  {verdict}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str))
    print(f"\nwritten to {out}")
    return 0


def _in_own_process(step: str, argv: list[str]) -> Any:
    """Run one step in a fresh interpreter, so no step measures another's leftovers (imports,
    threads, garbage): pure-LDP's step alone imports scikit-learn and numpy."""
    done = subprocess.run([sys.executable, "-m", "bench.run", *argv, "--step", step], capture_output=True,
                          text=True, cwd=Path(__file__).resolve().parent.parent)
    if done.returncode != 0:
        raise RuntimeError(f"bench step {step} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _cpus() -> int:
    import os

    return os.cpu_count() or 1


if __name__ == "__main__":
    raise SystemExit(main())
