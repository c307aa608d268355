"""Ingesting a batch of reports: validate all, then store the new ones exactly once.

The batch is all-or-nothing: every report is validated (the shared validator, then the server's
window policy) before anything is written, and one invalid report rejects the request with a
detail per bad index. Then the writer takes the new ones (:class:`.writer.ReportWriter`): durably
before the answer, each counted exactly once (by :mod:`.counting`), all of the batch or none; an id
repeated in the batch, or already stored, is a duplicate and changes no counter.
A batch names at most :data:`MAX_BATCH_WINDOWS` windows.

These are the exact rules. Most batches are read in one pass by :mod:`.reader` instead, which accepts
only what these accept and stores what they would; it hands every other body to these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Sequence

import msgspec
from flask import Flask

from ...shared.reports import MAX_BATCH_WINDOWS, Report, ReportError, validate_report
from ...shared.windows import LENGTH, window_start
from .. import context
from ..catalog import Catalog
from ..errors import ApiError, detail, refuse_unknown
from ..retention import kept_cutoff, retention_cutoff
from .writer import ReportWriter
from ..store import Layout, ReportRow, first_of_each_id, layout


_encode_json = msgspec.json.Encoder().encode


def stored_json(values: dict[str, Any]) -> str:
    """A report's (validated) values as the store keeps them: compact JSON, in the order received."""
    return _encode_json(values).decode()


@dataclass(frozen=True)
class WindowPolicy:
    """Which windows the server accepts now: not in the future, not past retention."""

    now: datetime
    clock_skew: float  # seconds
    retention_days: float
    erased_through: int | None = None  # the kept retention cutoff (Unix seconds): erased windows

    @property
    def retention_cutoff(self) -> datetime:
        """A window that ended at or before this is past retention (its raw reports are deleted)."""
        return retention_cutoff(self.now, self.retention_days)

    # window name and kind -> its end, or why it is refused; a batch names few distinct windows
    _verdicts: dict[tuple[str, str], int | ReportError] = field(default_factory=dict, compare=False, repr=False)

    def check(self, report: Report) -> int:
        """The window's end (Unix seconds); :class:`ReportError` if the window is not accepted."""
        return self.end(report.window, report.schema.window)

    def end(self, window: str, kind: str) -> int:
        """The end (Unix seconds) of ``window``, a window of ``kind`` (``hour`` or ``day``) whose form
        is checked; :class:`ReportError` if the window is not accepted."""
        key = (window, kind)
        verdict = self._verdicts.get(key)
        if verdict is None:
            verdict = self._verdicts[key] = self._judge(*key)
        if isinstance(verdict, ReportError):
            raise verdict
        return verdict

    def _judge(self, window: str, kind: str) -> int | ReportError:
        start = window_start(window, kind)
        # Before computing the end: the last window of year 9999 has no end a datetime can hold.
        if start > self.now + timedelta(seconds=self.clock_skew):
            return ReportError("window", f"{window} is in the future (server time "
                                         f"{self.now:%Y-%m-%dT%H:%M}Z, allowed clock skew {self.clock_skew:g} s)")
        end = start + LENGTH[kind]
        if end <= self.retention_cutoff or (self.erased_through is not None
                                            and end.timestamp() <= self.erased_through):
            return ReportError("window", f"{window} is older than the retention period "
                                         f"({self.retention_days:g} days)")
        return int(end.timestamp())


def window_policy(app: Flask) -> WindowPolicy:
    """The app's window policy at the app's current time."""
    return WindowPolicy(context.now(app), app.config["LDP_CLOCK_SKEW"], app.config["LDP_RETENTION_DAYS"],
                        kept_cutoff(app))


@dataclass(frozen=True)
class Outcome:
    accepted: int
    duplicates: int


def parse_batch(body: dict[str, Any], catalog: Catalog, policy: WindowPolicy, max_batch: int,
                ) -> tuple[list[Report], list[int]]:
    """Validate a ``{"reports": [...]}`` body: the reports and each one's window end, or :class:`ApiError`."""
    refuse_unknown(body, ("reports",), "field")
    raw = body.get("reports")
    if not isinstance(raw, list) or not raw:
        raise ApiError(400, "reports must be a non-empty list of reports", [detail("reports", "must be a non-empty list")])
    if len(raw) > max_batch:
        raise ApiError(400, f"too many reports in one batch: {len(raw)}, at most {max_batch} (LDP_MAX_BATCH)",
                       [detail("reports", f"at most {max_batch} reports per batch")])
    reports: list[Report] = []
    window_ends: list[int] = []
    errors = []
    for index, obj in enumerate(raw):
        try:
            report = validate_report(obj, catalog.lookup)
            window_ends.append(policy.check(report))
            reports.append(report)
        except ReportError as exc:
            errors.append(detail(exc.field, exc.message, index))
    if errors:
        raise ApiError(400, f"{len(errors)} of {len(raw)} reports are invalid; the batch was rejected and "
                            "nothing was stored", errors)
    windows = {(r.schema.name, r.schema.version, r.window) for r in reports}
    if len(windows) > MAX_BATCH_WINDOWS:
        raise ApiError(400, f"the batch names {len(windows)} distinct windows, at most {MAX_BATCH_WINDOWS}; "
                            "send reports of fewer windows per request",
                       [detail("reports", f"at most {MAX_BATCH_WINDOWS} distinct windows per batch")])
    return reports, window_ends


def report_rows(reports: Sequence[Report], window_ends: Sequence[int]) -> list[ReportRow]:
    """The valid ``reports`` as the store keeps them (their values as JSON and packed: read once,
    here), each id once (the first of an id repeated in the batch wins)."""
    layouts: dict[tuple[str, int], Layout] = {}  # a batch names few schema versions

    def packed(report: Report) -> bytes:
        key = (report.schema.name, report.schema.version)
        if key not in layouts:
            layouts[key] = layout(report.schema)
        return layouts[key].pack(report.values)

    return first_of_each_id(ReportRow(r.id, r.schema.name, r.schema.version, r.window, end, stored_json(r.values),
                                      packed(r)) for r, end in zip(reports, window_ends))


def store_batch(writer: ReportWriter, rows: Sequence[ReportRow], reports: int) -> Outcome:
    """Store the ``rows`` of a batch of ``reports`` valid reports (each id once): counted if new;
    the others are duplicates."""
    accepted = writer.write(rows)
    return Outcome(accepted, reports - accepted)
