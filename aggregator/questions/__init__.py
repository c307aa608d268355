"""Questions added later: what an analyst asks of reports that have already arrived (DESIGN.md,
"Questions added later"). A new question is recorded, a job back-fills its counters from the
retained reports in bounded chunks, exactly once beside ongoing ingest (:mod:`.backfill`), and
from then on ingest counts it as it counts the others. String candidates and breakdowns are such
questions: :mod:`.candidates` records the former (added by the analyst, or found by
:mod:`.discovery`), :mod:`.breakdowns` the latter, and :mod:`.backfill` counts the retained
reports for both, by one watermark mechanism.
"""
