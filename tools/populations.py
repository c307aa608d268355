"""The populations the tools simulate: schemas and the true values of their devices.

``simulate``'s built-in population (:data:`SIMULATION_SCHEMA`, :data:`SIMULATION_SHARES`), the
demo's three schemas with the population that :func:`population` draws for them (in ``demo-app`` the
crash rate depends on the OS: :data:`CRASH_RATES`, with a breakdown listed and one added later), the demo's home
pages (:func:`homepage_schema`, :func:`homepages`), and discovery's measured population of sites
(:func:`site_names`, :func:`zipf_shares`). The bulk
simulation itself is :mod:`ldp_telemetry.shared.simulation`; this module only says who the
devices are.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from functools import lru_cache
from datetime import datetime
from typing import Any

import numpy as np

from ..shared.schema import Schema
from ..shared.simulation import population_shares, true_values
from ..shared.windows import LENGTH, window_of

# The population `simulate` uses when no schema is given: 8 attributes, 1 unit of ε each.
SIMULATION_SCHEMA: dict[str, Any] = {
    "name": "simulation",
    "version": 1,
    "epsilon": 8.0,
    "window": "day",
    "split": "equal",
    "description": "Eight attributes of a simulated app, for `ldp-telemetry simulate`.",
    "attributes": [
        {"name": "dark_mode", "type": "boolean"},
        {"name": "notifications", "type": "boolean"},
        {"name": "beta_channel", "type": "boolean"},
        {"name": "sync_enabled", "type": "boolean"},
        {"name": "crashed", "type": "boolean"},
        {"name": "paid_plan", "type": "boolean"},
        {"name": "os", "type": "categorical", "categories": ["linux", "macos", "windows", "other"]},
        # 16 categories at ε = 1: `auto` resolves to OUE here (d - 2 >= 3e^ε), GRR for `os`.
        {"name": "language", "type": "categorical",
         "categories": ["en", "zh", "es", "hi", "ar", "pt", "bn", "ru", "ja", "de", "fr", "ko", "it", "tr", "pl",
                        "other"]},
    ],
}
SIMULATION_SHARES: dict[str, Any] = {
    "dark_mode": 0.42,
    "notifications": 0.78,
    "beta_channel": 0.03,
    "sync_enabled": 0.5,
    "crashed": 0.0,
    "paid_plan": 0.97,
    "os": [0.45, 0.25, 0.25, 0.05],
    "language": [0.3, 0.2, 0.1, 0.08, 0.07, 0.05, 0.05, 0.04, 0.03, 0.02, 0.02, 0.02, 0.01, 0.01, 0.0, 0.0],
}


DEMO_SCHEMA: dict[str, Any] = {
    "name": "demo-app",
    "version": 1,
    "epsilon": 5.0,
    "window": "day",
    "split": "equal",
    "description": "A made-up app's settings and whether it crashed, reported by simulated devices "
                   "(ldp-telemetry demo). Each report spends epsilon 5, 1 per attribute.",
    "attributes": [
        {"name": "dark_mode", "type": "boolean"},
        {"name": "notifications", "type": "boolean"},
        {"name": "beta_channel", "type": "boolean"},
        {"name": "os", "type": "categorical", "categories": ["linux", "macos", "windows", "other"]},
        {"name": "crashed", "type": "boolean"},
    ],
}
# demo-app's breakdowns (DESIGN.md, "Breakdowns"): the crash rate within each OS, listed at publish
# (beside the schema: the schema clients fetch never carries them), and, added through the admin
# API after the reports arrived and back-filled from them, which OS the crashed devices run.
DEMO_BREAKDOWNS: list[dict[str, str]] = [{"of": "crashed", "by": "os"}]
ADDED_BREAKDOWN: dict[str, str] = {"of": "os", "by": "crashed"}
# What telemetry over time looks like: a mean and a histogram of measurements, in their units.
USAGE_SCHEMA: dict[str, Any] = {
    "name": "demo-usage",
    "version": 1,
    "epsilon": 4.0,
    "window": "day",
    "description": "Minutes per session (a mean) and page load times (a histogram) of the same made-up app. "
                   "Each report spends epsilon 4, 2 per attribute.",
    "attributes": [
        {"name": "session_minutes", "type": "numeric", "range": [0, 120]},
        {"name": "load_ms", "type": "histogram", "edges": [0, 50, 100, 250, 1000]},
    ],
}
# Memoised: a device that reports every day spends epsilon 1 per report, and however many days
# it reports, at most epsilon_permanent 4 about each value it holds.
MEMO_SCHEMA: dict[str, Any] = {
    "name": "demo-memoised",
    "version": 1,
    "epsilon": 1.0,
    "epsilon_permanent": 4.0,
    "window": "day",
    "description": "The same settings, memoised as in RAPPOR: epsilon 1 per report, and at most epsilon 4 "
                   "per value however many days a device reports it.",
    "attributes": [
        {"name": "dark_mode", "type": "boolean"},
        {"name": "os", "type": "categorical", "categories": ["linux", "macos", "windows", "other"]},
    ],
}
# True shares: dark mode catches on over the days; the rest hold steady.
DARK_MODE_FROM, DARK_MODE_TO = 0.35, 0.50
STEADY_SHARES: dict[str, Any] = {"notifications": 0.78, "beta_channel": 0.05, "os": [0.45, 0.25, 0.25, 0.05],
                                 "session_minutes": 34.0}
# An attribute whose true share depends on another's value: a crash is 4 times as likely on
# windows as on macos (about 12% of devices crash in all). Within each value the share is exact
# each day (rounded), as the steady shares are.
CONDITIONAL_SHARES: dict[str, tuple[str, dict[str, float]]] = {
    "crashed": ("os", {"linux": 0.10, "macos": 0.05, "windows": 0.20, "other": 0.30}),
}
CRASH_RATES = CONDITIONAL_SHARES["crashed"][1]
# Page loads in ms: log-normal around 90 ms (a long tail past the last edge, which the device clips).
LOAD_MEDIAN_MS, LOAD_SIGMA = 90.0, 0.8


@dataclass(frozen=True)
class Device:
    window: str
    record: dict[str, Any]
    secret: bytes = b""  # its device secret, for a memoised schema


def population(schema: Schema, devices: int, days: int, now: datetime, rng: np.random.Generator) -> list[Device]:
    """``devices`` devices spread evenly over the last ``days`` windows, each with its true record.

    Each window's devices hold exactly the shares of that day (rounded), in random order; an
    attribute of :data:`CONDITIONAL_SHARES` holds its share exactly within each value of the other
    (drawn after it: the schema lists it later)."""
    per_day = np.full(days, devices // days)
    per_day[: devices % days] += 1
    result = []
    for day, count in enumerate(per_day):
        window = window_of(now - (days - 1 - day) * LENGTH[schema.window], schema.window)
        shares = {**STEADY_SHARES,
                  "dark_mode": DARK_MODE_FROM + (DARK_MODE_TO - DARK_MODE_FROM) * day / max(1, days - 1)}
        columns: dict[str, list[Any]] = {}
        for attribute in schema.attributes:
            if attribute.name in CONDITIONAL_SHARES:
                by, rates = CONDITIONAL_SHARES[attribute.name]
                held = np.array(columns[by])
                column = np.zeros(int(count), dtype=bool)
                for value, rate in rates.items():
                    where = np.flatnonzero(held == value)
                    column[rng.choice(where, size=round(rate * where.size), replace=False)] = True
                columns[attribute.name] = attribute.kind.record_values(attribute, column)
                continue
            if attribute.name not in shares:  # page loads: measured times, not shares (see LOAD_MEDIAN_MS)
                values = rng.lognormal(np.log(LOAD_MEDIAN_MS), LOAD_SIGMA, size=int(count))
                columns[attribute.name] = [round(float(v), 1) for v in values]
                continue
            spec = population_shares(attribute, shares[attribute.name])
            values = true_values(attribute, spec, int(count), rng, sampled=False)
            columns[attribute.name] = attribute.kind.record_values(attribute, values)
        secrets_of = [secrets.token_bytes(32) if schema.epsilon_permanent else b"" for _ in range(int(count))]
        result += [Device(window, {name: column[i] for name, column in columns.items()}, secrets_of[i])
                   for i in range(int(count))]
    return result


# Discovery's measured population (bench and statistical tests): Zipf(1.1) over 20,000 domain-like
# names (a, b, ... of 1 to 4 syllables, a hyphen or a digit now and then, a common TLD), at most
# SITE_LENGTH code points, all in SITE_ALPHABET.
SITE_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789.-"
SITE_LENGTH = 24
_ONSETS = ("b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z", "br", "ch", "st", "tr")
_VOWELS = ("a", "e", "i", "o", "u", "ou", "ea")
_TLDS = (".com", ".com", ".com", ".org", ".net", ".io", ".de", ".co.uk", ".fr")


def site_names(count: int, rng: np.random.Generator) -> list[str]:
    """``count`` distinct domain-like names (4 to :data:`SITE_LENGTH` code points of
    :data:`SITE_ALPHABET`), in a random order: the i-th is the (i+1)-th most common under :func:`zipf_shares`."""
    names: dict[str, None] = {}
    while len(names) < count:
        syllables = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(rng.integers(1, 5)))
        extra = rng.random()
        if extra < 0.1:
            syllables += "-" + rng.choice(_ONSETS) + rng.choice(_VOWELS)
        elif extra < 0.2:
            syllables += str(rng.integers(0, 100))
        name = syllables + rng.choice(_TLDS)
        if len(name) <= SITE_LENGTH:
            names[name] = None
    return list(names)


def zipf_shares(count: int, exponent: float = 1.1) -> np.ndarray:
    """Zipf's shares over ``count`` ranks: :math:`k^{-s} / \\sum_j j^{-s}`."""
    weights = np.arange(1, count + 1, dtype=float) ** -exponent
    shares: np.ndarray = weights / weights.sum()
    return shares


# The demo's home pages: any site at all, drawn from a Zipf(1.1) population of DEMO_SITES names of at
# most 12 code points (a short max_length is fewer discovery levels, so more reports a level). The
# schema lists a few of them (two of the five most common, some rarer ones, one nobody holds); the
# demo adds two more after the reports arrived, and discovery finds the common ones nobody listed.
DEMO_SITES, DEMO_SITE_LENGTH = 3000, 12
LISTED_RANKS = (0, 3, 8, 20, 200)  # the sites the schema lists (0: the most common)
ADDED_RANKS = (1, 50)  # the sites the demo adds after the reports arrived, then back-filled


@lru_cache(maxsize=1)
def demo_sites() -> tuple[str, ...]:
    """The demo's sites, most common first (the same on every run; made when first asked for)."""
    names = [n for n in site_names(2 * DEMO_SITES, np.random.default_rng(1100)) if len(n) <= DEMO_SITE_LENGTH]
    return tuple(names[:DEMO_SITES])


def homepage_schema() -> dict[str, Any]:
    """The demo's string schema: one discovering attribute listing a few of :func:`demo_sites`."""
    sites = demo_sites()
    return {
        "name": "demo-homepages",
        "version": 1,
        "epsilon": 4.0,
        "window": "day",
        "description": "Each device's home page, which can be any site: the listed sites are estimated, and the "
                       "common sites nobody listed are discovered. Each report spends epsilon 4.",
        "attributes": [
            {"name": "home", "type": "string", "max_length": DEMO_SITE_LENGTH, "discover": True,
             "alphabet": SITE_ALPHABET, "candidates": [sites[i] for i in LISTED_RANKS] + ["nobody.test"]},
        ],
    }


def homepages(devices: int, days: int, now: datetime, rng: np.random.Generator) -> list[Device]:
    """``devices`` devices spread evenly over the last ``days`` day windows, each with its home page."""
    sites = demo_sites()
    picks = rng.choice(DEMO_SITES, size=devices, p=zipf_shares(DEMO_SITES))
    return [Device(window_of(now - (days - 1 - i % days) * LENGTH["day"], "day"), {"home": sites[k]})
            for i, k in enumerate(picks)]
