"""From a true record to a randomised report: the one path both ``record()`` and a pending
record take, so that the schema, the window, the ledger and the coins are chosen the same way."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any, Callable, Mapping

from ldp_telemetry.shared import windows
from ldp_telemetry.shared.reports import encode_report
from ldp_telemetry.shared.schema import Schema, is_number

from .ledger import Ledger
from .schemas import SchemaSource

QUEUED = "queued"
LOG = logging.getLogger("ldp_telemetry.client")


class RecordResult:
    """What :meth:`TelemetryClient.record` did: ``queued`` or not, and why (``reason``).

    True in a boolean context when the report was queued. ``pending`` when the record waits in
    memory for its schema (it is randomised, or dropped, when the schema arrives). ``window`` is
    the window the report counts in (None while pending).
    """

    __slots__ = ("queued", "reason", "window", "pending")

    def __init__(self, queued: bool, reason: str, window: str | None = None, *, pending: bool = False):
        self.queued = queued
        self.reason = reason
        self.window = window
        self.pending = pending

    def __bool__(self) -> bool:
        return self.queued

    def __repr__(self) -> str:
        return (f"RecordResult(queued={self.queued!r}, reason={self.reason!r}, window={self.window!r}"
                + (", pending=True)" if self.pending else ")"))


class Recorder:
    """Randomises records under the schema :class:`SchemaSource` holds, within the :class:`Ledger`."""

    def __init__(self, source: SchemaSource, ledger: Ledger, device_secret: bytes | None,
                 clock: Callable[[], datetime] | None):
        self._source = source
        self._ledger = ledger
        self._secret = device_secret
        self._clock = clock
        self._bounded: tuple[Schema | None, list[tuple[str, float, float]]] = (None, [])
        self._clip_warned: set[str] = set()

    def now(self) -> datetime | None:
        """The injected clock's time, or None for the real UTC now (cheaper than asking for it)."""
        return self._clock() if self._clock is not None else None

    def make(self, values: Mapping[str, Any], moment: datetime | None) -> tuple[dict[str, Any] | None, RecordResult]:
        """The report of ``values`` made at ``moment`` (None: now) with the ledger's claim on its
        window, or None and why not. ``ValueError`` naming the attribute (never the value) when
        the record fits no schema in use; the caller :meth:`Ledger.release`\\ s the claim if it
        cannot queue the report."""
        schema, truth = self._source.fitting(values)
        self._warn_if_clipped(schema, values)  # as the app gave them: a histogram's truth is a bucket by now
        window = windows.current_window(schema.window, moment)
        reason = self._ledger.claim(schema.name, window, schema.epsilon)
        if reason is not None:
            return None, RecordResult(False, reason, window)
        try:
            report = encode_report(schema, truth, window, device_secret=self._secret)
        except ValueError:
            self._ledger.release(schema.name, window)
            raise
        except Exception as exc:  # noqa: BLE001 -- the schema's numbers failed, not the app's record
            # Only the type is told: the text of an error inside an encoder could quote a true value.
            self._ledger.release(schema.name, window)
            return None, RecordResult(False, f"schema {schema.name!r} version {schema.version} cannot encode "
                                             f"this record ({type(exc).__name__}): nothing recorded", window)
        return report, RecordResult(True, QUEUED, window)

    def _warn_if_clipped(self, schema: Schema, values: Mapping[str, Any]) -> None:
        """Log once per attribute that a number outside its range (a numeric attribute's ``range``,
        a histogram's first and last edge) is clipped to the nearest end on the device: the report
        is valid and counts there, which an app that sent 42 for a range of [0, 10] should hear
        about. The line names the attribute and its range, never the value."""
        if self._bounded[0] is not schema:  # computed once per schema, not per record
            self._bounded = (schema, [(a.name, *(a.range or (a.edges[0], a.edges[-1])))
                                      for a in schema.attributes if a.range or a.edges])
        for name, lo, hi in self._bounded[1]:
            value = values.get(name)
            if name not in self._clip_warned and is_number(value) and not lo <= value <= hi:
                self._clip_warned.add(name)
                LOG.warning("a value of %r outside its range [%s, %s] was clipped to the nearest end on the device "
                            "(said once per attribute)", name, lo, hi)
