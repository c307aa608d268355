"""What every mechanism object answers: the interface the registry holds.

A mechanism is one object (as diffprivlib has one class per mechanism). Schema parsing, report
validation, ingest, estimation, simulation, the privacy panel, the OpenAPI document and the
dashboard all ask it, and none of them compares mechanism names: adding a mechanism is adding
one object to :data:`ldp_telemetry.shared.mechanisms.REGISTRY`.

Mechanisms import nothing of the schema: what they read of the attribute they randomise is the
:class:`Target` protocol below, which :class:`..schema.Attribute` satisfies. So the schema depends
on the mechanisms and never the other way round; which mechanisms may randomise which type of
attribute is the attribute type's to say (:mod:`..attribute_types`).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from ..estimators import Estimate
from .randomness import RandomSource

if TYPE_CHECKING:  # numpy is for the aggregator and simulation only; a device never imports it
    import numpy as np


# A numeric attribute's range, in whose units describe() states numbers; [-1, 1] is the wire's scale.
Span = tuple[float, float]
UNIT: Span = (-1.0, 1.0)

class WireError(ValueError):
    """A reported wire value does not fit its attribute; the message says what it must be."""


@dataclass(frozen=True)
class Estimand:
    """What a mechanism's estimates are, and on what scale a page shows them."""

    name: str  # "share": the fraction of devices whose true value is the estimate's value
    percent: bool  # shown as a percentage (a share) rather than in the attribute's own units


SHARE = Estimand("share", percent=True)
MEAN = Estimand("mean", percent=False)  # the mean of a numeric attribute, in its own units


@dataclass(frozen=True)
class Memo:
    """The two layers of a memoised attribute (see :class:`.shares.ShareMechanism`)."""

    epsilon_permanent: float  # the attribute's share of ε∞: what the server can ever learn of a value
    permanent_p: float  # the permanent response's hit probabilities, at ε∞
    permanent_q: float
    instant_p: float  # the instantaneous response's, applied to the permanent one
    instant_q: float
    p: float  # the two composed: what one report's estimator uses
    q: float


class Target(Protocol):
    """What a mechanism reads of the attribute it randomises (a protocol: the schema's
    ``Target`` is one, and mechanisms never import the schema)."""

    @property
    def name(self) -> str: ...  # for messages

    @property
    def epsilon(self) -> float: ...  # the attribute's share of the report's ε

    @property
    def p(self) -> float: ...  # the hit probabilities one report's estimator uses (composed, if memoised)

    @property
    def q(self) -> float: ...

    @property
    def memo(self) -> Memo | None: ...  # the two layers of a memoised attribute

    @property
    def categories(self) -> tuple[str, ...]: ...  # the values a categorical response chooses among

    @property
    def index_of(self) -> Mapping[str, int]: ...  # category -> its index

    @property
    def categories_shown(self) -> str: ...  # the categories for an error message

    @property
    def keys(self) -> tuple[str, ...]: ...  # how each estimate value is keyed in the counters

    @property
    def range(self) -> tuple[int | float, int | float] | None: ...  # a numeric attribute's [lo, hi]

    @property
    def discover(self) -> bool: ...  # a string attribute's: whether its reports carry discovery levels

    @property
    def alphabet(self) -> str: ...  # a discovering string attribute's prefix alphabet

    @property
    def levels(self) -> tuple[int, ...]: ...  # a discovering string attribute's prefix lengths


def span_of(attribute: Target) -> Span:
    """A numeric attribute's range [lo, hi]; ``TypeError`` for an attribute without one (a
    caller's mistake: only means are read in units)."""
    if attribute.range is None:
        raise TypeError(f"attribute {attribute.name!r} has no range")
    return attribute.range


def check_epsilon(epsilon: float) -> None:
    """``ValueError`` unless ``epsilon`` is a positive finite number."""
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a positive finite number, got {epsilon!r}")


class Mechanism(ABC):
    """One randomisation mechanism: device encoder, wire check, statistics, estimator, privacy."""

    name: ClassVar[str]  # as the derived schema names it
    title: ClassVar[str]  # in plain words, for the dashboard
    estimand: ClassVar[Estimand]
    memoisable: ClassVar[bool] = False  # can take a permanent randomised response (memoisation)
    # What a breakdown (DESIGN.md, "Breakdowns") may do with an attribute it randomises. Its report
    # gives each value an indicator I_j, a hit with probability p when j is the true value and q
    # otherwise: a breakdown may be by it, and of it (shares within each value of the other).
    indicates: ClassVar[bool] = False
    # Its report is an unbiased number v of the true t (a mean's): a breakdown may be of it (a mean).
    unbiased_number: ClassVar[bool] = False
    wire_schema: ClassVar[dict[str, Any]]  # the JSON Schema of a wire value, for the OpenAPI document

    def __repr__(self) -> str:
        return f"<mechanism {self.name}>"

    @abstractmethod
    def parameters(self, *, epsilon: float, d: int) -> tuple[float, float]:
        """``(p, q)`` at ``epsilon`` for ``d`` values: the hit probabilities the estimator uses."""

    def shown_parameters(self, *, epsilon: float, d: int) -> dict[str, float]:
        """The parameters besides ``p`` and ``q`` that its encoder and estimator use at ``epsilon``
        (and ``d``), named as DESIGN.md names them (``C``, ``z``, ``C_pm``, ``alpha``, ``scale``):
        the derived schema shows them, so a client in another language can check what it computed."""
        return {}

    def shown_parameters_of(self, attribute: Target, *, d: int) -> dict[str, float]:
        """:meth:`shown_parameters` of ``attribute`` as parsed: the same, unless the schema gave back
        a parameter that :meth:`given_parameters` accepted in place of ours."""
        return self.shown_parameters(epsilon=attribute.epsilon, d=d)

    def given_parameters(self, given: Mapping[str, Any], *, epsilon: float, d: int) -> tuple[float, float] | None:
        """``(p, q)`` from parameters a (served) schema gives back that differ from ours but that
        DESIGN.md lets a client take as served, or None: ours stand. None for every mechanism
        but ``olh`` (its ``g`` at a half-integer e^ε)."""
        return None

    @abstractmethod
    def worst_variance(self, *, epsilon: float, d: int) -> float:
        """The variance of one report's estimate in the worst case (times 1/n for n reports);
        ``auto`` picks the mechanism for which this is lowest."""

    @abstractmethod
    def encode(self, attribute: Target, truth: Any, source: RandomSource,
               permanent: RandomSource | None = None) -> Any:
        """The wire value of the true value ``truth`` (as ``validate_record`` gives it), with
        coins from ``source``; for a memoised attribute the permanent layer's coins come from
        ``permanent`` (derived from the device's secret and the value)."""

    def memoise(self, *, epsilon: float, epsilon_permanent: float, d: int) -> Memo:
        """The permanent and instantaneous layers for one report of ``epsilon`` over
        ``epsilon_permanent``; only mechanisms with :attr:`memoisable` have them."""
        raise ValueError(f"{self.name} cannot be memoised")

    def counter_keys(self, attribute: Target) -> tuple[str, ...]:
        """The keys :meth:`statistics` adds amounts to, in the order :meth:`encode_bulk` sums them:
        the value keys themselves for shares (hits per value); Σ and Σ² for means."""
        return attribute.keys

    @abstractmethod
    def wire_bytes(self, attribute: Target) -> int:
        """The most characters the JSON text of one wire value of ``attribute`` can take (with
        ``json.dumps``' default separators, the wider ones): a device refuses a schema whose
        reports would be too big to carry before it randomises anything."""

    @abstractmethod
    def check(self, attribute: Target, reported: Any) -> None:
        """Raise :class:`WireError` unless ``reported`` is a valid wire value of ``attribute``."""

    def counted(self, attribute: Target, reported: Any) -> Any:
        """Whether a checked wire value adds to the counters (``n`` and its amounts): always, but
        for a report that only discovery reads (``olh``: a prefix's report, level ≥ 1). Given
        many reports' :meth:`columns` (field -> numpy array), a mask of them (or True for all)."""
        return True

    # How each field of :meth:`columns` is stored, as a struct format: "b", "h", "i", "q" signed
    # integers of 1, 2, 4 and 8 bytes (as narrow as the field's values allow: a stored report's row
    # stays short), "Q" an unsigned 64-bit word, "d" a double. Read back, integers are 64-bit.
    column_format: ClassVar[str] = "q"

    @abstractmethod
    def columns(self, attribute: Target) -> tuple[str, ...]:
        """The fields of a wire value's numeric form, each a number (:attr:`column_format`): what a
        report's values are packed into once, at ingest, and what counting, the back-fill and
        discovery read of a stored report, as columns, instead of parsing its JSON again."""

    @abstractmethod
    def column_values(self, attribute: Target, reported: Any) -> list[int | float]:
        """The fields (:meth:`columns`, in order) of one checked wire value."""

    @abstractmethod
    def valid_columns(self, attribute: Target, columns: Mapping[str, np.ndarray]) -> np.ndarray:
        """Which reports given as :meth:`columns` hold values :meth:`check` allows (a stored form
        written behind the store's back may not)."""

    def wire_of_columns(self, attribute: Target, columns: Mapping[str, np.ndarray]) -> np.ndarray:
        """Many valid reports given as :meth:`columns`, in :meth:`wire_array`'s form. Only where
        that form is."""
        raise NotImplementedError(f"{self.name} has no per-report amounts")

    def tally_columns(self, attribute: Target, columns: Mapping[str, np.ndarray], groups: np.ndarray) -> np.ndarray:
        """:meth:`tally` of many checked reports given as :meth:`columns`, per run of consecutive
        reports (``groups``: their bounds, from 0 to the number of reports): one row per run, of
        each :meth:`counter_keys` amount. Here the per-report amounts (:meth:`report_amounts`)
        summed per run, as integers where they are; ``olh`` counts supports its own way."""
        import numpy as np

        amounts = self.report_amounts(attribute, self.wire_of_columns(attribute, columns))
        total = np.int64 if amounts.dtype.kind in "iub" else np.float64
        sums = np.zeros((len(groups) - 1, amounts.shape[1]), dtype=total)
        for i, (start, end) in enumerate(zip(groups[:-1], groups[1:])):
            if end > start:
                sums[i] = amounts[start:end].sum(axis=0, dtype=total)
        return sums

    @abstractmethod
    def statistics(self, attribute: Target, reported: Any) -> Iterable[tuple[str, int | float]]:
        """What one checked wire value adds to the counters: ``(key, amount)`` pairs, none zero.

        Every report also adds one to the attribute's ``n``; that is not listed here.
        """

    def tally(self, attribute: Target, reported: Iterable[tuple[Any, int]]) -> dict[str, int | float]:
        """What many checked wire values add to the counters, summed per key: ``reported`` holds
        ``(wire value, how many reports sent it)``: the definition from wire values, which
        :meth:`tally_columns` (what counting runs, on the stored numeric form) must agree with
        (tests/test_agg_wire.py holds it to that); equal wire values go through :meth:`statistics`
        once. A mechanism whose statistics are cheaper in bulk (``olh``: numpy over every
        candidate) overrides it."""
        alike: dict[Hashable, list[Any]] = {}
        for value, count in reported:
            # OUE vectors as tuples, so that they can be counted alike.
            key = tuple(value) if type(value) is list else value
            if key in alike:
                alike[key][1] += count
            else:
                alike[key] = [value, count]
        sums: dict[str, int | float] = {}
        for value, count in alike.values():
            for key, amount in self.statistics(attribute, value):
                sums[key] = sums.get(key, 0) + amount * count
        return sums

    def wire_array(self, attribute: Target, reported: Sequence[Any]) -> np.ndarray:
        """Many checked wire values as one numpy array (the form :meth:`report_amounts` reads,
        :meth:`respond_bulk` makes and :meth:`wire_of_columns` gives from the stored numeric form).
        Only a mechanism a breakdown may be of has it (:attr:`indicates` or :attr:`unbiased_number`)."""
        raise NotImplementedError(f"{self.name} has no per-report amounts")

    def report_amounts(self, attribute: Target, wire: np.ndarray) -> np.ndarray:
        """Each report's amount of each :meth:`counter_keys` key, one row per report of
        :meth:`wire_array`'s form: what :meth:`statistics` adds, as a matrix (integers where the
        amounts are: a share's indicators :math:`I_j`, duchi's bit). Only where that is."""
        raise NotImplementedError(f"{self.name} has no per-report amounts")

    def respond_bulk(self, attribute: Target, truth: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Many devices' wire values, in :meth:`wire_array`'s form, for their prepared true values
        (numpy; simulation only). Only where that is."""
        raise NotImplementedError(f"{self.name} has no per-report amounts")

    def mean_sums(self, attribute: Target, n: int, amounts: Mapping[str, int | float]) -> tuple[float, float]:
        r""":math:`(\Sigma v, \Sigma v^2)` over ``n`` reports of their unbiased estimates :math:`v` of
        :math:`t`, from their summed ``amounts``; only with :attr:`unbiased_number`."""
        raise NotImplementedError(f"{self.name} reports no unbiased number")

    def to_estimate(self, attribute: Target, y: float) -> float:
        """What ``y``, on the scale of one report's unbiased estimate (a share's 0 to 1, a mean's
        [-1, 1]), stands for in the estimate's units: a share as it is."""
        return y

    def estimate_span(self, attribute: Target) -> Span:
        """The values the estimate can take, which a clipped estimate and its interval keep to:
        [0, 1] for a share."""
        return (0.0, 1.0)

    @abstractmethod
    def estimates(self, attribute: Target, n: int, amounts: Mapping[str, int | float],
                  confidence: float) -> list[tuple[str, Estimate]]:
        """One estimate per value key of ``attribute`` from ``n`` reports and the summed
        ``amounts`` (a key with no amount is 0)."""

    @abstractmethod
    def report_variance(self, attribute: Target) -> float:
        """The most one report's estimate can vary, over every true value, in the estimate's units
        squared: :math:`n` reports give :math:`1/n` of it. The planner builds on it."""

    @abstractmethod
    def encode_bulk(self, attribute: Target, truth: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Randomise many devices' true values at once (numpy; simulation only) and return the
        summed amount of each counter key, in :meth:`counter_keys` order."""

    @abstractmethod
    def worst_pair(self, p: float, q: float) -> list[tuple[float, float]]:
        """The output distributions ``(P(o|x), P(o|x'))`` of the pair of inputs that leaks most."""

    @abstractmethod
    def describe(self, p: float, q: float, d: int, percent: Callable[[float], str], span: Span = UNIT) -> str:
        """One sentence, for people, of what a device does; ``percent`` formats a probability and a
        mean's numbers are stated in the units of ``span``, its attribute's range."""


class OneBitColumns:
    """The numeric form of a one-bit wire value (``rr``'s true or false, ``duchi``'s 0 or 1): one
    column, the bit, in a byte. A mixin, before the mechanism's class."""

    column_format = "b"

    def columns(self, attribute: Target) -> tuple[str, ...]:
        return ("bit",)

    def column_values(self, attribute: Target, reported: Any) -> list[int | float]:
        return [int(reported)]

    def valid_columns(self, attribute: Target, columns: Mapping[str, np.ndarray]) -> np.ndarray:
        valid: np.ndarray = (columns["bit"] == 0) | (columns["bit"] == 1)
        return valid
