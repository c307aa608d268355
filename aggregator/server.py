"""``ldp-telemetry serve``: the aggregator under gunicorn, configured from our settings.

No access log: gunicorn's would record client IP addresses and user agents, which the
aggregator promises never to keep. Each worker process builds its own app (no preloading), so
the scheduler threads start after the fork; the jobs themselves make sure only one worker runs
them at a time (:mod:`.jobs`).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from typing import Any

from gunicorn import glogging
from gunicorn.app.base import BaseApplication

# gunicorn's one error line with a client address: "Invalid request from ip=1.2.3.4: ..." (a
# malformed request); an IPv6 address has colons of its own, hence the look-ahead for ": ".
_ADDRESS = re.compile(r"ip=(?:\S*?(?=: )|\S+)")


def _redact_address(record: logging.LogRecord) -> bool:
    message = record.getMessage()
    if "ip=" in message:
        record.msg, record.args = _ADDRESS.sub("ip=-", message), ()
    return True


class NoClientAddressLogger(glogging.Logger):
    """gunicorn's logger, with client addresses redacted from its error log."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        if _redact_address not in self.error_log.filters:
            self.error_log.addFilter(_redact_address)


class AggregatorServer(BaseApplication):
    def __init__(self, config: dict[str, Any], *, host: str, port: int, workers: int, timeout: int = 60):
        self.app_config = config
        self.options = {
            "bind": f"{host}:{port}",
            "workers": workers,
            "worker_class": "sync",
            "timeout": timeout,
            "graceful_timeout": 10,
            "accesslog": None,
            "logger_class": NoClientAddressLogger,  # a malformed request's error line names no address
            "control_socket_disable": True,  # gunicorn 27 would create a control socket in $HOME
            "proc_name": "ldp-telemetry",
            "child_exit": child_exit,
        }
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)

    def load(self):  # type: ignore[no-untyped-def]
        from . import create_app

        return create_app(self.app_config)


def child_exit(server: Any, worker: Any) -> None:
    """gunicorn hook: forget a dead worker's metrics files (also used by deploy/gunicorn.conf.py)."""
    # A dead worker's live gauges must not linger in the shared metrics files.
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)


def serve(config: dict[str, Any], *, host: str, port: int, workers: int) -> None:
    """Run the aggregator until stopped (SIGINT/SIGTERM). ``config`` must already be checked."""
    metrics_dir = None
    if workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from .metrics import share_between_processes

        metrics_dir = tempfile.mkdtemp(prefix="ldp-telemetry-metrics-")
        share_between_processes(metrics_dir)
    try:
        AggregatorServer(config, host=host, port=port, workers=workers).run()
    finally:
        if metrics_dir:
            shutil.rmtree(metrics_dir, ignore_errors=True)
