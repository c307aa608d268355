"""The store interface: everything the aggregator asks of its database, whatever the database.

Rows cross the boundary as plain tuples and dataclasses; the store's own errors
(:mod:`.errors`) are the only exceptions a caller needs to know. Conceptually (DESIGN.md,
"Storage"):

- schemas: name, version, the derived definition;
- reports: the randomised reports as received (id unique), with their window's end for retention;
- totals: ``n`` once per (schema, version, window, attribute);
- counters: per (schema, version, window, attribute, value) the amount counting
  adds (:mod:`..ingest.counting`: hits for shares; Σ and Σ² for numeric means), only where it is not zero;
- dirty: the windows whose counters changed since their estimates were computed, each with a mark
  that changes at every change, so a refresh computed from a snapshot can tell it is still current;
- estimates: the latest estimate per (schema, version, window, attribute, value);
- candidates: a string attribute's candidates beyond those the schema lists (added through the
  API, or discovered), each in a *batch* (``backfills``: the candidates added together, and how far
  their counters are back-filled over the stored reports' ids).

Every window's totals and counters are also added to its schema version's :data:`ROLLUP` window
when they are stored (:mod:`.rollup`). What a report adds to the counters is not the store's to
say: it is given a :class:`Counts` once (:meth:`Store.count_with`) and applies it to the reports
it finds new, in the transaction that stores them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, NamedTuple, Protocol, Sequence

from ...shared.schema import NAME_RE, is_version
from .errors import StoreUnavailable

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


def first_of_each_id(rows: Iterable[ReportRow]) -> list[ReportRow]:
    """``rows`` with each id once, the first of an id kept (an id repeated in a batch, or in the
    inbox, is a duplicate: stored and counted once)."""
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


@dataclass
class Increments:
    """The counter increments of some reports: per window and attribute ``n``, per value its amount."""

    totals: list[TotalRow] = field(default_factory=list)
    amounts: list[AmountRow] = field(default_factory=list)


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
    """The counted candidates of one schema version beyond those its schema lists, as of ``mark``
    (a number that changes whenever they or a watermark change)."""

    mark: int
    batches: tuple[CandidateBatch, ...] = ()


# The counter key of how many reports a batch being back-filled has counted (per window): a control
# character first, which no prepared candidate holds (they become U+FFFD), so it names no value.
BATCH_N_PREFIX = "\x01n:"


# What a column of :class:`WireColumns` holds where its field is absent or no integer.
NOT_READ = -1


class WireColumns(NamedTuple):
    """Stored reports of one schema version with an attribute's wire values as integer columns (what
    the back-fill counts, without a Python object per report): per report the index of its window
    in ``windows`` (whose ends are ``ends``), whether it carries the attribute (or its values are
    damaged: no JSON object), and each field counting reads (:meth:`Counts.columns`), or
    :data:`NOT_READ`."""

    schema: str
    version: int
    windows: tuple[str, ...]
    ends: tuple[int, ...]
    window: np.ndarray
    carried: np.ndarray
    fields: dict[str, np.ndarray]


class BackfillChunk(NamedTuple):
    """Stored reports of a batch's back-fill read after its ``watermark`` (in ``batch``), up to
    ``through`` (None: every one after it), and what they count for it, per window; ``read``: how
    many reports of each window were read, and ``ids`` theirs (separated by spaces: they are
    split only when reports were stored in the range since)."""

    schema: str
    version: int
    batch: CandidateBatch
    through: str | None
    ids: str
    counted: Increments
    ends: dict[str, int]  # window -> its end (Unix seconds)
    read: dict[str, int]


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


class Counts(Protocol):
    """What stored reports add to the counters (:class:`..ingest.counting.Counting`)."""

    def countable(self, rows: Sequence[ReportRow]) -> list[ReportRow]:
        """``rows`` less those that cannot be counted (damaged), which are then not stored either."""

    def __call__(self, rows: Sequence[ReportRow], known: Mapping[tuple[str, int], Known] | None = None) -> Increments:
        """The increments of ``rows``, summed per counter, the candidates ``known`` per schema
        version included (each batch over the rows it counts)."""

    def backfill(self, rows: Sequence[ReportRow], batch: CandidateBatch) -> Increments:
        """What ``rows`` add to the counters of ``batch``'s candidates alone (the back-fill)."""

    def columns(self, schema: str, version: int, attribute: str) -> tuple[str, ...]:
        """The integer fields of an attribute's wire values that its back-fill counts from."""

    def backfill_columns(self, read: WireColumns, batch: CandidateBatch) -> Increments:
        """:meth:`backfill` of reports read as columns (:class:`WireColumns`)."""


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


def estimates_by_window(rows: Sequence[EstimateRow]) -> dict[tuple[str, int, str], list[EstimateRow]]:
    """Estimate rows grouped by their (schema, version, window), for :meth:`Store.save_estimates`."""
    out: dict[tuple[str, int, str], list[EstimateRow]] = {}
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


class Store(ABC):
    """The aggregator's database. Safe to share between the threads of one process."""

    location: str  # what LDP_DB named, for messages

    # -- lifecycle ---------------------------------------------------------------------------

    @abstractmethod
    def migrate(self) -> None:
        """Bring the tables up to date; safe when several processes start at once."""

    @abstractmethod
    def check(self) -> None:
        """Raise :class:`StoreUnavailable` unless the database answers and is migrated."""

    @abstractmethod
    def close(self) -> None:
        """Close this thread's connection."""

    # -- schemas -----------------------------------------------------------------------------

    @abstractmethod
    def published_at(self, name: str, version: int) -> str | None:
        """When schema ``name`` version ``version`` was published (ISO 8601 UTC), or None."""

    @abstractmethod
    def get_schema(self, name: str, version: int | None = None) -> dict[str, Any] | None:
        """The definition of ``name`` at ``version`` (latest if None), or None if unpublished."""

    @abstractmethod
    def latest_schemas(self) -> list[dict[str, Any]]:
        """The latest version of every schema, by name."""

    @abstractmethod
    def schema_versions(self, name: str) -> list[int]:
        """Every published version of ``name``, oldest first."""

    @abstractmethod
    def publish_schema(self, definition: dict[str, Any], published_at: str) -> str:
        """Store a derived schema: ``"created"``, ``"identical"`` (already stored) or ``"conflict"``."""

    # -- ingest ------------------------------------------------------------------------------

    # Called with how many reports :meth:`ingest` answered as new that were found stored when
    # they were counted (a store that deduplicates after answering: they were sent twice at once).
    on_late_duplicates: Callable[[int], None] = staticmethod(lambda n: None)

    counts: Counts | None = None

    def count_with(self, counts: Counts) -> None:
        """What stored reports add to the counters: given once, before the first ingest or settle."""
        self.counts = counts

    def _counts(self) -> Counts:
        if self.counts is None:
            raise StoreUnavailable("the store was given no counting (Store.count_with)")
        return self.counts

    @abstractmethod
    def ingest(self, rows: Sequence[ReportRow]) -> int:
        """Store the reports whose id is new and add what they count (:attr:`counts`) to the
        counters (and to the rollup), exactly once and all at once, durably before it returns.
        ``rows`` have distinct ids. Returns how many were new, as far as is known now: a store may
        count them a moment later (:meth:`settle`), and pass the ones it then finds stored to
        :attr:`on_late_duplicates`."""

    def settle(self, *, wait: bool = True) -> None:
        """Count every report ingested before this call (in this process or another), so that
        reads of the counters see them. ``wait=False``: only this process's and those of
        processes that died (what a process starting up recovers), without waiting for live
        ones. Nothing to count for a store that counts as it ingests. Settling is also where a
        store takes arrival order out of what it stored since the last settle (DESIGN.md,
        "Storage"): the SQLite store truncates its WAL, the PostgreSQL store rewrites those
        reports (with ``wait=True``; every refresh settles first)."""

    @abstractmethod
    def footprint(self) -> dict[str, int]:
        """Rows per table (full counts: for operators and the bench, never on a request's path)."""

    # -- estimation --------------------------------------------------------------------------

    @abstractmethod
    def stale_windows(self, confidence: float) -> list[Stale]:
        """Windows (the rollup included) whose counters changed since their estimates were
        computed, or whose estimates are at another confidence level; by schema and version."""

    @abstractmethod
    def window_counters(self, schema: str, version: int, windows: Sequence[str]) -> dict[str, WindowCounters]:
        """The counters of ``windows`` of one schema version, all read from one snapshot."""

    @abstractmethod
    def save_estimates(self, rows: Sequence[EstimateRow], done: Sequence[Stale]) -> None:
        """Replace estimates with ``rows``; clear the ``done`` windows' dirty marks unless they
        changed since they were read (then they stay dirty for the next refresh)."""

    # -- retention ---------------------------------------------------------------------------

    @abstractmethod
    def retention(self) -> Retention:
        """The kept retention cutoff and the oldest retained window's end (everything
        acknowledged counted first: what the retention job decides from)."""

    @abstractmethod
    def retention_cutoff(self) -> int | None:
        """The kept retention cutoff alone (None before retention first ran): one cheap read,
        what ingest refuses windows by."""

    @abstractmethod
    def expire(self, cutoff: int) -> Expired:
        """Raise the kept retention cutoff to ``cutoff`` (Unix seconds; it never goes down) and
        delete what belongs to windows that ended at or before it: raw reports, counters,
        estimates, dirty marks. The rollup keeps their sums. From then on :meth:`ingest` stores
        and counts no report of those windows, whatever the clock says."""

    # -- reading -----------------------------------------------------------------------------

    @abstractmethod
    def estimates(self, query: EstimatesQuery) -> list[EstimateRow]:
        """Stored estimates, windows in time order with the rollup last, values in schema order."""

    @abstractmethod
    def estimates_generation(self) -> int:
        """A number that changes whenever stored estimates change (a refresh or retention wrote):
        what is derived from the estimates may be kept until it moves. Cheap: one row."""

    @abstractmethod
    def activity(self, schema: str, version: int) -> Activity:
        """Report counts per attribute, windows, last refresh and pending changes of one schema version."""

    @abstractmethod
    def wire_columns(self, schema: str, version: int, attribute: str, fields: Sequence[str], after: str, limit: int,
                     through: str | None = None) -> tuple[WireColumns, int, str | None]:
        """The stored reports of one schema version with ids above ``after`` (and at most
        ``through``), in id order, at most ``limit``, as ``attribute``'s integer ``fields``
        (:class:`WireColumns`, extracted by the database), with how many were read and the last id:
        a job reads the retained reports a page at a time (``after`` = the last id read, ``""``
        first), never all at once, and never as a Python object per report."""

    # -- candidates --------------------------------------------------------------------------

    @abstractmethod
    def candidates(self, schema: str, version: int) -> list[CandidateRow]:
        """The stored candidates of a schema version, by attribute and rank."""

    @abstractmethod
    def add_candidates(self, schema: str, version: int, attribute: str, values: Sequence[str], *, source: str,
                       estimated: bool, added_at: str, most: int) -> int | None:
        """Store those of ``values`` (prepared, distinct) not stored for the attribute yet, as one
        batch to back-fill (``estimated``) or never counted; how many were new. None, and nothing
        stored, if the attribute would then have more than ``most`` stored candidates. Atomic
        against ingest: a report is counted for them by ingest or by the back-fill, never both."""

    @abstractmethod
    def filling(self) -> list[tuple[str, int, int, int]]:
        """The batches not yet back-filled: ``(schema, version, batch, how many candidates)``."""

    def backfill(self, schema: str, version: int, batch: int, reports: int) -> bool:
        """Count for ``batch``'s candidates the next (at most ``reports``) stored reports of the
        schema version after its watermark, in id order, and move the watermark past them: whether
        the batch is now complete (then its deficit is kept and its windows marked dirty, to be
        estimated). The reports are read and counted first without a lock
        (:meth:`backfill_read`); then one short transaction, which no counting of that schema
        version runs beside, adds what they count and what the reports stored in the range since
        count, and moves the watermark (:meth:`backfill_apply`): each report is counted for them
        once, here or at ingest."""
        chunk = self.backfill_read(schema, version, batch, reports)
        return True if chunk is None else self.backfill_apply(chunk)

    @abstractmethod
    def backfill_read(self, schema: str, version: int, batch: int, reports: int) -> BackfillChunk | None:
        """The next chunk of ``batch``'s back-fill, read and counted without a lock; None if the
        batch is complete (or gone)."""

    @abstractmethod
    def backfill_apply(self, chunk: BackfillChunk) -> bool:
        """Add what ``chunk`` counts (and the reports stored in its range since it was read; less
        those of windows retention erased since) and move the batch's watermark past it, unless
        another back-fill moved it first; whether the batch is complete."""

    # -- scheduled jobs ----------------------------------------------------------------------

    @abstractmethod
    def lead(self) -> bool:
        """True if this process holds (or now takes) the jobs' lock: one process at a time runs
        the scheduled jobs. The lock goes when the process dies or calls :meth:`resign`."""

    @abstractmethod
    def resign(self) -> None:
        """Give up the jobs' lock, if held."""
