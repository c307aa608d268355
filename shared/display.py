"""How figures are written for a reader: the dashboard and the ``ldp-telemetry`` command both
write every number through here, so a figure reads the same on the page and in the terminal.

A share is written in percent to 0.1 (a thousandth of its scale), a mean in its attribute's
units to the decimals that resolve a thousandth of its range: every window of one attribute then
shows the same decimals (33.8 beside 34.7, never 33.83 beside 34.7). A half-width is a share's in
percentage points ("pts") and a mean's "in its units" (a schema names no unit), to two
significant digits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping

if TYPE_CHECKING:
    from .schema import Attribute

# A figure resolves this much of its scale: 0.1 point of a share, a thousandth of a mean's range.
RESOLUTION = 1e-3
SHARE_DIGITS = 1  # decimals of a share in percent, at RESOLUTION


def label(value: Any) -> str:
    """A value of an attribute as a reader sees it: ``true``/``false`` for a boolean, else its text."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def percent(share: float, digits: int = SHARE_DIGITS) -> str:
    """``0.123`` as ``12.3%``."""
    return f"{share * 100:.{digits}f}%"


def two_digits(number: float) -> str:
    """Two significant digits, whole numbers from 10 up (210, never 2.1e+02)."""
    return f"{number:,.0f}" if abs(number) >= 10 else f"{number:.2g}"


def points(share: float) -> str:
    """A difference of shares in percentage points: ``0.017`` as ``1.7 pts``."""
    return f"{two_digits(share * 100)} pts"


def sig(number: float) -> str:
    """Three significant digits; whole numbers from 1,000 up in full (1,095, not 1.1e+03)."""
    return f"{number:,.0f}" if abs(number) >= 1000 else f"{number:.3g}"


def times(ratio: float) -> str:
    """A ratio as "67×", or "1.3×" below 10, where a whole number would round 1.4 to 1."""
    return f"{ratio:,.0f}×" if ratio >= 10 else f"{ratio:.2g}×"


def count(number: int) -> str:
    """A count in full with separators: ``14,153``."""
    return f"{number:,}"


def plural(number: int, noun: str) -> str:
    """``1 report``, ``2 reports``, the count in full."""
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


@dataclass(frozen=True)
class Style:
    """How one attribute's figures are written: a share's in percent, a mean's in its units."""

    percent: bool
    decimals: int  # of a share in percent, or of a mean in its units

    @classmethod
    def of(cls, percent_: bool, extent: float) -> Style:
        """The style of an estimate on a scale ``extent`` wide (1 for a share, a mean's range)."""
        if percent_:
            return cls(True, SHARE_DIGITS)
        return cls(False, max(0, math.ceil(-math.log10(extent * RESOLUTION) - 1e-9)))

    def value(self, number: float) -> str:
        """An estimate or an interval's end."""
        return percent(number, self.decimals) if self.percent else f"{number:,.{self.decimals}f}"

    def width(self, half: float, *, unit: bool = True) -> str:
        """A half-width, with what it is measured in (``unit``: a table's header may say it)."""
        if not unit:
            return two_digits(half * 100 if self.percent else half)
        return points(half) if self.percent else f"{two_digits(half)} in its units"

    def finer(self, truth: float, ends: Iterable[float]) -> Style:
        """This style one decimal finer (a truth beside its estimate is checked closer than it is
        read), and finer still until ``truth`` reads apart from each of ``ends`` it differs from:
        a truth outside its interval never prints as one of the interval's ends."""
        decimals = self.decimals + 1
        apart = [e for e in ends if e != truth]
        while decimals < 12 and any(Style(self.percent, decimals).value(truth) == Style(self.percent, decimals).value(e)
                                    for e in apart):
            decimals += 1
        return Style(self.percent, decimals)


SHARE = Style(True, SHARE_DIGITS)


def style_of(attribute: Attribute) -> Style:
    """The style of ``attribute``'s estimates."""
    return Style.of(attribute.mech.estimand.percent, attribute.kind.extent(attribute))


def told_from_zero(ci_low: float) -> bool:
    """Whether an interval tells its share from zero (from absent): its lower end is above 0."""
    return ci_low > 0.0


def most_frequent_first(estimates: Mapping[str, float | None]) -> list[str]:
    """A string attribute's candidates as the dashboard and the CLI list them: by their
    all-windows estimate (clipped), largest first, those without one last, ties as given."""
    def largest_first(value: str) -> float:
        estimate = estimates[value]
        return -(estimate if estimate is not None else -1.0)

    return sorted(estimates, key=largest_first)
