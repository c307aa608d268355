"""Discovery (PEM by levels, shared/discovery.py): its rules, and statistical tests on simulated
populations with fixed seeds.

Devices are simulated in bulk (:func:`simulation.discovery_reports`: the device's level coin, its
prefix rule and olh's numpy encoder, checked against the device encoder at the end). At the last
level a string of share 0 has supports Binomial(n_L, q), q = 1/g, whatever the population; the
tolerances below come from that and from the binomial count of runs.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from scipy import stats

from ldp_telemetry.shared import discovery
from ldp_telemetry.shared.mechanisms import olh
from ldp_telemetry.shared.mechanisms.randomness import HmacStream
from ldp_telemetry.shared.reports import randomize
from ldp_telemetry.shared.schema import parse_schema
from ldp_telemetry.shared.simulation import discovery_reports
from ldp_telemetry.tools.populations import SITE_ALPHABET, SITE_LENGTH, site_names, zipf_shares


def attribute_of(epsilon: float = 4.0, **fields):
    raw = {"name": "home", "type": "string", "discover": True, **fields}
    return parse_schema({"name": "s", "version": 1, "epsilon": epsilon, "attributes": [raw]}).attribute("home")


def test_a_prefix_ending_in_padding_has_one_extension_and_others_all_of_theirs():
    assert list(discovery.extensions("ab\u0000", 2, "abc")) == ["ab\u0000\u0000\u0000"]
    grown = list(discovery.extensions("ab", 2, "xy"))
    # 3 symbols (x, y, U+FFFD) for each kept code point, then the padding as a suffix only.
    assert len(grown) == len(set(grown)) == 9 + 3 + 1
    assert "abx\u0000" in grown and "ab\u0000\u0000" in grown and "ab\u0000x" not in grown
    first = list(discovery.extensions("", 3, "ab"))  # the first level: every prefix of 3 code points
    assert len(first) == 27 + 9 + 3 + 1 and all(len(c) == 3 for c in first)


@pytest.mark.parametrize("max_length, alphabet, levels", [
    (24, SITE_ALPHABET, tuple(range(2, 25))),  # E = 40: 40^2 = 1600 <= 4160 < 40^3; 32 * 40 <= 4160 < 32 * 40^2
    (16, "01", (6, 9, 12, 15, 16)),  # E = 4: 4^6 = 4096; 32 * 4^3 = 2048
    (3, "abc", (3,)),  # the first level is the whole value
    (1, "".join(chr(0x100 + i) for i in range(128)), (1,)),
])
def test_derived_levels_keep_every_level_within_the_bound(max_length, alphabet, levels):
    assert discovery.derived_levels(max_length, alphabet) == levels
    assert max(discovery.level_candidates(levels, alphabet)) <= discovery.MAX_LEVEL_CANDIDATES


@pytest.mark.parametrize("n, q, alpha", [(21_747, 1 / 56, 0.05 / 1280), (1000, 1 / 8, 0.05 / 160), (30, 0.5, 0.01),
                                         (5, 0.01, 0.2), (100_000, 1 / 65536, 1e-6)])
def test_the_null_threshold_is_the_exact_binomial_quantile(n, q, alpha):
    h = discovery.null_hits(n, q, alpha)
    assert stats.binom.sf(h - 1, n, q) <= alpha < stats.binom.sf(h - 2, n, q)


def test_a_string_out_of_the_alphabet_is_found_with_its_replacement_and_marked_not_estimable():
    attribute = attribute_of(alphabet="abc", max_length=4, levels=[1, 2, 3, 4])
    a, b, y, level = discovery_reports(attribute, ["ab!", "cab", "b"], [0.5, 0.3, 0.2], 20_000,
                                       np.random.default_rng(5))
    found = {d.value: d for d in discovery.discover(attribute, a, b, y, level).found}
    assert set(found) == {"ab\ufffd", "cab", "b"}
    assert not found["ab\ufffd"].estimable and found["cab"].estimable and found["b"].estimable


# --- false discoveries ------------------------------------------------------------------------

RUNS = 400
HELD = {"abc": 0.4, "ba": 0.3, "cab": 0.2, "c": 0.1}


def test_a_string_of_share_zero_is_reported_in_at_most_alpha_of_runs():
    """400 runs of 8,000 devices over 4 levels of 1 code point (alphabet "abc": at the last level
    up to 32 × 5 = 160 candidates, nearly all of share 0). Bonferroni holds the rate of runs with
    any false string to at most α = 5%: its count is at most Binomial(400, 0.05), and is refused
    above the 0.1% upper tail of that (33). Without the division by m the rate would be near 1.
    Every string held is found in nearly every run (shares of 10% or more against a threshold
    of about 4 standard errors of 0.9%)."""
    attribute = attribute_of(alphabet="abc", max_length=4, levels=[1, 2, 3, 4])
    rng = np.random.default_rng(19_001)
    false_runs, found = 0, Counter()
    for _ in range(RUNS):
        run = discovery.discover(attribute, *discovery_reports(attribute, list(HELD), list(HELD.values()), 8000, rng))
        values = {d.value for d in run.found}
        false_runs += bool(values - set(HELD))
        found.update(values & set(HELD))
    assert false_runs <= stats.binom.ppf(0.999, RUNS, discovery.ALPHA)
    assert min(found[s] for s in HELD) >= 0.99 * RUNS


# --- recall ----------------------------------------------------------------------------------


def test_the_ten_most_common_of_20000_names_are_found_at_a_million_reports_and_epsilon_4():
    """Zipf(1.1) over 20,000 names, n = 10^6, ε = 4 (23 levels of about 21,700 reports). At the
    last level the 10th name (share 1.16%) has supports Binomial(n_L, q + (p - q)·0.0116), mean
    about 509, against a threshold near 466 (sd 22): found with probability about 0.97, and the
    more common names with more. Over 2 seeds (20 names) the count found is then at least
    Binomial(20, 0.97), whose 1% lower tail is 17: 18 or more (recall >= 0.9) is required."""
    attribute = attribute_of(alphabet=SITE_ALPHABET, max_length=SITE_LENGTH)
    shares = zipf_shares(20_000)
    found = 0
    for seed in (1, 2):
        rng = np.random.default_rng(seed)
        names = site_names(20_000, rng)
        run = discovery.discover(attribute, *discovery_reports(attribute, names, shares, 1_000_000, rng))
        found += len({d.value for d in run.found} & set(names[:10]))
    assert found >= 18


# --- the simulation is the device --------------------------------------------------------------


def test_the_bulk_simulation_draws_levels_and_prefixes_as_the_device_encoder_does():
    """Levels: 1/2 at level 0 and 1/(2L) at each other, for both; the device's level-i reports of
    "ab" support its prefix with probability p (a chi-square test would add little: the draws of
    a, b, y are olh's, tested in test_shared_string_statistics.py). 4,000 device reports: level 0
    within 4 sd of 2,000 (sd 31.6); supports of the level's prefix p·k within 4 sd."""
    attribute = attribute_of(alphabet="ab", max_length=3, levels=[1, 2, 3])
    schema = parse_schema({"name": "s", "version": 1, "epsilon": 4.0, "attributes": [attribute.to_dict()]})
    coins = HmacStream(b"test coins", b"levels")  # the device encoder with fixed coins
    reports = [randomize(schema, {"home": "ab"}, source=coins)["values"]["home"] for _ in range(4000)]
    levels = Counter(r["level"] for r in reports)
    assert abs(levels[0] - 2000) <= 4 * math.sqrt(4000 * 0.25)
    for i, length in enumerate(attribute.levels, start=1):
        mine = [r for r in reports if r["level"] == i]
        x = olh.fingerprint(olh.prefix("ab", length, "ab"))
        hits = sum(((r["a"] * x + r["b"]) % olh.P) % olh.buckets_of(attribute) == r["y"] for r in mine)
        k = len(mine)
        assert abs(hits - attribute.p * k) <= 4 * math.sqrt(k * attribute.p * (1 - attribute.p))
    _, _, _, bulk = discovery_reports(attribute, ["ab"], [1.0], 4000, np.random.default_rng(3))
    assert abs(int((bulk == 0).sum()) - 2000) <= 4 * math.sqrt(4000 * 0.25)
    assert set(np.unique(bulk)) == {0, 1, 2, 3}
