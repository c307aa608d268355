"""What a row says of its window's crowd (DESIGN.md, "Relay and amplification", "Accountant").

Made when a row is read, from the window's one row of :class:`..store.CrowdRow` (how its reports
arrived), never stored with the estimates: a read writes nothing, and a window's crowd changes
only with new reports, which mark it for the next refresh anyway. The ``all`` rollup's row sums
every window's (erased ones too) and keeps the smallest crowd of any.
"""

from __future__ import annotations

from typing import Any

from ...shared.amplification import shuffle_epsilon
from ..store import CrowdRow

# The fields each estimate and breakdown row gains, in the order the API (and its CSV) shows them.
FIELDS = ("relayed", "crowd", "epsilon_shuffled", "delta")


def relay_fields(crowd: CrowdRow | None, epsilon: float, delta: float) -> dict[str, Any]:
    """A window's relay fields: ``relayed``, the share of its reports that came through a relay (0
    to 1; None with no report); ``crowd``, the smallest number of its reports one relay batch
    stored for the first time (None: no relay batch); ``epsilon_shuffled``, the central ε of a
    report in that crowd against the aggregator (:func:`...shared.amplification.shuffle_epsilon` at
    the schema's total ``epsilon`` and ``delta``: the aggregator reads whole reports), and
    ``delta``, both None without a crowd (no central guarantee is claimed then)."""
    total = 0 if crowd is None else crowd.relayed + crowd.direct
    smallest = None if crowd is None else crowd.crowd
    return {"relayed": crowd.relayed / total if crowd is not None and total else None,
            "crowd": smallest,
            "epsilon_shuffled": None if smallest is None else shuffle_epsilon(smallest, epsilon, delta),
            "delta": None if smallest is None else delta}
