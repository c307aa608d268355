"""Background jobs: the estimate refresh every ``LDP_ESTIMATE_INTERVAL`` s, retention hourly, and
the back-fill of added candidates every few seconds (and at once after an add, :func:`soon`),
the discovery of strings hourly, and hourly the deletion of the private halves of Oblivious HTTP
keys past their grace (:func:`.ohttp_keys.forget_expired`).

APScheduler 3 runs them in a thread of each worker process, started only when
``LDP_SCHEDULER`` is on (tests build the app without threads and call the job functions).
Under ``serve --workers N`` every worker has a scheduler, but only the *leader* runs the jobs:
the process holding the store's jobs lock (:meth:`Store.lead`), which goes when that process
dies, so the next worker to try becomes the leader and exactly one process runs the jobs at any
time. (A refresh that runs beside another, e.g. an admin's manual one, never overwrites newer
estimates: see :mod:`.estimation.refresh`.)
"""

from __future__ import annotations

import atexit
from datetime import timezone
from typing import Callable

from apscheduler.schedulers.background import BackgroundScheduler
from flask import Flask

from . import context, ohttp_keys, retention
from .estimation import refresh
from .questions import backfill, discovery

RETENTION_INTERVAL = 3600.0  # seconds


def run_if_leader(app: Flask, job: Callable[[Flask], object]) -> bool:
    """Run ``job(app)`` if this process leads; False if another process does."""
    if not context.store(app).lead():
        return False
    with app.app_context():
        job(app)
    return True


def init_app(app: Flask) -> None:
    if not app.config["LDP_SCHEDULER"]:
        return
    scheduler = BackgroundScheduler(timezone=timezone.utc, daemon=True)
    # coalesce + max_instances=1: a slow run is never doubled up or replayed in a burst.
    common = {"coalesce": True, "max_instances": 1, "misfire_grace_time": None}
    scheduler.add_job(run_if_leader, "interval", seconds=app.config["LDP_ESTIMATE_INTERVAL"],
                      args=(app, refresh.scheduled), id="refresh", next_run_time=context.system_clock(), **common)
    scheduler.add_job(run_if_leader, "interval", seconds=RETENTION_INTERVAL, args=(app, retention.expire),
                      id="retention", next_run_time=context.system_clock(), **common)
    scheduler.add_job(run_if_leader, "interval", seconds=RETENTION_INTERVAL, args=(app, ohttp_keys.forget_expired),
                      id="ohttp_keys", next_run_time=context.system_clock(), **common)
    scheduler.add_job(run_if_leader, "interval", seconds=backfill.BACKFILL_INTERVAL, args=(app, backfill.backfill),
                      id="backfill", next_run_time=context.system_clock(), **common)
    scheduler.add_job(run_if_leader, "interval", seconds=discovery.DISCOVERY_INTERVAL, args=(app, discover),
                      id="discovery", **common)
    scheduler.start()
    app.extensions["ldp"]["scheduler"] = scheduler
    atexit.register(stop, app)


def discover(app: Flask) -> None:
    """The discovery job (:func:`..discovery.discover_strings`); what it adds is back-filled at once."""
    if discovery.discover_strings(app):
        soon(app, "backfill")


def soon(app: Flask, job: str) -> None:
    """Run the scheduled job ``job`` now rather than at its next time (if this process schedules
    jobs; the leader among the processes runs it)."""
    scheduler = app.extensions["ldp"].get("scheduler")
    if scheduler is not None and scheduler.running:
        scheduler.modify_job(job, next_run_time=context.system_clock())


def stop(app: Flask) -> None:
    """Stop the scheduler (if any) and give up leadership."""
    scheduler = app.extensions["ldp"].get("scheduler")
    if scheduler is not None and scheduler.running:
        scheduler.shutdown(wait=False)
    context.store(app).resign()
