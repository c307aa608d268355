"""What SQLite holds in a worker: bounded for the whole process, however many threads read.

Every thread that reads or folds through the SQLite store has its own connection with its own page
cache (``CACHE_KIB``); the folding thread, the scheduler's threads and a request's refresh each
filled one as the database outgrew it (issue 27, finding 5: the soak's growing workers).
"""

from __future__ import annotations

import ctypes
import sqlite3
import threading

import _sqlite3
import pytest

from ldp_telemetry.aggregator import open_database
from ldp_telemetry.aggregator.store import sqlite_connection

_sqlite = ctypes.CDLL(_sqlite3.__file__)
_sqlite.sqlite3_memory_used.restype = ctypes.c_int64
MIB = 2**20
TABLE_MIB = 12  # the table every thread reads whole
THREADS = 4


@pytest.fixture
def heap_limit_restored():
    yield
    sqlite3.connect(":memory:").execute("PRAGMA soft_heap_limit = 0")  # process-wide: not left to other tests


def test_the_page_caches_of_all_threads_stay_within_the_heap_limit(tmp_path, monkeypatch, heap_limit_restored):
    monkeypatch.setattr(sqlite_connection, "HEAP_LIMIT_KIB", 4 * 1024)
    path = str(tmp_path / "big.db")
    store = open_database(path).store
    store.migrate()
    with sqlite3.connect(path) as conn:  # stored reports, written behind the store's back: quicker
        conn.executemany('INSERT INTO reports (id, schema, version, "window", window_end, "values") '
                         "VALUES (hex(randomblob(16)), 'big', 1, '2026-11-28', 0, hex(randomblob(500)))",
                         [()] * (TABLE_MIB * 1000))
    read, done = threading.Barrier(THREADS + 1), threading.Event()
    # What other connections of this process hold already (earlier tests' threads): not this test's.
    before = _sqlite.sqlite3_memory_used()

    def read_all() -> None:
        # Counts every table: reads every page of the reports through this thread's connection.
        store.run_tx("footprint", lambda tx: tx.footprint(), write=False)
        read.wait()
        done.wait()  # the connection (and its cache) lives as long as its thread

    threads = [threading.Thread(target=read_all) for _ in range(THREADS)]
    for t in threads:
        t.start()
    read.wait()
    used = _sqlite.sqlite3_memory_used()
    done.set()
    for t in threads:
        t.join()
    store.close()
    # Without a limit each connection keeps the whole table: THREADS x TABLE_MIB more.
    assert used - before < 8 * MIB, (used - before) / MIB
