"""The shared privacy core: schema model, mechanisms, estimators, reports.

The client encodes and the aggregator decodes with this same code, so their parameters can never
drift. Nothing here needs more than the standard library, except :mod:`.simulation` (numpy).
"""

from .estimators import DEFAULT_CONFIDENCE, Estimate, estimate, wilson_interval
from .reports import RecordError, Report, ReportError, new_report_id, randomize, validate_record, validate_report
from .schema import Attribute, Schema, parse_schema
from .windows import current_window, window_of, window_start

__all__ = [
    "Attribute",
    "DEFAULT_CONFIDENCE",
    "Estimate",
    "RecordError",
    "Report",
    "ReportError",
    "Schema",
    "current_window",
    "estimate",
    "new_report_id",
    "parse_schema",
    "randomize",
    "validate_record",
    "validate_report",
    "wilson_interval",
    "window_of",
    "window_start",
]
