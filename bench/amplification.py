"""The shuffle accountant (:mod:`ldp_telemetry.shared.amplification`) at a crowd of a million.

The estimates refresh asks ``shuffle_epsilon(crowd, ε0, δ)`` for every window of a relayed schema;
a first call computes (the δ(ε) sum over the window of clone counts, a dozen times over), later calls
with the same arguments are answered from the cache. Each is timed here in its own step process,
so the first call of each point is a cold one. The issue's figure is printed beside ours: at
m = 10⁵, ε0 = 4, δ = 10⁻⁶, ε ≈ 0.12 (Wang et al., VLDB 2024).
"""

from __future__ import annotations

import time
from typing import Any

from ldp_telemetry.shared.amplification import shuffle_epsilon

CROWD = 1_000_000
DELTA = 1e-8  # LDP_SHUFFLE_DELTA's default
LOCAL_EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)
FIRST_CALL_TARGET_MS = 1000.0  # a refresh computes it once per (crowd, ε0, δ), then reads the cache
ISSUE_POINT = (100_000, 4.0, 1e-6)
ISSUE_EPSILON = 0.12


def run() -> dict[str, Any]:
    import numpy  # noqa: F401  (the aggregator has it loaded already: not part of a call's time)

    points = {}
    for eps0 in LOCAL_EPSILONS:
        started = time.perf_counter()
        epsilon = shuffle_epsilon(CROWD, eps0, DELTA)
        first = time.perf_counter() - started
        calls = 10_000
        started = time.perf_counter()
        for _ in range(calls):
            shuffle_epsilon(CROWD, eps0, DELTA)
        cached = (time.perf_counter() - started) / calls
        points[str(eps0)] = {"epsilon": epsilon, "first_ms": first * 1e3, "cached_us": cached * 1e6}
    return {"crowd": CROWD, "delta": DELTA, "points": points, "target_ms": FIRST_CALL_TARGET_MS,
            "issue_point": list(ISSUE_POINT), "issue_epsilon": ISSUE_EPSILON,
            "issue_point_epsilon": shuffle_epsilon(*ISSUE_POINT)}
