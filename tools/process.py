"""``ldp-telemetry serve`` as a child process, for the benchmark, the demo and the tests.

It listens on 127.0.0.1 on a free port, in its own process group so that :meth:`kill` takes
the master and every worker down at once (as a crash would) and nothing outlives :meth:`stop`.
:meth:`start` returns once ``/healthz`` answers 200, and can start it again on the same database.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests


def free_port(prefer: int = 0) -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now: ``prefer`` if it is free (the
    demo's 8000, so its URL stays the same from run to run), else any."""
    for port in ((prefer, 0) if prefer else (0,)):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            found: int = s.getsockname()[1]  # getsockname() answers Any
            return found
    raise RuntimeError("no free port on 127.0.0.1")


class ServerProcess:
    def __init__(self, db_path: Path | str, *, workers: int = 2, env: dict[str, str | None] | None = None,
                 log_path: Path | None = None, command: list[str] | None = None):
        """``db_path`` is the ``--db``: a SQLite file, or a ``postgresql://`` URL (then ``log_path``
        is needed: there is no file to put the log beside). ``env`` is added to this process's
        environment; a ``None`` value removes the variable.

        ``command`` replaces ``ldp-telemetry serve`` with another server listening on
        ``{port}`` (formatted in), e.g. the benchmark's no-database ceiling.
        """
        self.command = command
        self.db = str(db_path)  # as given: Path() would fold a URL's "//"
        self.db_path = Path(db_path)
        self.workers = workers
        self.env = env or {}
        if log_path is None and "://" in self.db:
            raise ValueError("a server on a database URL needs a log_path")
        self.log_path = log_path or self.db_path.with_suffix(".log")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> None:
        """Start the server and wait until ``/healthz`` answers; ``RuntimeError`` with its log if not."""
        env = {k: v for k, v in {**os.environ, **self.env}.items() if v is not None}
        with open(self.log_path, "ab") as log:
            command = [part.format(port=self.port) for part in self.command] if self.command else [
                sys.executable, "-m", "ldp_telemetry.tools.cli", "serve", "--host", "127.0.0.1",
                "--port", str(self.port), "--workers", str(self.workers), "--db", self.db]
            self.process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited with {self.process.returncode}: {self._log_tail()}")
            try:
                if requests.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"the server did not answer /healthz in {timeout:g} s: {self._log_tail()}")

    def stop(self, timeout: float = 15.0) -> None:
        """Graceful stop (SIGTERM), SIGKILL if it takes longer than ``timeout``."""
        if self.process is None:
            return
        _signal_group(self.process, signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        self.kill()

    def kill(self) -> None:
        """``kill -9`` the master and its workers at once."""
        if self.process is None:
            return
        _signal_group(self.process, signal.SIGKILL)
        self.process.wait()

    def _log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-2000:] if self.log_path.exists() else ""


def _signal_group(process: subprocess.Popen[bytes], sig: int) -> None:
    # The whole group: workers must not outlive their master.
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
