"""Vectorised simulation of a population of devices (numpy; never used on a device).

The bulk encoders draw the same output distributions as the device encoders in
:mod:`.mechanisms`, but from a seeded numpy generator, so that a million simulated devices take
seconds and a statistical test is repeatable. Devices randomise with the OS CSPRNG instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from .attribute_types import CONCENTRATION
from .breakdowns import values_of
from .mechanisms import olh
from .estimators import DEFAULT_CONFIDENCE, Estimate
from .schema import Attribute, Schema, parse_schema

__all__ = ["CONCENTRATION", "SimulatedEstimate", "correlated_truth", "discovery_reports", "hit_counts",
           "population_shares", "responses", "simulate", "true_values"]


def hit_counts(attribute: Attribute, truth: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Randomise ``truth`` (bools, category or bucket indices, numbers) with the attribute's
    mechanism and sum each counter key's amount (:meth:`Mechanism.encode_bulk`)."""
    return attribute.mech.encode_bulk(attribute, truth, rng)


def responses(attribute: Attribute, truth: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each device's randomised wire value for ``truth``, in the array form
    :meth:`Mechanism.wire_array` reads (:meth:`Mechanism.respond_bulk`): what a breakdown counts."""
    return attribute.mech.respond_bulk(attribute, truth, rng)


def correlated_truth(of: Attribute, by: Attribute, by_shares: Sequence[float], of_within: Sequence[Any], n: int,
                     rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` devices' prepared true values of ``of`` and ``by``, each drawn independently: its ``by``
    value j (of :func:`.breakdowns.values_of`: a boolean's true and false) with probability
    ``by_shares[j]``, then its ``of`` value from ``of_within[j]`` (as :func:`population_shares`
    takes it: a share of true, shares per category, a mean). Within each value of ``by`` the
    breakdown targets exactly ``of_within[j]``."""
    if not len(by_shares) == len(of_within) == len(values_of(by)):
        raise ValueError(f"{by.name}: give a share and a population of {of.name} for each of its "
                         f"{len(values_of(by))} values")
    index = rng.choice(len(by_shares), size=n, p=by_shares)
    of_truth: np.ndarray | None = None
    by_truth: np.ndarray | None = None
    for j, spec in enumerate(of_within):
        where = np.flatnonzero(index == j)
        only_j = [1.0 if k == j else 0.0 for k in range(len(by_shares))]
        of_j = of.kind.draw(of, population_shares(of, spec), where.size, rng, sampled=True)
        by_j = by.kind.draw(by, only_j, where.size, rng, sampled=True)
        if of_truth is None or by_truth is None:
            of_truth, by_truth = np.empty(n, dtype=of_j.dtype), np.empty(n, dtype=by_j.dtype)
        of_truth[where], by_truth[where] = of_j, by_j
    if of_truth is None or by_truth is None:  # no value of `by` at all
        raise ValueError(f"{by.name}: give a share and a population of {of.name} for each of its values")
    return of_truth, by_truth


@dataclass(frozen=True)
class SimulatedEstimate:
    attribute: str
    value: object  # True for a boolean, "mean" for a numeric attribute, else the category or bucket
    truth: float  # the population's true share, or its mean in the attribute's units
    estimate: Estimate

    @property
    def covered(self) -> bool:
        return self.estimate.ci_low <= self.truth <= self.estimate.ci_high


def true_values(
    attribute: Attribute, shares: Sequence[float], n: int, rng: np.random.Generator, *, sampled: bool
) -> np.ndarray:
    """``n`` devices' true values (bools, category or bucket indices, or numbers) for the given
    shares (a numeric attribute's: its mean, see :data:`CONCENTRATION`).

    ``sampled=True``: each device drawn independently from ``shares`` (the population is a random
    sample; the estimator targets ``shares`` and the binomial variance holds exactly).
    ``sampled=False``: exactly the given shares (rounded) in random order: the population is fixed
    and only the randomisation is random (Wang et al.'s conditional setting; intervals are then
    conservative, since the conditional variance is smaller).
    """
    return attribute.kind.draw(attribute, shares, n, rng, sampled=sampled)


def population_shares(attribute: Attribute, share: float | Sequence[float]) -> list[float]:
    """Normalise a share spec: a boolean's share of True, a numeric attribute's mean (in its
    range), or one share per category or bucket summing to 1 (the type's ``population``)."""
    return attribute.kind.population(attribute, share)


def simulate(
    schema: Schema | Mapping[str, Any],
    shares: Mapping[str, float | Sequence[float]],
    n: int,
    *,
    rng: np.random.Generator,
    confidence: float = DEFAULT_CONFIDENCE,
    sampled: bool = True,
) -> list[SimulatedEstimate]:
    """Simulate ``n`` devices reporting under ``schema`` and estimate every value's share.

    ``shares`` gives each attribute's true shares (see :func:`population_shares`). Under
    ``split: "sample"`` each device reports one attribute chosen uniformly at random.
    ``sampled`` chooses how the population is drawn (see :func:`true_values`); each result's
    ``truth`` is what the estimate targets: the given share, or the fixed population's share.
    """
    schema = parse_schema(schema)
    if n < 1:
        raise ValueError(f"the number of devices must be at least 1, got {n}")
    missing = [a.name for a in schema.attributes if a.name not in shares]
    if missing:
        raise ValueError(f"no true shares given for: {', '.join(missing)}")
    unknown = sorted(str(name) for name in shares if name not in schema.by_name)
    if unknown:  # most likely a typo: silently ignoring it would simulate something else
        raise ValueError(f"shares given for attribute(s) the schema does not have: {', '.join(unknown)}")
    if schema.split == "sample":
        carriers = np.bincount(rng.integers(0, len(schema.attributes), size=n), minlength=len(schema.attributes))
    else:
        carriers = np.full(len(schema.attributes), n)
    results = []
    for attribute, reporting in zip(schema.attributes, carriers):
        spec = population_shares(attribute, shares[attribute.name])
        reporting = int(reporting)
        if reporting == 0:
            continue
        truth = true_values(attribute, spec, reporting, rng, sampled=sampled)
        if attribute.discover:  # only its level-0 reports are estimated; the others are discovery's
            truth = truth[rng.random(reporting) < olh.LEVEL_ZERO]
            reporting = truth.shape[0]
            if reporting == 0:
                continue
        amounts = dict(zip(attribute.mech.counter_keys(attribute), hit_counts(attribute, truth, rng).tolist()))
        target = spec[: len(attribute.values)] if sampled else attribute.kind.realised(attribute, truth)
        estimates = attribute.mech.estimates(attribute, reporting, amounts, confidence)
        for index, (value, (_, estimate)) in enumerate(zip(attribute.values, estimates)):
            results.append(SimulatedEstimate(attribute.name, value, target[index], estimate))
    return results


def discovery_reports(attribute: Attribute, strings: Sequence[str], shares: Sequence[float], n: int,
                      rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``n`` devices of a discovering string attribute, each drawn from ``shares`` over the prepared
    ``strings``, reporting as a device does (DESIGN.md, "Strings"): a coin at 1/2 for level 0 (the
    value), else a uniform level 1..L (the value's prefix, :func:`.mechanisms.olh.prefix`); then
    optimal local hashing of that (:func:`.mechanisms.olh.randomise_bulk`). Returns ``(a, b, y,
    level)``."""
    levels = attribute.levels
    truth = rng.choice(len(strings), size=n, p=shares)
    level = np.where(rng.random(n) < olh.LEVEL_ZERO, 0, 1 + rng.integers(0, len(levels), size=n))
    # Each string's fingerprint at each level (row 0: the value itself), then each device's.
    table = np.stack([olh.fingerprints(tuple(strings))]
                     + [olh.fingerprints(tuple(olh.prefix(s, length, attribute.alphabet) for s in strings))
                        for length in levels])
    a, b, y = olh.randomise_bulk(table[level, truth], olh.buckets_of(attribute), attribute.p, rng)
    return a, b, y, level
