"""The SQLite store's inbox: acknowledged on a durable append, counted exactly once when folded in,
also when the process that acknowledged died first, and nothing of it left once folded."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest
from conftest import settle, read, write, ADMIN_TOKEN, APP_USAGE, expected_counters, publish, store_of, stored_counters

from ldp_telemetry.aggregator import create_app
from ldp_telemetry.aggregator.ingest import inbox
from ldp_telemetry.aggregator.store import ReportRow
from ldp_telemetry.shared import parse_schema, randomize

SCHEMA = parse_schema(APP_USAGE)
TODAY = randomize(SCHEMA, {"dark_mode": True, "os": "linux"})["window"]
RECORDS = [{"dark_mode": i % 3 == 0, "os": SCHEMA.attribute("os").categories[i % 4]} for i in range(4)]


def make_reports(count: int) -> list[dict]:
    return [randomize(SCHEMA, RECORDS[i % 4]) for i in range(count)]


def counters(app, reports: list[dict]) -> dict:
    return stored_counters(app, APP_USAGE, [r["window"] for r in reports])


def segments(db: str) -> list[Path]:
    return sorted(Path(db + "-inbox").glob("*" + inbox.SUFFIX))


def write_segment(db: str, name: str, reports: list[dict], tail: str = "") -> Path:
    """A segment as a process that died would have left it (no lock held on it)."""
    from ldp_telemetry.aggregator.ingest.batch import stored_json
    from ldp_telemetry.shared.windows import window_end

    folder = Path(db + "-inbox")
    folder.mkdir(exist_ok=True)
    rows = [ReportRow(r["id"], r["schema"], r["version"], r["window"],
                      int(window_end(r["window"], SCHEMA.window).timestamp()), stored_json(r["values"]), b"")
            for r in reports]
    path = folder / (name + inbox.SUFFIX)
    path.write_text("".join(inbox._line(row) for row in rows) + tail)
    return path


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "aggregator.db")


@pytest.fixture
def slow_fold(monkeypatch) -> None:
    """The folding thread waits a minute between folds, so that a test sees what is not folded
    yet however loaded the machine is (settle() still folds at once)."""
    monkeypatch.setattr(inbox, "FOLD_INTERVAL", 60.0)


def sqlite_app(db: str, **config):
    return create_app({"LDP_ADMIN_TOKEN": ADMIN_TOKEN, "LDP_SCHEDULER": False, "TESTING": True, "LDP_DB": db,
                       **config})


def _post_then_die(db: str, reports: list[dict], answered) -> None:
    app = sqlite_app(db)
    response = app.test_client().post("/api/v1/reports", json={"reports": reports})
    answered.send(response.status_code)  # a pipe: sent before this returns
    os.kill(os.getpid(), signal.SIGKILL)  # before the folding thread's first turn


def test_reports_acknowledged_by_a_killed_process_are_counted_when_the_next_app_starts(db, slow_fold):
    publish(sqlite_app(db).test_client())
    reports = make_reports(50)
    context = multiprocessing.get_context("fork")
    answer, answered = context.Pipe(duplex=False)
    child = context.Process(target=_post_then_die, args=(db, reports, answered))
    child.start()
    child.join(30)
    assert child.exitcode == -signal.SIGKILL and answer.poll(5) and answer.recv() == 202
    assert len(segments(db)) == 1  # acknowledged, not yet counted: it is on disk
    app = sqlite_app(db)  # starting settles what dead processes left
    assert counters(app, reports) == expected_counters(APP_USAGE, reports)
    assert segments(db) == []


def test_a_segment_folded_twice_counts_once_and_says_so_in_metrics(db):
    app = sqlite_app(db)
    client = app.test_client()
    publish(client)
    reports = make_reports(30)
    assert client.post("/api/v1/reports", json={"reports": reports}).json == {"accepted": 30, "duplicates": 0}
    settle(app)
    before = counters(app, reports)
    assert before == expected_counters(APP_USAGE, reports)
    write_segment(db, "crashed-after-its-commit", reports)  # the same reports again, as after a crash
    settle(app)
    assert counters(app, reports) == before
    assert "ldp_reports_duplicate_late_total 30.0" in client.get("/metrics").get_data(as_text=True)


def test_a_retry_answered_before_the_fold_is_a_duplicate_in_the_answer(db, slow_fold):
    app = sqlite_app(db)
    client = app.test_client()
    publish(client)
    reports = make_reports(5)
    first = client.post("/api/v1/reports", json={"reports": reports}).json
    again = client.post("/api/v1/reports", json={"reports": reports}).json
    # Before the fold: this process still holds the ids.
    assert (first, again) == ({"accepted": 5, "duplicates": 0}, {"accepted": 0, "duplicates": 5})
    assert counters(app, reports) == expected_counters(APP_USAGE, reports)


def test_a_line_cut_by_a_crash_is_left_out_and_a_damaged_one_skipped(db):
    app = sqlite_app(db)
    publish(app.test_client())
    reports = make_reports(4)
    write_segment(db, "cut", reports[:3], tail="\t".join(["x" * 20, "app-usage", "1"]))  # no newline: cut
    # Lines that pass the field check but cannot be counted: values that are no JSON object, a
    # schema that was never published. Each is left out; the segment's good lines are counted.
    damaged = ["not\ta\treport\n", f"{'d' * 20}\tapp-usage\t1\t{TODAY}\t0\t{{not json\n",
               f"{'e' * 20}\tapp-usage\t1\t{TODAY}\t0\t[1]\n", f"{'f' * 20}\tnever-published\t1\t{TODAY}\t0\t{{}}\n",
               # JSON objects the schema does not take: an unknown attribute, a wrong wire value.
               # They made counting raise, and the whole segment was set aside as .bad.
               f"{'g' * 20}\tapp-usage\t1\t{TODAY}\t0\t{{\"nope\":true}}\n",
               f"{'h' * 20}\tapp-usage\t1\t{TODAY}\t0\t{{\"dark_mode\":\"yes\",\"os\":\"linux\"}}\n"]
    write_segment(db, "damaged", reports[3:], tail="".join(damaged))
    settle(app)
    assert counters(app, reports) == expected_counters(APP_USAGE, reports)
    assert segments(db) == [] and not list(Path(db + "-inbox").glob("*.bad"))


def test_too_many_unfolded_reports_answer_503_and_store_nothing(db, monkeypatch):
    app = sqlite_app(db)
    client = app.test_client()
    publish(client)
    monkeypatch.setattr(inbox, "MAX_UNFOLDED", 10)
    response = client.post("/api/v1/reports", json={"reports": make_reports(11)})
    assert response.status_code == 503 and response.headers["Retry-After"] == "1"
    assert read(store_of(app), "footprint")["reports"] == 0 and segments(db) == []
    assert client.post("/api/v1/reports", json={"reports": make_reports(10)}).status_code == 202


def test_segments_are_deleted_once_folded_and_readable_only_by_the_server(db, slow_fold):
    app = sqlite_app(db)
    client = app.test_client()
    publish(client)
    assert client.post("/api/v1/reports", json={"reports": make_reports(3)}).status_code == 202
    written = segments(db)
    assert len(written) == 1 and written[0].stat().st_mode & 0o777 == 0o600
    assert Path(db + "-inbox").stat().st_mode & 0o777 == 0o700
    settle(app)
    assert segments(db) == [] and not written[0].exists()


@contextlib.contextmanager
def write_lock_held(db: str) -> Iterator[None]:
    """Another process's writer holding the database's write lock (past the fold's wait)."""
    import sqlite3

    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        holder.rollback()
        holder.close()


def test_a_fold_that_finds_the_database_locked_is_tried_again_and_counts_once(db, caplog):
    app = sqlite_app(db)
    client = app.test_client()
    publish(client)
    store_of(app).db.busy_timeout = 0.2
    with write_lock_held(db):
        reports = make_reports(20)
        assert client.post("/api/v1/reports", json={"reports": reports}).status_code == 202
        deadline = time.monotonic() + 30
        while "folding the inbox failed" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.05)  # until the folding thread has tried, and failed, at least once
        assert "folding the inbox failed" in caplog.text and len(segments(db)) == 1
    settle(app)
    assert counters(app, reports) == expected_counters(APP_USAGE, reports)
    assert segments(db) == []


def test_a_dead_process_segment_that_meets_a_busy_database_waits_and_is_counted_once(db, caplog):
    # Issue 21: a busy database made the fold of a dead process's segment look like damage, and
    # the segment was set aside for good (0 of 50 acknowledged reports ever counted).
    from ldp_telemetry.aggregator.store import StoreBusy

    publish(sqlite_app(db).test_client())
    reports = make_reports(50)
    orphan = write_segment(db, "left-by-a-killed-worker", reports)
    with write_lock_held(db):
        app = sqlite_app(db)  # a start that cannot count it yet still starts
        assert "could not yet count" in caplog.text
        store_of(app).db.busy_timeout = 0.2
        with pytest.raises(StoreBusy):
            app.extensions["ldp"]["writer"].settle(wait=False)
        assert segments(db) == [orphan] and not list(Path(db + "-inbox").glob("*.bad"))
    settle(app)
    assert counters(app, reports) == expected_counters(APP_USAGE, reports)
    assert segments(db) == []


def test_a_fold_that_fails_part_way_counts_no_late_duplicate_when_tried_again(db, slow_fold, monkeypatch):
    # Issue 27, finding 5: the retry folded the committed first chunk again and counted its reports
    # as found stored (late duplicates), though each was sent once.
    import sqlite3

    from ldp_telemetry.aggregator.ingest import writer
    from ldp_telemetry.aggregator.store import StoreError

    monkeypatch.setattr(writer, "FOLD_CHUNK", 10)
    app = sqlite_app(db)
    client = app.test_client()
    publish(client)
    reports = make_reports(30)
    refused = sorted(r["id"] for r in reports)[15]  # in the second chunk of ten, in id order
    with sqlite3.connect(db) as conn:  # a fault the database raises: a chunk's transaction fails
        conn.execute(f"CREATE TRIGGER refuse BEFORE INSERT ON reports WHEN NEW.id = '{refused}' "
                     "BEGIN SELECT RAISE(ABORT, 'refused'); END")
    assert client.post("/api/v1/reports", json={"reports": reports}).json == {"accepted": 30, "duplicates": 0}
    with pytest.raises(StoreError):
        settle(app)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM reports").fetchone() == (10,)  # the first chunk is in
        conn.execute("DROP TRIGGER refuse")
    settle(app)
    assert counters(app, reports) == expected_counters(APP_USAGE, reports)
    assert "ldp_reports_duplicate_late_total 0.0" in client.get("/metrics").get_data(as_text=True)


def test_a_dead_process_segment_folded_part_way_is_finished_by_the_same_process_and_counted_once(db, slow_fold,
                                                                                                   monkeypatch):
    # Issue 27, finding 5: the process whose fold of a dead process's segment failed part-way let go
    # of it, and another process folded it, counting the committed chunk's reports as late duplicates.
    import sqlite3

    from ldp_telemetry.aggregator.ingest import writer
    from ldp_telemetry.aggregator.store import StoreError

    monkeypatch.setattr(writer, "FOLD_CHUNK", 10)
    first = sqlite_app(db)
    publish(first.test_client())
    reports = make_reports(30)
    refused = sorted(r["id"] for r in reports)[15]
    with sqlite3.connect(db) as conn:
        conn.execute(f"CREATE TRIGGER refuse BEFORE INSERT ON reports WHEN NEW.id = '{refused}' "
                     "BEGIN SELECT RAISE(ABORT, 'refused'); END")
    write_segment(db, "left-by-a-killed-worker", reports)
    with pytest.raises(StoreError):
        first.extensions["ldp"]["writer"].settle(wait=False)  # the first chunk committed, the second refused
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TRIGGER refuse")
    second = sqlite_app(db)  # another process starting: it folds what dead processes left
    second.extensions["ldp"]["writer"].settle(wait=False)
    settle(first)
    assert counters(first, reports) == expected_counters(APP_USAGE, reports)
    assert segments(db) == []
    for app in (first, second):
        assert "ldp_reports_duplicate_late_total 0.0" in app.test_client().get("/metrics").get_data(as_text=True)


def _post_with_a_full_disk(db: str, big: list[dict], small: list[dict], answers) -> None:
    import resource

    app = sqlite_app(db)
    client = app.test_client()
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) or is cut short
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))  # files of this process: at most 4 KiB
    first = client.post("/api/v1/reports", json={"reports": big})
    second = client.post("/api/v1/reports", json={"reports": small})
    answers.send((first.status_code, second.status_code, [p.name for p in segments(db)]))


def test_an_append_the_disk_cuts_short_is_a_503_and_leaves_nothing_behind(db, slow_fold):
    publish(sqlite_app(db).test_client())
    big, small = make_reports(80), make_reports(3)  # ~8 KiB of lines, then ~0.3 KiB
    context = multiprocessing.get_context("fork")
    answer, answers = context.Pipe(duplex=False)
    child = context.Process(target=_post_with_a_full_disk, args=(db, big, small, answers))
    child.start()
    child.join(60)
    assert answer.poll(5)
    first, second, left = answer.recv()
    # The cut segment is deleted (it held nothing acknowledged); the next append gets a new one.
    assert (first, second, len(left)) == (503, 202, 1)
    app = sqlite_app(db)
    assert counters(app, big + small) == expected_counters(APP_USAGE, small)


def _settle_at_once(db: str, start, late) -> None:
    writer, found = another_process(db)
    start.wait(30)
    writer.settle()
    late.send(sum(found))


def test_processes_settling_at_once_fold_a_dead_process_segment_exactly_once(db):
    publish(sqlite_app(db).test_client())
    reports = make_reports(3000)
    write_segment(db, "left-by-a-dead-worker", reports)
    context = multiprocessing.get_context("fork")
    start = context.Event()
    pipes = [context.Pipe(duplex=False) for _ in range(4)]
    children = [context.Process(target=_settle_at_once, args=(db, start, sender)) for _, sender in pipes]
    for child in children:
        child.start()
    start.set()
    late = [receiver.recv() if receiver.poll(60) else None for receiver, _ in pipes]
    for child in children:
        child.join(30)
    # One of them took the segment's lock and folded it; the others found it locked, then gone.
    # Had two folded it, the second would have found every report stored (3000 late duplicates).
    assert late == [0, 0, 0, 0] and all(child.exitcode == 0 for child in children)
    assert segments(db) == []
    assert counters(sqlite_app(db), reports) == expected_counters(APP_USAGE, reports)


def test_a_starting_app_folds_what_dead_processes_left_without_waiting_for_live_ones(db, slow_fold, caplog):
    # A worker restarted beside a busy one must serve at once, not wait for the busy one's fold.
    live = sqlite_app(db)
    client = live.test_client()
    publish(client)
    reports = make_reports(5)
    assert client.post("/api/v1/reports", json={"reports": reports}).status_code == 202  # held by `live`
    dead = make_reports(4)
    write_segment(db, "left-by-a-dead-worker", dead)
    sqlite_app(db)
    assert "were not folded within" not in caplog.text  # it did not wait for `live`'s segment
    assert len(segments(db)) == 1  # the dead one's was folded, the live one's is still its own
    settle(live)
    assert counters(live, reports + dead) == expected_counters(APP_USAGE, reports + dead)


# -- segments that cannot be deleted, drafts left by a kill (issue 21, item 12) -----------------


@contextlib.contextmanager
def immutable(path: Path):
    """``path`` made immutable (``chattr +i``: not even root may delete it, or, for a folder, any
    entry of it), and mutable again after. Skips the test where the file system or the
    privileges do not allow it: no other honest way makes an unlink fail for root."""
    try:
        subprocess.run(["chattr", "+i", str(path)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot make {path} immutable here (chattr +i: {getattr(exc, 'stderr', exc)!r})")
    try:
        yield path
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def late(app) -> str:
    text = app.test_client().get("/metrics").get_data(as_text=True)
    return next(line for line in text.splitlines() if line.startswith("ldp_reports_duplicate_late_total "))


def another_process(db: str):
    """The writer of another process on ``db`` (as a worker has it), and the late duplicates it finds."""
    from ldp_telemetry.aggregator import open_database
    from ldp_telemetry.aggregator.ingest.writer import ReportWriter

    database = open_database(db)
    found: list[int] = []
    return ReportWriter(database.store, database.writer.counting, found.append), found


def test_a_folded_segment_whose_folder_forbids_deleting_it_is_emptied_and_never_counted_again(db, slow_fold, caplog):
    # Issue 21: a folded segment that could not be deleted was folded again at every refresh, by
    # every process: counts stayed exact, but the late duplicates grew without end.
    app = sqlite_app(db)
    client = app.test_client()
    publish(client)
    reports = make_reports(30)
    assert client.post("/api/v1/reports", json={"reports": reports}).status_code == 202
    with immutable(Path(db + "-inbox")):  # nothing in it can be deleted (as a read-only folder)
        for _ in range(3):  # refreshes
            settle(app)
        other, found = another_process(db)
        for _ in range(3):  # its refreshes
            other.settle()
        assert (late(app), sum(found)) == ("ldp_reports_duplicate_late_total 0.0", 0)
        (left,) = segments(db)
        assert left.stat().st_size == 0  # folded, then emptied where it could not be deleted
        assert caplog.text.count("cannot delete the folded inbox segment") == 2  # once per process
    assert counters(app, reports) == expected_counters(APP_USAGE, reports)
    settle(app)  # deletable again: it goes
    assert segments(db) == []


def test_a_folded_segment_that_can_be_neither_emptied_nor_deleted_is_counted_late_at_most_once(db, slow_fold):
    app = sqlite_app(db)
    client = app.test_client()
    publish(client)
    reports = make_reports(30)
    assert client.post("/api/v1/reports", json={"reports": reports}).status_code == 202
    (segment,) = segments(db)
    with immutable(segment):
        for _ in range(3):
            settle(app)
        # The process that folded it remembers it (by name and inode) and never folds it again.
        assert late(app) == "ldp_reports_duplicate_late_total 0.0"
        # Another process finds its reports stored once, and then remembers it too.
        other, found = another_process(db)
        for _ in range(3):
            other.settle()
        assert found == [30]
        assert segments(db) == [segment]
    assert counters(app, reports) == expected_counters(APP_USAGE, reports)
    settle(app)
    assert segments(db) == []


def test_a_draft_left_by_a_killed_process_is_deleted_once_it_is_old_and_unlocked(db):
    # A process killed between creating a segment's draft and naming it left a 0-byte *.draft for
    # good. A draft never holds an acknowledged report (appends go to the named segment only).
    import fcntl

    app = sqlite_app(db)
    folder = Path(db + "-inbox")
    folder.mkdir(exist_ok=True)
    old, fresh, held = (folder / f"{name}.draft" for name in ("old", "fresh", "held"))
    for draft in (old, fresh, held):
        draft.touch()
    an_hour_ago = time.time() - 3600
    for draft in (old, held):
        os.utime(draft, (an_hour_ago, an_hour_ago))
    fd = os.open(held, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a live process is making this one
    try:
        settle(app)
        assert sorted(p.name for p in folder.glob("*.draft")) == ["fresh.draft", "held.draft"]
    finally:
        os.close(fd)
    settle(app)
    assert sorted(p.name for p in folder.glob("*.draft")) == ["fresh.draft"]  # a moment old: left alone
