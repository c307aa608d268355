"""Our string estimates against an independent implementation: pure-LDP's OLH server.

Reports are made by our own ``randomize`` (the device encoder), posted over HTTP to a real
``ldp-telemetry serve`` and estimated by it; the same ``(a, b, y)`` reports are fed to pure-LDP's
``LHServer`` (Cormode and Maddock's ``pure-ldp``), whose support test ``hash(i, seed) % g == y``
is kept and whose hash is replaced by ours: seed ``(a, b)`` and item ``i`` give
``(a·x(s_i) + b) mod P``, which LHServer then reduces mod g itself. Its estimate is a count,
``(g·hits − n)/(p·g − 1)``; ours is the share ``(hits/n − 1/g)/(p − 1/g)``, so ours times n must
equal its count (to float rounding: 1e-9 relative is the bar).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import requests

from ldp_telemetry.shared import parse_schema, randomize
from ldp_telemetry.shared.mechanisms.olh import P, fingerprint

from . import servers

CANDIDATES = [f"site-{i}.example" for i in range(40)]
SCHEMA = {"name": "olh-reference", "version": 1, "epsilon": 3.0, "window": "day",
          "attributes": [{"name": "home", "type": "string", "candidates": CANDIDATES}]}
REPORTS = 20_000
BATCH = 500


class _OurHash:
    """Stands in for the ``xxhash`` module inside pure-LDP's LHServer: ``xxh32(str(i), seed=(a, b))``
    answers our universal hash of candidate ``i`` before the mod g that LHServer applies."""

    def __init__(self, fingerprints: list[int]):
        self._x = fingerprints

    def xxh32(self, item: str, seed: tuple[int, int]) -> "_OurHash._Digest":
        a, b = seed
        return self._Digest((a * self._x[int(item)] + b) % P)

    class _Digest:
        def __init__(self, value: int):
            self._value = value

        def intdigest(self) -> int:
            return self._value


def _population(i: int) -> str:
    """A device's true string: Zipf-like over the candidates, and some strings nobody listed."""
    return CANDIDATES[(i * i) % 17] if i % 5 else f"unlisted-{i % 97}.example"


def run() -> dict[str, Any]:
    from pure_ldp.frequency_oracles.local_hashing import lh_server

    schema = parse_schema(SCHEMA)
    attribute = schema.attribute("home")
    reports = [randomize(schema, {"home": _population(i)}) for i in range(REPORTS)]
    with tempfile.TemporaryDirectory(prefix="ldp-bench-olh-") as folder:
        with servers.aggregator(Path(folder) / "olh.db") as url:
            servers.publish(url, SCHEMA)
            for start in range(0, REPORTS, BATCH):
                requests.post(url + "/api/v1/reports", json={"reports": reports[start:start + BATCH]},
                              timeout=60).raise_for_status()
            requests.post(url + "/api/v1/estimates/refresh", timeout=120,
                          headers={"Authorization": f"Bearer {servers.ADMIN_TOKEN}"}).raise_for_status()
            rows = requests.get(url + "/api/v1/estimates", params={"schema": SCHEMA["name"], "attribute": "home"},
                                timeout=60).json()["estimates"]
    ours = {r["value"]: (r["estimate"], r["n"]) for r in rows if r["window"] == "all"}

    g = round(1 / attribute.q)
    reference = lh_server.LHServer(attribute.epsilon, len(CANDIDATES), g=g, index_mapper=lambda i: i)
    real_hash, lh_server.xxhash = lh_server.xxhash, _OurHash([fingerprint(c) for c in CANDIDATES])
    try:
        for report in reports:
            value = report["values"]["home"]
            reference.aggregate((value["y"], (value["a"], value["b"])))
        counts = [reference.estimate(i, suppress_warnings=True) for i in range(len(CANDIDATES))]
    finally:
        lh_server.xxhash = real_hash
    worst = max(abs(ours[c][0] * ours[c][1] - count) / max(1.0, abs(count)) for c, count in zip(CANDIDATES, counts))
    return {"reports": REPORTS, "candidates": len(CANDIDATES), "g": g,
            "p_ours": attribute.p, "p_pure_ldp": reference.p,
            "n_equal": all(ours[c][1] == REPORTS for c in CANDIDATES),
            "max_relative_difference": worst}
