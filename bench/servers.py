"""The servers a benchmark measures: always on 127.0.0.1, always stopped after.

Two HTTP servers, so that each figure sits beside the ceiling measured on the same one:
``granian`` (what ``ldp-telemetry serve`` runs: granian's RSGI front end and our body-buffering
bridge to the Flask app) and ``gunicorn`` (sync workers running the Flask app directly, the
server the aggregator used before). Both with :data:`WORKERS` worker processes. And the naive
durable app (:mod:`bench.naive`), on gunicorn as issue 26 measured it: what ours must stay ahead of.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import ContextManager, Iterator
from urllib.parse import urlsplit, urlunsplit

import requests

from ldp_telemetry.serving.loop import EVENT_LOOP
from ldp_telemetry.tools.process import ServerProcess

from . import naive as naive_app

ADMIN_TOKEN = "bench-admin-token"
WORKERS = 2
HTTP_SERVERS = ("granian", "gunicorn")
ROOT = Path(__file__).resolve().parent.parent
# The server the multi-node figures use (a database is made for the run and dropped after).
POSTGRES_URL = os.environ.get("LDP_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


@contextmanager
def _running(server: ServerProcess) -> Iterator[str]:
    server.start(timeout=60)
    try:
        yield server.url
    finally:
        server.stop()


def _command(http_server: str, target: str) -> list[str]:
    """``target`` (a module:factory) under ``http_server`` on ``{port}``, WORKERS processes."""
    if http_server == "granian":
        return [sys.executable, "-m", "granian", "--interface", "rsgi", "--loop", EVENT_LOOP, "--factory", "--workers", str(WORKERS),
                "--host", "127.0.0.1", "--port", "{port}", "--no-ws", "--working-dir", str(ROOT), target]
    return [sys.executable, "-m", "gunicorn", "--workers", str(WORKERS), "--worker-class", "sync",
            "--bind", "127.0.0.1:{port}", "--chdir", str(ROOT), f"{target}()"]


def _aggregator_process(db: Path | str, *, synchronous: str = "full", http_server: str = "granian",
                       log_path: Path | None = None) -> ServerProcess:
    env = {"LDP_ADMIN_TOKEN": ADMIN_TOKEN, "LDP_SCHEDULER": "false", "LDP_SYNCHRONOUS": synchronous,
           "LDP_DB": str(db), "PROMETHEUS_MULTIPROC_DIR": None}
    command = None if http_server == "granian" else _command(http_server, "ldp_telemetry.aggregator:create_app")
    return ServerProcess(db, workers=WORKERS, env=env, command=command, log_path=log_path)


def aggregator(db: Path | str, *, synchronous: str = "full", http_server: str = "granian",
               log_path: Path | None = None) -> ContextManager[str]:
    """The aggregator on ``db`` (``log_path`` needed for a PostgreSQL URL); scheduler off, so only
    requests are measured.

    On granian it is ``ldp-telemetry serve`` itself; on gunicorn, the same Flask app under
    gunicorn's sync workers.
    """
    return _running(_aggregator_process(db, synchronous=synchronous, http_server=http_server, log_path=log_path))


@contextmanager
def nodes(location: str, count: int, folder: Path) -> Iterator[list[str]]:
    """``count`` aggregator nodes (``ldp-telemetry serve``, WORKERS each) on the one database at
    ``location``, started at once; their URLs."""
    processes = [_aggregator_process(location, log_path=folder / f"node{i}.log") for i in range(count)]
    with ExitStack() as stack:
        for process in processes:
            stack.callback(process.stop)
        with ThreadPoolExecutor(count) as pool:
            list(pool.map(lambda p: p.start(timeout=60), processes))
        yield [p.url for p in processes]


def _psql(url: str, statement: str) -> None:
    subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", statement], check=True,
                   capture_output=True, text=True, timeout=60)


def create_schema(url: str, name: str) -> None:
    """A PostgreSQL schema (namespace) ``name`` in the database at ``url``: one store each."""
    _psql(url, f"CREATE SCHEMA {name}")


@contextmanager
def postgres_database() -> Iterator[str]:
    """A new database on :data:`POSTGRES_URL` for this run, dropped after; made with the ``psql``
    command (the benchmark imports no database driver). ``RuntimeError`` saying why if it cannot."""
    if shutil.which("psql") is None:
        raise RuntimeError("no psql command here")
    name = f"ldp_bench_{secrets.token_hex(4)}"
    try:
        _psql(POSTGRES_URL, f"CREATE DATABASE {name}")
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(f"cannot create a database at {POSTGRES_URL}: {exc.stderr.strip()}") from None
    parts = urlsplit(POSTGRES_URL)
    try:
        yield urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))
    finally:
        _psql(POSTGRES_URL, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def ceiling(folder: Path, *, http_server: str = "granian") -> ContextManager[str]:
    """:mod:`bench.ceiling` (no database) under ``http_server``, on the same path as the aggregator."""
    target = "bench.ceiling:create_rsgi_app" if http_server == "granian" else "bench.ceiling:create_app"
    return _running(ServerProcess(folder / f"ceiling-{http_server}", command=_command(http_server, target)))


def naive(folder: Path) -> ContextManager[str]:
    """:mod:`bench.naive` (the naive durable app) on gunicorn's sync workers, storing into a SQLite
    file in ``folder`` (the same file each time it is started there)."""
    db = folder / "naive.db"
    return _running(ServerProcess(db, command=_command("gunicorn", "bench.naive:create_app"),
                                  env={naive_app.DB_VARIABLE: str(db)}))


def publish(url: str, schema: dict) -> None:
    response = requests.post(url + "/api/v1/schemas", json=schema,
                             headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30)
    response.raise_for_status()
