"""Ingest throughput over HTTP: wrk with bench/ingest.lua when installed, else bench/loadgen.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ldp_telemetry.shared.schema import Schema

from .loadgen import report_template, run_load

LUA = Path(__file__).with_name("ingest.lua")


def load_generator() -> str:
    return "wrk" if shutil.which("wrk") else "python"


def measure(url: str, schema: Schema, *, batch: int, seconds: float, connections: int = 4,
            prefix: str = "") -> dict[str, Any]:
    """Post ``batch``-report requests with fresh ids for ``seconds``: rates, latency, failures.
    ``prefix`` goes into the ids, to tell apart loads run at once."""
    if load_generator() == "wrk":
        return _wrk(url, schema, batch=batch, seconds=seconds, connections=connections, prefix=prefix)
    result = run_load(url, schema, batch=batch, seconds=seconds, connections=connections)
    summary = result.summary()
    summary["failed"] = result.requests - result.statuses.get(202, 0) + result.errors
    return summary


def measure_spread(urls: list[str], schema: Schema, *, batch: int, seconds: float,
                   connections: int = 4) -> dict[str, Any]:
    """:func:`measure` on every one of ``urls`` at once (``connections`` each): the summed rates,
    the worst latencies and every failure, as one load spread over several nodes."""
    with ThreadPoolExecutor(len(urls)) as pool:
        parts = list(pool.map(lambda i: measure(urls[i], schema, batch=batch, seconds=seconds,
                                                connections=connections, prefix=f"n{i}"), range(len(urls))))
    seconds_taken = max(p["seconds"] for p in parts)
    return {"requests": sum(p["requests"] for p in parts), "reports": sum(p["reports"] for p in parts),
            "seconds": seconds_taken,
            "requests_per_second": round(sum(p["requests_per_second"] for p in parts), 1),
            "reports_per_second": round(sum(p["reports_per_second"] for p in parts), 1),
            "p50_ms": max(p["p50_ms"] for p in parts), "p99_ms": max(p["p99_ms"] for p in parts),
            "failed": sum(p["failed"] for p in parts)}


def _wrk(url: str, schema: Schema, *, batch: int, seconds: float, connections: int, prefix: str = "") -> dict[str, Any]:
    env = {**os.environ, "BENCH_REPORT": report_template(schema), "BENCH_BATCH": str(batch), "BENCH_PREFIX": prefix}
    command = ["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "--timeout", "10s", "-s", str(LUA), url]
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=seconds + 60, check=True).stdout
    line = next(l for l in out.splitlines() if l.startswith("BENCH_JSON "))
    raw = json.loads(line.removeprefix("BENCH_JSON "))
    ok = raw["requests"] - raw["non2xx"]
    return {
        "requests": raw["requests"], "reports": ok * batch, "seconds": raw["seconds"],
        "requests_per_second": round(raw["requests"] / raw["seconds"], 1),
        "reports_per_second": round(ok * batch / raw["seconds"], 1),
        "p50_ms": raw["p50_ms"], "p99_ms": raw["p99_ms"],
        "failed": raw["non2xx"] + raw["errors"],
    }
