"""The rows that cross the store's boundary, as plain tuples and dataclasses. The tables they come
from (DESIGN.md, "Storage"):

- schemas: name, version, the derived definition;
- reports: the randomised reports as received (id unique), with their window's end for retention
  and their values' numeric form (:mod:`.wire`);
- totals: ``n`` once per (schema, version, window, attribute);
- counters: per (schema, version, window, attribute, value) the amount counting adds
  (:mod:`..ingest.counting`: hits for shares; Σ and Σ² for numeric means), only where it is not zero;
- dirty: the windows whose counters changed since their estimates were computed, each with a mark
  that changes at every change, so a refresh computed from a snapshot can tell it is still current;
- estimates: the latest estimate per (schema, version, window, attribute, value);
- candidates: a string attribute's candidates beyond those the schema lists (added through the
  API, or discovered), each in a *batch* (``backfills``: the candidates added together, and how far
  their counters are back-filled over the stored reports' ids);
- breakdowns: a schema version's breakdowns (listed at publish, never in the served schema, or
  added later), each numbered in its version; breakdown_counters: per (schema, version, window,
  breakdown, of key, by key) the sums :class:`...shared.breakdowns.BreakdownSums` holds, only
  where not zero; breakdown_estimates: the latest rows of each breakdown per window;
- crowds: per (schema, version, window) the reports stored through relays and directly, and the
  smallest crowd of a relay batch (:class:`CrowdRow`);
- ohttp_keys: the Oblivious HTTP key pairs every node shares (:class:`StoredKey`).

Every window's totals and counters are also added to its schema version's :data:`ROLLUP` window
when they are stored (:mod:`.rollup`). What a report adds to the counters is not the store's to
say: the caller counts (:mod:`..ingest.counting`) inside the transaction it runs
(:meth:`.store.Store.run_tx`), and hands the store the increments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import itemgetter
from typing import TYPE_CHECKING, Iterable, NamedTuple, Sequence, TypeVar

from ...shared.schema import NAME_RE, is_version

if TYPE_CHECKING:
    import numpy as np


class ReportRow(NamedTuple):
    """A validated report as stored."""

    id: str
    schema: str
    version: int
    window: str
    window_end: int  # Unix seconds: retention drops the report once this is past
    values: str  # JSON
    wire: bytes  # the numeric form counting reads (:mod:`.wire`); b"" until packed


# A ReportRow's fields read in C (by map, or as a sort key), by position: its id, its (schema,
# version), its (schema, version, window), its window's end and its numeric form.
ROW_ID, ROW_VERSION, ROW_WINDOW = itemgetter(0), itemgetter(1, 2), itemgetter(1, 2, 3)
ROW_END, ROW_WIRE = itemgetter(4), itemgetter(6)
assert ReportRow._fields[:5] + ReportRow._fields[6:] == ("id", "schema", "version", "window", "window_end", "wire")


def first_of_each_id(rows: Iterable[ReportRow]) -> list[ReportRow]:
    """``rows`` with each id once, the first of an id kept (an id repeated in a batch, or in the
    inbox, is a duplicate: stored and counted once)."""
    rows = list(rows)
    if len(set(map(ROW_ID, rows))) == len(rows):  # most batches repeat no id: no Python step a row
        return rows
    unique: dict[str, ReportRow] = {}
    for row in rows:
        unique.setdefault(row.id, row)
    return list(unique.values())


class TotalRow(NamedTuple):
    """Reports that carried an attribute in a window (an increment, or a stored total)."""

    schema: str
    version: int
    window: str
    attribute: str
    n: int
    window_end: int | None  # Unix seconds; None for the rollup, which never expires


class AmountRow(NamedTuple):
    """What a value key adds up to in a window (an increment, or a stored sum); never zero."""

    schema: str
    version: int
    window: str
    attribute: str
    value: str
    amount: int | float


class BreakdownAmountRow(NamedTuple):
    """One sum of a breakdown's (:class:`...shared.breakdowns.BreakdownSums`) in a window (an
    increment, or a stored sum); never zero. ``of_key``/``by_key`` as the sums key them (``""``
    standing for every report)."""

    schema: str
    version: int
    window: str
    breakdown: int  # its number in the schema version (:class:`StoredBreakdown`)
    of_key: str
    by_key: str
    amount: int | float


class CrowdRow(NamedTuple):
    """How the reports of a window arrived (an increment, or what is stored): ``relayed`` through a
    relay's batch, ``direct`` posted to the aggregator, and ``crowd`` the smallest number of reports
    of the window any one relay batch stored for the first time (DESIGN.md, "Relay and
    amplification"); None while no relay batch stored one."""

    schema: str
    version: int
    window: str
    relayed: int
    direct: int
    crowd: int | None
    # What the refresh computed (:mod:`..estimation.crowds`): the central epsilon of a crowd of
    # ``epsilon_crowd`` at ``epsilon_delta``; stale once the crowd or LDP_SHUFFLE_DELTA moved. Not
    # part of an increment.
    epsilon_crowd: int | None = None
    epsilon_delta: float | None = None
    epsilon_shuffled: float | None = None


# The columns of :class:`CrowdRow` ingest adds (the rest is the refresh's).
CROWD_COUNTS = 6


@dataclass
class Increments:
    """The counter increments of some reports: per window and attribute ``n``, per value its amount,
    per breakdown its sums; per window how they arrived."""

    totals: list[TotalRow] = field(default_factory=list)
    amounts: list[AmountRow] = field(default_factory=list)
    breakdowns: list[BreakdownAmountRow] = field(default_factory=list)
    crowds: list[CrowdRow] = field(default_factory=list)


class StoredKey(NamedTuple):
    """An Oblivious HTTP key pair (X25519, raw 32 bytes each) named by its one-byte ``key_id``;
    ``private_key`` None once deleted after its grace. ``created`` and ``retired`` (None: the
    current key) in Unix seconds."""

    key_id: int
    public_key: bytes
    private_key: bytes | None
    created: int
    retired: int | None


class StoredBreakdown(NamedTuple):
    """A breakdown of a schema version as stored: its number there (in the order listed, then
    added), ``source`` ``listed`` (at publish) or ``added``, when (ISO 8601 UTC). One added later
    is back-filled as a batch of candidates is (:class:`CandidateBatch`): its sums hold the stored
    reports with id up to ``watermark``; None: every report (listed, or back-filled)."""

    id: int
    of: str
    by: str
    source: str
    added_at: str
    batch: int | None = None
    watermark: str | None = None

    @property
    def complete(self) -> bool:
        """Whether its sums count every retained report (so it is estimated)."""
        return self.watermark is None


class CandidateBatch(NamedTuple):
    """Candidates added together (one add), as counting sees them. Their counters hold the supports
    of the stored reports with id up to ``watermark`` (ids compared as text); the back-fill moves
    it forward over the stored reports, and ingest counts a report for them iff its id is at most
    the watermark. ``watermark`` None: back-filled over every retained report, so every report
    counts."""

    batch: int
    attribute: str
    candidates: tuple[str, ...]
    watermark: str | None


@dataclass(frozen=True)
class Known:
    """The counted candidates of one schema version beyond those its schema lists, and its
    breakdowns, as of ``mark`` (a number that changes whenever they or a watermark change)."""

    mark: int
    batches: tuple[CandidateBatch, ...] = ()
    breakdowns: tuple[StoredBreakdown, ...] = ()  # counted by ingest for every report


# The counter key of how many reports a batch being back-filled has counted (per window): a control
# character first, which no prepared candidate holds (they become U+FFFD), so it names no value.
BATCH_N_PREFIX = "\x01n:"


# A damaged attribute's flag in a report's numeric form (:mod:`.wire`), and its integer fields'.
NOT_READ = -1


class WireColumns(NamedTuple):
    """Stored reports of one schema version with an attribute's wire values as numeric columns (what
    the back-fill counts, without a Python object per report): per report the index of its window
    in ``windows`` (whose ends are ``ends``), whether it carries the attribute (or is damaged),
    whether it carries it intact, and each field of the attribute's numeric form
    (:meth:`Mechanism.columns`; meaningless where not intact)."""

    schema: str
    version: int
    windows: tuple[str, ...]
    ends: tuple[int, ...]
    window: np.ndarray
    carried: np.ndarray
    intact: np.ndarray
    fields: dict[str, np.ndarray]


class CandidateRow(NamedTuple):
    """A stored candidate. ``estimated`` False: never counted nor estimated (a discovered string
    still holding U+FFFD). ``complete``: its batch is back-filled; ``deficit``: then, how many of
    the attribute's reports in the rollup it was never counted over (their windows were erased
    before it was added or back-filled): its rollup ``n`` is the attribute's less this."""

    attribute: str
    value: str
    source: str
    added_at: str
    estimated: bool
    rank: int
    batch: int | None
    complete: bool
    deficit: int | None


class Stale(NamedTuple):
    """A window whose estimates are out of date, and the dirty mark it had when read (None: its
    estimates were computed at another confidence level, not changed)."""

    schema: str
    version: int
    window: str
    mark: int | None


@dataclass(frozen=True)
class WindowCounters:
    """One window's counters, read from one snapshot: ``n`` per attribute, amounts per value key;
    for the rollup also each attribute's ``n`` in its smallest retained window (what a memoised
    attribute's rollup interval is made from: its reports in several windows are not independent)."""

    totals: dict[str, int]
    amounts: dict[str, dict[str, int | float]]
    smallest: dict[str, int] = field(default_factory=dict)
    breakdowns: dict[int, dict[tuple[str, str], int | float]] = field(default_factory=dict)  # sums per breakdown


class EstimateRow(NamedTuple):
    """A stored estimate, fields in column order. ``rank`` orders the values of a window as the
    schema lists them."""

    schema: str
    version: int
    window: str
    attribute: str
    value: str
    rank: int
    estimate: float
    estimate_clipped: float
    ci_low: float
    ci_high: float
    n: int
    epsilon: float
    confidence: float
    computed_at: str


class BreakdownEstimateRow(NamedTuple):
    """A stored breakdown row (:class:`...shared.breakdowns.Row`), fields in column order. ``rank``
    orders a window's rows: the breakdown's number times :data:`...shared.breakdowns.MAX_CELLS`
    plus the cell's place (by each value of ``by``, each value of ``of``); ``value`` and
    ``by_value`` are stored keys (a boolean's ``true``/``false``)."""

    schema: str
    version: int
    window: str
    rank: int
    breakdown: int
    value: str
    by_value: str
    estimate: float | None
    estimate_clipped: float | None
    ci_low: float | None
    ci_high: float | None
    by_share: float | None
    n: int
    reason: str | None
    confidence: float
    computed_at: str


Estimated = TypeVar("Estimated", EstimateRow, BreakdownEstimateRow)


def estimates_by_window(rows: Sequence[Estimated]) -> dict[tuple[str, int, str], list[Estimated]]:
    """Estimate (or breakdown) rows grouped by their (schema, version, window), for
    :meth:`.tx.Tx.save_estimates`."""
    out: dict[tuple[str, int, str], list[Estimated]] = {}
    for row in rows:
        out.setdefault((row.schema, row.version, row.window), []).append(row)
    return out


def schema_key_ok(name: object, version: int | None) -> bool:
    """False for a name or version no published schema can have (nothing to look up)."""
    return isinstance(name, str) and NAME_RE.fullmatch(name) is not None and (
        version is None or is_version(version))


@dataclass(frozen=True)
class EstimatesQuery:
    """Which estimates to read: windows ``since``..``until`` (the rollup always), at most ``limit``
    rows from after the position ``after`` (``(window, rank)``, from the previous page)."""

    schema: str
    version: int
    attribute: str | None = None
    since: str | None = None
    until: str | None = None
    limit: int = 10_000
    after: tuple[str, int] | None = None


@dataclass(frozen=True)
class BreakdownsQuery:
    """Which breakdown rows to read: as :class:`EstimatesQuery`, of the breakdowns numbered
    ``breakdowns`` (None: every one)."""

    schema: str
    version: int
    breakdowns: tuple[int, ...] | None = None
    since: str | None = None
    until: str | None = None
    limit: int = 10_000
    after: tuple[str, int] | None = None


@dataclass(frozen=True)
class Activity:
    """What a schema version has received, from its counters, and when it was last estimated."""

    carried: dict[str, int]  # attribute -> reports that carried it, over every window
    windows: int  # retained windows with at least one report
    computed_at: str | None  # latest estimate refresh, ISO 8601 UTC
    pending: bool  # counters changed since the last refresh


class Retention(NamedTuple):
    """Where retention stands, in Unix seconds."""

    cutoff: int | None  # windows that ended at or before it are erased and refused; None: never ran
    oldest_end: int | None  # the end of the oldest window with counters; None: nothing stored


@dataclass(frozen=True)
class Expired:
    """What the retention job removed."""

    reports: int
    windows: int  # windows whose counters, estimates and dirty marks went (the rollup keeps their sums)
