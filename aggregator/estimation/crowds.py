"""What a row says of its window's crowd (DESIGN.md, "Relay and amplification", "Accountant").

Each window's one row of :class:`..store.CrowdRow` says how its reports arrived (through relays or
directly) and the smallest crowd of a relay batch there; the ``all`` rollup's row sums every
window's (erased ones too) and keeps the smallest crowd of any. A read turns it into the row
fields (:func:`relay_fields`) and writes nothing.

The central epsilon of a crowd (:func:`...shared.amplification.shuffle_epsilon`, a numerical bound:
up to a tenth of a second for a large crowd) is computed by the refresh job, once per window whose
crowd changed (:func:`save_epsilons`), and kept beside the crowd; a read computes it only for a crowd
that changed since the last refresh (at most a refresh interval's windows, cached per process).
"""

from __future__ import annotations

from typing import Any

from flask import Flask

from ...shared.amplification import shuffle_epsilon
from .. import context
from ..store import CrowdRow

# The fields each estimate and breakdown row gains, in the order the API (and its CSV) shows them.
FIELDS = ("relayed", "crowd", "epsilon_shuffled", "delta")


def relay_fields(row: CrowdRow | None, epsilon: float, delta: float) -> dict[str, Any]:
    """A window's relay fields: ``relayed``, the share of its reports that came through a relay (0
    to 1; None with no report); ``crowd``, the smallest number of its reports one relay batch
    stored for the first time (None: no relay batch); ``epsilon_shuffled``, the central ε of a
    report in that crowd against the aggregator at the schema's total ``epsilon`` (the aggregator
    reads whole reports) and ``delta``; both None without a crowd (no central guarantee is claimed
    then)."""
    if row is None:
        return {"relayed": None, "crowd": None, "epsilon_shuffled": None, "delta": None}
    total, crowd = row.relayed + row.direct, row.crowd
    if crowd is None:
        central = None
    elif row.epsilon_shuffled is not None and (row.epsilon_crowd, row.epsilon_delta) == (crowd, delta):
        central = row.epsilon_shuffled  # what the refresh kept for this crowd at this delta
    else:
        central = shuffle_epsilon(crowd, epsilon, delta)  # a crowd changed since the last refresh
    return {"relayed": row.relayed / total if total else None, "crowd": crowd, "epsilon_shuffled": central,
            "delta": None if crowd is None else delta}


def save_epsilons(app: Flask) -> int:
    """The refresh's step: compute and keep the central ε of every crowd that has none for itself
    at ``LDP_SHUFFLE_DELTA``; how many were computed."""
    store, catalog, delta = context.store(app), context.catalog(app), app.config["LDP_SHUFFLE_DELTA"]
    due = store.run_tx("epsilons_due", lambda tx: tx.epsilons_due(delta), write=False)
    computed = []
    for row in due:
        schema = catalog.schema(row.schema, row.version)
        if schema is None or row.crowd is None:  # crowds exist only for published schemas
            continue
        computed.append(row._replace(epsilon_crowd=row.crowd, epsilon_delta=delta,
                                     epsilon_shuffled=shuffle_epsilon(row.crowd, schema.epsilon, delta)))
    if computed:
        store.run_tx("save_epsilons", lambda tx: tx.save_epsilons(computed))
    return len(computed)
