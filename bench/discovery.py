"""`make bench`'s discovery step: recall, false discoveries, time and peak memory of PEM.

The population (:func:`ldp_telemetry.tools.populations.site_names`): Zipf(1.1) over 20,000
domain-like names of at most 24 code points; devices simulated in bulk with numpy
(:func:`ldp_telemetry.shared.simulation.discovery_reports`: the device's level coin, prefixes and
olh's bulk encoder), then the server's discovery (:func:`ldp_telemetry.shared.discovery.discover`)
over all of their reports. Recall: the share of the 10 most common names among the strings found;
false: strings found that no device holds. The ``discovery-job`` step runs the scheduled job
(:func:`ldp_telemetry.aggregator.questions.discovery.discover_strings`) over such reports stored in SQLite,
in a process of its own, for its time and peak RSS.

    python -m bench.discovery [--keep 16,32,64] [--runs 3]   # the ablation behind K
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from typing import Any

import numpy as np

from ldp_telemetry.shared import discovery as pem
from ldp_telemetry.shared import parse_schema
from ldp_telemetry.shared.schema import Attribute
from ldp_telemetry.shared.simulation import discovery_reports
from ldp_telemetry.tools.populations import SITE_ALPHABET, SITE_LENGTH, site_names, zipf_shares

SITES = 20_000
TOP = 10
ALPHA = pem.ALPHA
RECALL_TARGET = 0.9  # top-10 recall at n = 1,000,000, ε = 4 (issue 19)
SECONDS_TARGET = 60.0  # one run over 1,000,000 reports
GRID = ((100_000, 2.0), (100_000, 4.0), (1_000_000, 2.0), (1_000_000, 4.0))


def attribute_at(epsilon: float) -> Attribute:
    return parse_schema(_schema(epsilon)).attribute("home")


def measure(n: int, epsilon: float, seed: int, keep: int = pem.KEEP) -> dict[str, Any]:
    """One population of ``n`` devices, one discovery run: recall of the top 10, false strings, seconds."""
    rng = np.random.default_rng(seed)
    names = site_names(SITES, rng)
    attribute = attribute_at(epsilon)
    a, b, y, level = discovery_reports(attribute, names, zipf_shares(SITES), n, rng)
    started = time.perf_counter()
    run = pem.discover(attribute, a, b, y, level, keep=keep)
    seconds = time.perf_counter() - started
    found = {d.value for d in run.found}
    held = set(names)
    return {"recall": len(found & set(names[:TOP])) / TOP, "found": len(found), "false": len(found - held),
            "seconds": seconds, "levels": len(attribute.levels), "per_level": int(np.median(run.reports)),
            "threshold_share": pem.smallest_share(int(np.median(run.reports)), attribute.p, attribute.q,
                                                        run.tested)}


def run(runs: int = 3, keeps: tuple[int, ...] = (pem.KEEP,)) -> dict[str, Any]:
    """Each grid point ``runs`` times (seeds 1..runs) at each K; medians, and the peak RSS of this process."""
    out: dict[str, Any] = {"grid": {}}
    for keep in keeps:
        for n, epsilon in GRID:
            results = [measure(n, epsilon, seed, keep) for seed in range(1, runs + 1)]
            out["grid"][f"{keep}/{n}/{epsilon:g}"] = {
                "keep": keep, "n": n, "epsilon": epsilon, "runs": runs,
                "recall": float(np.median([r["recall"] for r in results])),
                "recall_min": min(r["recall"] for r in results),
                "false_runs": sum(r["false"] > 0 for r in results),
                "found": float(np.median([r["found"] for r in results])),
                "seconds": float(np.median([r["seconds"] for r in results])),
                "per_level": results[0]["per_level"], "levels": results[0]["levels"],
                "threshold_share": results[0]["threshold_share"]}
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def job(n: int = 1_000_000, epsilon: float = 4.0, seed: int = 1) -> dict[str, Any]:
    """The discovery job over ``n`` reports stored in SQLite (simulated devices, stored through
    the store's own ingest in chunks), run in a child process so that its peak RSS is its own:
    seconds, candidates added, recall of the top 10 and peak RSS."""
    import subprocess
    import sys
    import tempfile

    from ldp_telemetry.aggregator import create_app
    from ldp_telemetry.aggregator.store import ReportRow, layout
    from ldp_telemetry.aggregator.ingest.inbox import MAX_UNFOLDED

    from .bulkload import window_days
    from .servers import ADMIN_TOKEN

    rng = np.random.default_rng(seed)
    names = site_names(SITES, rng)
    attribute = attribute_at(epsilon)
    a, b, y, level = discovery_reports(attribute, names, zipf_shares(SITES), n, rng)
    with tempfile.TemporaryDirectory(prefix="ldp-discovery-") as folder:
        db = f"{folder}/discovery.db"
        app = create_app({"LDP_DB": db, "LDP_ADMIN_TOKEN": ADMIN_TOKEN, "LDP_SCHEDULER": False,
                          "LDP_SYNCHRONOUS": "normal"})
        schema = _schema(epsilon)
        published = app.test_client().post("/api/v1/schemas", json=schema,
                                           headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        assert published.status_code == 201, published.json
        store, writer = app.extensions["ldp"]["store"], app.extensions["ldp"]["writer"]
        day, end = window_days(1)[0]
        packing = layout(app.extensions["ldp"]["catalog"].lookup("sites", 1))
        for start in range(0, n, MAX_UNFOLDED):
            stop = min(n, start + MAX_UNFOLDED)
            values = [{"home": {"a": int(a[i]), "b": int(b[i]), "y": int(y[i]), "level": int(level[i])}}
                      for i in range(start, stop)]
            writer.write([ReportRow(f"r{i:015d}", "sites", 1, day, end, json.dumps(v), packing.pack(v))
                          for i, v in zip(range(start, stop), values)])
            writer.settle()
        store.close()
        done = subprocess.run([sys.executable, "-c", f"from bench.discovery import _job_child; _job_child({db!r})"],
                              capture_output=True, text=True, check=True)
        out = json.loads(done.stdout.strip().splitlines()[-1])
    found = set(out.pop("found"))
    return {**out, "n": n, "epsilon": epsilon, "recall": len(found & set(names[:TOP])) / TOP}


def _schema(epsilon: float) -> dict[str, Any]:
    return {"name": "sites", "version": 1, "epsilon": epsilon, "attributes": [
        {"name": "home", "type": "string", "max_length": SITE_LENGTH, "discover": True, "alphabet": SITE_ALPHABET}]}


def _job_child(db: str) -> None:
    """In a fresh process: the job over ``db``; prints its seconds, what it found and its peak RSS."""
    from ldp_telemetry.aggregator import create_app
    from ldp_telemetry.aggregator.questions.discovery import discover_strings

    from .servers import ADMIN_TOKEN

    app = create_app({"LDP_DB": db, "LDP_ADMIN_TOKEN": ADMIN_TOKEN, "LDP_SCHEDULER": False})
    started = time.perf_counter()
    added = discover_strings(app, seed=1)
    seconds = time.perf_counter() - started
    found = [c.value for c in app.extensions["ldp"]["store"].candidates("sites", 1)]
    print(json.dumps({"seconds": seconds, "added": added, "found": found,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", default=str(pem.KEEP), help="comma-separated K values")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(run(args.runs, tuple(int(k) for k in args.keep.split(","))), indent=1))


if __name__ == "__main__":
    main()
