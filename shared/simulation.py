"""Vectorised simulation of a population of devices (numpy; never used on a device).

The bulk encoders draw the same output distributions as the device encoders in
:mod:`.mechanisms`, but from a seeded numpy generator, so that a million simulated devices take
seconds and a statistical test is repeatable. Devices randomise with the OS CSPRNG instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from .estimators import DEFAULT_CONFIDENCE, Estimate
from .schema import Attribute, Schema, is_number, parse_schema

# A numeric attribute's simulated devices draw their values from Beta(m·c, (1 - m)·c) stretched over
# its range, m the mean's position in it and c this concentration (a spread-out population).
CONCENTRATION = 4.0


def hit_counts(attribute: Attribute, truth: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Randomise ``truth`` (bools, category or bucket indices, numbers) with the attribute's
    mechanism and sum each counter key's amount (:meth:`Mechanism.encode_bulk`)."""
    return attribute.mech.encode_bulk(attribute, truth, rng)


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
    if attribute.type == "numeric":
        lo, hi = attribute.range  # type: ignore[misc]
        m = (shares[0] - lo) / (hi - lo)
        if 0 < m < 1:
            return lo + (hi - lo) * rng.beta(m * CONCENTRATION, (1 - m) * CONCENTRATION, size=n)
        return np.full(n, float(shares[0]))
    if sampled:
        values = rng.choice(len(shares), size=n, p=shares)
    else:
        counts = np.floor(np.asarray(shares) * n).astype(np.int64)
        counts[np.argmax(shares)] += n - counts.sum()  # the remainder goes to the largest share
        values = np.repeat(np.arange(len(counts)), counts)
        rng.shuffle(values)
    return values == 0 if attribute.type == "boolean" else values


def population_shares(attribute: Attribute, share: float | Sequence[float]) -> list[float]:
    """Normalise a share spec: a boolean's share of True, a numeric attribute's mean (in its
    range), or one share per category or bucket summing to 1."""
    if attribute.type == "numeric":
        lo, hi = attribute.range  # type: ignore[misc]
        if not is_number(share) or not lo <= share <= hi:  # type: ignore[operator]
            raise ValueError(f"{attribute.name}: the mean must be a number from {lo} to {hi}, got {share!r}")
        return [float(share)]  # type: ignore[arg-type]
    if attribute.type == "boolean":
        if not isinstance(share, (int, float)) or not 0 <= share <= 1:
            raise ValueError(f"{attribute.name}: the share of True must be a number in [0, 1], got {share!r}")
        return [float(share), 1.0 - float(share)]
    shares = list(share) if isinstance(share, (list, tuple)) else []
    # Comparisons that a NaN fails (`0 <= s <= 1`, `not ... <= 1e-9`), so NaN shares are rejected.
    valid = all(isinstance(s, (int, float)) and 0 <= s <= 1 for s in shares)
    if len(shares) != len(attribute.categories) or not valid or not abs(sum(shares) - 1) <= 1e-9:
        raise ValueError(
            f"{attribute.name}: give {len(attribute.categories)} non-negative shares summing to 1, got {share!r}"
        )
    return shares


def simulate(
    schema: Schema | Mapping,
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
        amounts = dict(zip(attribute.mech.counter_keys(attribute), hit_counts(attribute, truth, rng).tolist()))
        target = spec[: len(attribute.values)] if sampled else _realised_shares(attribute, truth)
        estimates = attribute.mech.estimates(attribute, reporting, amounts, confidence)
        for index, (value, (_, estimate)) in enumerate(zip(attribute.values, estimates)):
            results.append(SimulatedEstimate(attribute.name, value, target[index], estimate))
    return results


def _realised_shares(attribute: Attribute, truth: np.ndarray) -> list[float]:
    if attribute.type in ("boolean", "numeric"):
        return [float(truth.mean())]
    return list(np.bincount(truth, minlength=len(attribute.categories)) / truth.shape[0])
