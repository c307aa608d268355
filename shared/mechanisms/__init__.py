"""The mechanism registry: one object per mechanism, and the only place that knows their names.

Everything that depends on how an attribute is randomised (schema parsing, report validation,
ingest, estimation, simulation, the privacy panel, the OpenAPI document, the dashboard) asks the
attribute's mechanism object (``attribute.mech``) or this registry; adding a mechanism is adding
one object to :data:`REGISTRY` (and naming it among the mechanisms of the attribute types it can
randomise, in :mod:`..attribute_types`, which also says what ``auto`` picks).
"""

from __future__ import annotations

from .base import MEAN, SHARE, Estimand, Mechanism, Memo, Span, Target, WireError, check_epsilon, span_of
from .means import DUCHI, HM, LAPLACE, PARAMETERS, PM
from .olh import OLH, OptimalLocalHashing
from .randomness import SYSTEM, FixedBytes, RandomSource, SystemRandom
from .shares import GRR, OUE, RR, BinaryRR, GeneralisedRR, OptimisedUnaryEncoding, hit_probability, variance

AUTO = "auto"
REGISTRY: dict[str, Mechanism] = {m.name: m for m in (RR, GRR, OUE, DUCHI, PM, HM, LAPLACE, OLH)}


def get(name: str) -> Mechanism:
    """The mechanism called ``name``; ``ValueError`` if there is none."""
    try:
        return REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"mechanism must be one of {', '.join(REGISTRY)}, got {name!r}") from None


def parameter_descriptions() -> dict[str, str]:
    """Each parameter a derived schema may show besides ``p`` and ``q``
    (:meth:`Mechanism.shown_parameters`), in words, with the mechanisms that use it."""
    users = {name: [m.name for m in REGISTRY.values() if name in m.shown_parameters(epsilon=1.0, d=2)]
             for name in PARAMETERS}
    return {name: f"{text} (shown for {', '.join(users[name])})" for name, text in PARAMETERS.items()}


__all__ = [
    "AUTO", "DUCHI", "GRR", "HM", "LAPLACE", "MEAN", "OLH", "OUE", "PM", "REGISTRY", "RR", "SHARE", "SYSTEM", "BinaryRR",
    "Estimand", "FixedBytes", "GeneralisedRR", "Mechanism", "Memo", "OptimalLocalHashing", "OptimisedUnaryEncoding", "RandomSource",
    "Span", "SystemRandom", "Target", "WireError", "check_epsilon", "get", "hit_probability", "parameter_descriptions",
    "span_of", "variance",
]
