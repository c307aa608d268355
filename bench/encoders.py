"""On-device cost: `randomize` and the device encoders beside pure-LDP's encoders.

pure-LDP (Cormode/Maddock's `pure-ldp`) draws its coins from Python's Mersenne Twister, which is
fast but predictable; ours draw from the OS CSPRNG. The comparison shows what that safety costs.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

from ldp_telemetry.shared import parse_schema, randomize
from ldp_telemetry.shared.mechanisms import SYSTEM

# The demo-like report: a boolean (RR) and a 4-category attribute (GRR), and an OUE one.
BENCH_SCHEMA = parse_schema({
    "name": "bench", "version": 1, "epsilon": 2.0,
    "attributes": [
        {"name": "dark_mode", "type": "boolean"},
        {"name": "os", "type": "categorical", "categories": ["linux", "macos", "windows", "other"]},
    ],
})
OUE_SCHEMA = parse_schema({
    "name": "bench-oue", "version": 1, "epsilon": 1.0,
    "attributes": [{"name": "page", "type": "categorical", "mechanism": "oue",
                    "categories": [f"p{i}" for i in range(16)]}],
})
RECORD = {"dark_mode": True, "os": "linux"}


def per_call_seconds(fn: Callable[[], Any], *, calls: int = 20_000, repeats: int = 5) -> float:
    """Median over ``repeats`` of the mean time of one call."""
    runs = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        runs.append((time.perf_counter() - started) / calls)
    return statistics.median(runs)


def run() -> dict[str, float]:
    """Microseconds per call of each encoder, ours and pure-LDP's, and per whole report."""
    from pure_ldp.frequency_oracles.direct_encoding.de_client import DEClient
    from pure_ldp.frequency_oracles.unary_encoding.ue_client import UEClient

    rr, grr = BENCH_SCHEMA.attribute("dark_mode"), BENCH_SCHEMA.attribute("os")
    page = OUE_SCHEMA.attribute("page")
    identity = lambda x: x  # noqa: E731 - pure-LDP maps items to indices through this
    pure_rr = DEClient(rr.epsilon, 2, index_mapper=identity)
    pure_grr = DEClient(grr.epsilon, 4, index_mapper=identity)
    pure_oue = UEClient(page.epsilon, 16, use_oue=True, index_mapper=identity)
    us = {
        "ours_rr": per_call_seconds(lambda: rr.mech.encode(rr, True, SYSTEM)),
        "pure_rr": per_call_seconds(lambda: pure_rr.privatise(1)),
        "ours_grr": per_call_seconds(lambda: grr.mech.encode(grr, 0, SYSTEM)),
        "pure_grr": per_call_seconds(lambda: pure_grr.privatise(0)),
        "ours_oue16": per_call_seconds(lambda: page.mech.encode(page, 3, SYSTEM)),
        "pure_oue16": per_call_seconds(lambda: pure_oue.privatise(3)),
        # A whole report: validation, both encoders, id and window; pure-LDP's equivalent is its
        # two encoders alone.
        "ours_randomize_report": per_call_seconds(lambda: randomize(BENCH_SCHEMA, RECORD)),
    }
    us = {k: v * 1e6 for k, v in us.items()}
    us["pure_report"] = us["pure_rr"] + us["pure_grr"]
    us["randomize_ratio"] = us["ours_randomize_report"] / us["pure_report"]
    us["encoders_ratio"] = (us["ours_rr"] + us["ours_grr"]) / us["pure_report"]
    return us
