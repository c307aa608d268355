"""Questions added later: what an analyst asks of reports that have already arrived (DESIGN.md,
"Questions added later"). A new question is recorded, a job back-fills its counters from the
retained reports in bounded chunks, exactly once beside ongoing ingest (:mod:`.backfill`), and
from then on ingest counts it as it counts the others. String candidates are the first such
question:
:mod:`.candidates` records them (added by the analyst, or found by :mod:`.discovery`) and
:mod:`.backfill` counts the retained reports for them.
"""
