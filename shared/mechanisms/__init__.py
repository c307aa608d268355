"""The mechanism registry: one object per mechanism, and the only place that knows their names.

Everything that depends on how an attribute is randomised (schema parsing, report validation,
ingest, estimation, simulation, the privacy panel, the OpenAPI document, the dashboard) asks the
attribute's mechanism object (``attribute.mech``) or this registry; adding a mechanism is adding
one object to :data:`REGISTRY`. ``auto`` resolves to the mechanism with the lowest worst-case
variance at the attribute's ε and number of values (Wang et al. 2017 for GRR vs OUE: GRR exactly
when :math:`d - 2 < 3e^\\varepsilon`; Wang et al. 2019 for a mean: ``duchi`` up to ε ≈ 0.61, ``hm``
above).
"""

from __future__ import annotations

from .base import MEAN, SHARE, Estimand, Mechanism, WireError, check_epsilon
from .means import DUCHI, PM, HybridMechanism, LocalLaplace
from .randomness import SYSTEM, FixedBytes, RandomSource, SystemRandom
from .shares import BinaryRR, GeneralisedRR, OptimisedUnaryEncoding, hit_probability, variance

AUTO = "auto"
# In order of preference on a tie under ``auto`` (at ε ≤ 0.61 ``hm`` is ``duchi``: duchi is named).
REGISTRY: dict[str, Mechanism] = {m.name: m for m in (BinaryRR(), GeneralisedRR(), OptimisedUnaryEncoding(),
                                                      DUCHI, PM, HybridMechanism(), LocalLaplace())}


def get(name: str) -> Mechanism:
    """The mechanism called ``name``; ``ValueError`` if there is none."""
    try:
        return REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"mechanism must be one of {', '.join(REGISTRY)}, got {name!r}") from None


def for_type(kind: str) -> tuple[Mechanism, ...]:
    """The mechanisms that can randomise an attribute of type ``kind``, in registry order."""
    return tuple(m for m in REGISTRY.values() if kind in m.types)


def choices(kind: str) -> tuple[str, ...]:
    """The ``mechanism`` values a schema may give for an attribute of type ``kind``."""
    return (AUTO, *(m.name for m in for_type(kind)))


def resolve(kind: str, requested: str, *, epsilon: float, d: int) -> Mechanism:
    """The mechanism for an attribute of type ``kind`` that asked for ``requested`` (a name or
    ``auto``); ``ValueError`` if that mechanism cannot randomise ``kind``."""
    candidates = for_type(kind)
    if requested == AUTO:
        return min(candidates, key=lambda m: m.worst_variance(epsilon=epsilon, d=d))
    for mechanism in candidates:
        if mechanism.name == requested:
            return mechanism
    raise ValueError(f"must be one of {', '.join(choices(kind))} for a {kind} attribute")


__all__ = [
    "AUTO", "MEAN", "REGISTRY", "SHARE", "SYSTEM", "BinaryRR", "Estimand", "FixedBytes", "GeneralisedRR", "Mechanism",
    "OptimisedUnaryEncoding", "RandomSource", "SystemRandom", "WireError", "check_epsilon", "choices", "for_type",
    "get", "hit_probability", "resolve", "variance",
]
