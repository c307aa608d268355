"""A bounded HTTP load generator for the ingest path (used when `wrk` is not installed).

Several processes, each with one keep-alive connection, post report batches with fresh ids for a
fixed time, then stop by themselves. Bodies are built from a template so that generating load
costs far less than serving it. Only loopback targets are allowed.
"""

from __future__ import annotations

import http.client
import json
import multiprocessing as mp
import os
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from ldp_telemetry.shared import randomize
from ldp_telemetry.shared.schema import Schema

LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass
class LoadResult:
    requests: int = 0
    reports: int = 0
    seconds: float = 0.0
    statuses: dict[int, int] = field(default_factory=dict)
    errors: int = 0  # dropped or refused connections
    latencies_ms: list[float] = field(default_factory=list)

    @property
    def requests_per_second(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    @property
    def reports_per_second(self) -> float:
        return self.reports / self.seconds if self.seconds else 0.0

    def percentile(self, q: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def summary(self) -> dict[str, Any]:
        return {
            "requests": self.requests, "reports": self.reports, "seconds": round(self.seconds, 3),
            "requests_per_second": round(self.requests_per_second, 1),
            "reports_per_second": round(self.reports_per_second, 1),
            "p50_ms": round(self.percentile(0.50), 3), "p99_ms": round(self.percentile(0.99), 3),
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())}, "errors": self.errors,
        }


ID_PLACEHOLDER = "@ID@"


def report_template(schema: Schema) -> str:
    """One randomised report as JSON, with ``@ID@`` where its id goes."""
    sample = randomize(schema, _any_record(schema))
    sample["id"] = ID_PLACEHOLDER
    return json.dumps(sample, separators=(",", ":"))


def _any_record(schema: Schema) -> dict[str, Any]:
    return {a.name: a.kind.example(a) for a in schema.attributes}


def _worker(url: str, schema_dict: dict, batch: int, seconds: float, worker: int, out: mp.Queue) -> None:
    from ldp_telemetry.shared import parse_schema

    schema = parse_schema(schema_dict)
    before, after = report_template(schema).split(ID_PLACEHOLDER)
    parts = urlsplit(url)
    prefix = f"w{worker:02d}{os.getpid():07d}{int(time.time() * 1000) % 10**9:09d}"
    result = LoadResult()
    headers = {"Content-Type": "application/json"}
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    sequence = 0
    started = time.perf_counter()
    deadline = started + seconds
    while time.perf_counter() < deadline:
        ids = [f"{prefix}{sequence + i:012d}" for i in range(batch)]
        sequence += batch
        body = '{"reports":[' + ",".join(before + i + after for i in ids) + "]}"
        sent = time.perf_counter()
        try:
            conn.request("POST", "/api/v1/reports", body=body, headers=headers)
            response = conn.getresponse()
            response.read()
        except (OSError, http.client.HTTPException):
            result.errors += 1
            conn.close()
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
            continue
        result.latencies_ms.append((time.perf_counter() - sent) * 1000)
        result.requests += 1
        result.statuses[response.status] = result.statuses.get(response.status, 0) + 1
        if response.status == 202:
            result.reports += batch
    result.seconds = time.perf_counter() - started
    conn.close()
    out.put(result)


def run_load(url: str, schema: Schema, *, batch: int, seconds: float, connections: int) -> LoadResult:
    """Post ``batch``-report requests from ``connections`` processes for ``seconds``; merge results."""
    host = urlsplit(url).hostname
    if host not in LOOPBACK:
        raise ValueError(f"load tests only target this machine's loopback, not {host!r}")
    out: mp.Queue = mp.get_context("fork").Queue()
    procs = [
        mp.get_context("fork").Process(target=_worker, args=(url, schema.to_dict(), batch, seconds, i, out))
        for i in range(connections)
    ]
    for p in procs:
        p.start()
    parts = [out.get(timeout=seconds + 60) for _ in procs]
    for p in procs:
        p.join(timeout=10)
    merged = LoadResult()
    for part in parts:
        merged.requests += part.requests
        merged.reports += part.reports
        merged.errors += part.errors
        merged.latencies_ms.extend(part.latencies_ms)
        for status, count in part.statuses.items():
            merged.statuses[status] = merged.statuses.get(status, 0) + count
    merged.seconds = max(p.seconds for p in parts)
    return merged
