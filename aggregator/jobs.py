"""Background jobs: the estimate refresh every ``LDP_ESTIMATE_INTERVAL`` s, and retention hourly.

APScheduler 3 runs them in a thread of each worker process, started only when
``LDP_SCHEDULER`` is on (tests build the app without threads and call the job functions).
Under ``serve --workers N`` every worker has a scheduler, but only the *leader* runs the jobs:
the worker holding an exclusive ``flock`` on ``<db>.jobs.lock``. The kernel drops the lock when
that process dies, and the next worker to try becomes the leader, so exactly one process runs
the jobs at any time without any lease to expire. (The refresh is one ``BEGIN IMMEDIATE``
transaction besides, so even an admin's manual refresh just takes its turn.)
"""

from __future__ import annotations

import atexit
import fcntl
import os
import threading
from datetime import timezone
from typing import Callable

from apscheduler.schedulers.background import BackgroundScheduler
from flask import Flask

from . import context, estimation

RETENTION_INTERVAL = 3600.0  # seconds


class Leadership:
    """An exclusive lock on a file, held from the first success until the process ends."""

    def __init__(self, path: str):
        self.path = path
        self._fd: int | None = None
        self._mutex = threading.Lock()

    def held(self) -> bool:
        """True if this process is (or now becomes) the leader."""
        with self._mutex:
            if self._fd is None:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    return False
                self._fd = fd
            return True

    def release(self) -> None:
        with self._mutex:
            if self._fd is not None:
                os.close(self._fd)  # closing the descriptor drops the flock
                self._fd = None


def leadership(app: Flask) -> Leadership:
    return app.extensions["ldp"].setdefault("leadership", Leadership(context.store(app).path + ".jobs.lock"))


def run_if_leader(app: Flask, job: Callable[[Flask], object]) -> bool:
    """Run ``job(app)`` if this process leads; False if another process does."""
    if not leadership(app).held():
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
                      args=(app, estimation.refresh), id="refresh", next_run_time=context.system_clock(), **common)
    scheduler.add_job(run_if_leader, "interval", seconds=RETENTION_INTERVAL, args=(app, estimation.delete_expired_reports),
                      id="retention", next_run_time=context.system_clock(), **common)
    scheduler.start()
    app.extensions["ldp"]["scheduler"] = scheduler
    atexit.register(stop, app)


def stop(app: Flask) -> None:
    """Stop the scheduler (if any) and give up leadership."""
    scheduler = app.extensions["ldp"].get("scheduler")
    if scheduler is not None and scheduler.running:
        scheduler.shutdown(wait=False)
    leadership(app).release()
