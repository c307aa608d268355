"""The inbox: a report is acknowledged once appended to a file, and counted when folded in.

Words: to *fold* a segment is to move its reports into the database (store the ones whose id is
new and count them, in one transaction per chunk) and then delete the segment; to *settle* is to
fold everything acknowledged before the call, in this process or another.

Storing a report in ``reports`` writes a random leaf of the id key, and a SQLite commit holds the
one write lock of the database while it syncs: every request of every worker process waited its
turn for a transaction and an fsync. Instead each process appends the new reports of its requests
to a segment file of its own (sequential writes; under ``full`` durability one ``fdatasync`` for
all the requests that arrived meanwhile, :class:`.groupcommit.GroupCommit`; processes sync side by
side) and answers. A thread of the process then folds the segment into the database: thousands of
reports per transaction, in id order, each stored only if its id is not (``INSERT OR IGNORE``)
and counted only then, in the same transaction. Folding is idempotent, so a segment folded twice
(a crash between the commit and the unlink) counts nothing twice; the reports found already
stored are passed to ``on_duplicates`` (``/metrics``), since the answer could not know them. A fold
that fails part-way (a later chunk's transaction) keeps what its committed chunks stored and found
(:class:`FoldProgress`), so the retry neither folds them again nor reports them as found stored;
a dead process's segment folded part-way stays locked by the process that began it, which retries it.
Whether folds keep failing is kept too (:meth:`Inbox.failing`), for the health check.

Files are ``<db>-inbox/<random>.log``, one line per report (the tab-separated fields of
:class:`..store.ReportRow`; none can hold a tab or a newline), each locked with ``flock`` by the
process appending to it. A segment whose lock can be taken was left by a process that died: it is
folded by whoever finds it (:meth:`Inbox.settle`, which every app start and every refresh calls,
or a folding thread). Segments are deleted once folded, within about half a second of being
written (:data:`FOLD_INTERVAL`): arrival order survives only that long. The database's own WAL
also holds the folds in the order they were made; the store truncates it after folding
(``after_folding``: at once when settling, else at most a second later).

A folded segment is emptied before it is deleted, so one that cannot be deleted (its folder made
read-only) is never folded again, by anyone; one that can be neither emptied nor deleted (an
immutable file) is remembered by the process that folded it (by name and inode) and folded at
most once more by each other process. A ``*.draft`` left by a process killed while it made a
segment is deleted by a settle once it is unlocked and a minute old.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from ..store import ReportRow, StoreBusy, StoreError, StoreUnavailable
from .groupcommit import GroupCommit

log = logging.getLogger(__name__)

# Seconds between folds while reports wait. Each fold makes a segment (created, locked, named, its
# folder synced), commits a transaction and deletes the segment (its folder synced again): ten a
# second took CPU and lengthened the slowest answers (`make bench`, paired runs against 0.5 s:
# p99 39-50 ms against 34-38 ms). The refresh settles first, so estimates never wait for it.
FOLD_INTERVAL = 0.5
FOLD_SOONER = 20_000  # reports in a segment that wake the folding thread before its interval is up
# Acknowledged reports (and their bytes, which the process keeps to fold them) one process may
# hold unfolded before ingest answers 503: the fold is behind. This bounds how late a report
# acknowledged under overload is counted (`make bench` prints how long the fold takes to catch up).
MAX_UNFOLDED = 50_000
MAX_UNFOLDED_BYTES = 64 * 1024 * 1024
SETTLE_SECONDS = 10.0  # how long settle() waits for other live processes to fold their segments
# Folds that failed without a success in between for this long mean the database cannot take what
# was acknowledged (locked, full, read-only): the health check says so. One failed try (a moment
# of contention) is not enough.
FAILING_SECONDS = 5.0
# The folding thread calls after_folding() (the SQLite store: truncate the WAL) at most this often,
# so that under load one call serves many folds; settle() calls it at once.
AFTER_FOLDING_INTERVAL = 1.0
SUFFIX = ".log"
DRAFT_SUFFIX = ".draft"
# A draft (a segment being made: created, then locked, then named) whose lock can be taken and that
# is older than this was left by a process killed while making it; it never held a report.
DRAFT_SECONDS = 60.0
# Data only, not the file's times (macOS has no fdatasync: fsync there).
_sync_data = getattr(os, "fdatasync", os.fsync)


@dataclass
class FoldProgress:
    """What the folds of one segment committed so far, chunk by chunk: the ids whose chunk was
    committed, and how many of them were found stored already (reported once the fold is done)."""

    stored: set[str] = field(default_factory=set)
    duplicates: int = 0


@dataclass
class _Segment:
    path: Path
    fd: int
    rows: list[ReportRow] = field(default_factory=list)  # what this process appended: folded from here
    size: int = 0  # bytes appended


@dataclass
class Inbox:
    """Segments of acknowledged reports beside the database, and their folding.

    ``store_rows(rows, validated, progress)`` stores and counts the new ones of ``rows`` in the
    database (exactly once, however often it sees a row), skipping the ids in ``progress.stored``
    and adding to ``progress`` what each transaction it commits stored and found stored already;
    ``validated`` says the rows are this process's own appends (checked at ingest), not lines read
    back from a file. ``durable``: sync each
    append to the disk (``full``), not only to the operating system (``normal``: survives a
    killed process, not a power cut). ``after_folding()`` is called after folds that stored
    something (the SQLite store truncates its WAL there): by :meth:`settle` at once, by the
    folding thread at most every :data:`AFTER_FOLDING_INTERVAL` seconds, the thread staying until
    it has run through. It returns whether it did (False, or an error, which is logged: again later).
    """

    folder: Path
    store_rows: Callable[[list[ReportRow], bool, FoldProgress], None]
    durable: bool
    on_duplicates: Callable[[int], None] = lambda n: None
    after_folding: Callable[[], bool] = lambda: True
    _pid: int = -1
    _lock: threading.Lock = field(default_factory=threading.Lock)  # the current segment and the pending ids
    _fold_lock: threading.Lock = field(default_factory=threading.Lock)  # one fold at a time in a process
    _wake: threading.Event = field(default_factory=threading.Event)
    _current: _Segment | None = None
    _rotated: list[_Segment] = field(default_factory=list)  # written, not yet folded
    _pending: set[str] = field(default_factory=set)  # ids acknowledged here and not yet folded
    _thread: threading.Thread | None = None
    _folded: bool = False  # something was folded since after_folding() last ran through
    # Segments folded here that could not be deleted: name -> (device, inode). Never folded again
    # here (only their deletion is tried again, quietly).
    _undeletable: dict[str, tuple[int, int]] = field(default_factory=dict)
    _after_at: float = 0.0  # when after_folding() last ran (monotonic seconds)
    _unreadable: set[str] = field(default_factory=set)  # segments this process could not open (warned)
    _progress: dict[str, FoldProgress] = field(default_factory=dict)  # segment name -> a fold that failed part-way
    # Dead processes' segments folded here part-way: name -> the descriptor whose lock we keep.
    _held: dict[str, int] = field(default_factory=dict)
    _failing_since: float | None = None  # monotonic seconds of the first failed fold since the last success
    _failure: str = ""  # what the last failed fold said
    _group: GroupCommit[Sequence[ReportRow]] = field(init=False)

    def __post_init__(self) -> None:
        self._group = GroupCommit(self._append_group)

    # -- appending ---------------------------------------------------------------------------

    def append(self, rows: Sequence[ReportRow]) -> int:
        """Append ``rows`` (ids distinct) durably: how many were new here (an id this process
        acknowledged and has not folded yet is a duplicate)."""
        return self._group.run(rows) if rows else 0

    def _append_group(self, works: Sequence[Sequence[ReportRow]]) -> list[int]:
        with self._lock:
            self._own_process()
            pending, group = self._pending, set[str]()  # ids appended before, and in this group
            news: list[list[ReportRow]] = []
            for rows in works:
                fresh = [r for r in rows if r.id not in pending and r.id not in group]
                group.update(r.id for r in fresh)
                news.append(fresh)
            count = sum(map(len, news))
            data = "".join(_line(r) for fresh in news for r in fresh).encode()
            unfolded_bytes = sum(s.size for s in self._rotated) + (self._current.size if self._current else 0)
            if len(self._pending) + count > MAX_UNFOLDED or unfolded_bytes + len(data) > MAX_UNFOLDED_BYTES:
                raise StoreBusy(f"{len(self._pending)} acknowledged reports are waiting to be counted; "
                                "try again in a moment")
            if count:
                segment = self._current or self._new_segment()
                try:
                    if os.write(segment.fd, data) != len(data):  # O_APPEND: one write, whole lines
                        raise OSError("the disk took only part of it (full?)")
                    if self.durable:
                        _sync_data(segment.fd)
                except OSError as exc:
                    # Part of it may be in the file: later appends go to a new segment, so no
                    # acknowledged line ever follows a cut one. What it held before is folded.
                    self._current = None
                    if segment.rows:
                        self._rotated.append(segment)
                        self._start_folding()
                    else:
                        _discard(segment.path, segment.fd)
                    raise StoreUnavailable(f"cannot append to the inbox {segment.path}: {exc}") from exc
                for fresh in news:
                    segment.rows.extend(fresh)
                segment.size += len(data)
                if len(segment.rows) >= FOLD_SOONER:
                    self._wake.set()
                self._pending.update(r.id for fresh in news for r in fresh)
                self._start_folding()
            return [len(fresh) for fresh in news]

    def _start_folding(self) -> None:
        """Start the folding thread unless it runs (``_lock`` held)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._fold_while_pending, name="ldp-inbox-fold", daemon=True)
            self._thread.start()

    def _own_process(self) -> None:
        """After a fork, the child starts with no segment, no pending ids and no thread of its own
        (what the parent appended is the parent's to fold)."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._current, self._rotated, self._pending, self._thread = None, [], set(), None

    def _new_segment(self) -> _Segment:
        """A new segment, locked before it gets its ``.log`` name: no one can take it for a dead
        process's. Under ``full`` the folder is synced too, so the name survives a power cut."""
        name = secrets.token_hex(12)
        draft, path = self.folder / f"{name}{DRAFT_SUFFIX}", self.folder / f"{name}{SUFFIX}"
        fd = None
        try:
            self.folder.mkdir(mode=0o700, exist_ok=True)
            fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.rename(draft, path)
            if self.durable:
                _sync_folder(self.folder)
        except OSError as exc:
            if fd is not None:
                _discard(path if path.exists() else draft, fd)
            raise StoreUnavailable(f"cannot make a segment in the inbox {self.folder}: {exc}") from exc
        self._current = _Segment(path, fd)
        return self._current

    # -- folding -----------------------------------------------------------------------------

    def _fold_while_pending(self) -> None:
        while True:
            self._wake.wait(FOLD_INTERVAL)
            self._wake.clear()
            try:
                self._fold_own()
                self._fold_orphans()
            except Exception:  # the database busy or gone: the segments stay and are tried again
                log.exception("folding the inbox failed; trying again in %s s", FOLD_INTERVAL)
            self._after_folding(AFTER_FOLDING_INTERVAL)
            with self._lock:
                if not self._pending and not self._rotated and not self._folded and not self._held:
                    self._thread = None
                    return

    def failing(self) -> str | None:
        """What the folds of this process have said while failing for :data:`FAILING_SECONDS` or
        more without a success; None while they succeed (or failed only for a moment)."""
        with self._lock:
            since = self._failing_since
            if since is None or time.monotonic() - since < FAILING_SECONDS:
                return None
            return f"folding the inbox has failed for {time.monotonic() - since:.0f} s: {self._failure}"

    def _note_fold(self, error: Exception | None) -> None:
        """Keep whether the last fold failed (``error``), and since when folds fail in a row."""
        with self._lock:
            if error is None:
                self._failing_since = None
            else:
                if self._failing_since is None:
                    self._failing_since = time.monotonic()
                self._failure = str(error)

    def _fold_own(self) -> None:
        """Fold what this process appended so far (its current segment is closed for appends)."""
        with self._fold_lock:
            with self._lock:
                if self._pid != os.getpid():
                    return
                if self._current is not None:
                    self._rotated.append(self._current)
                    self._current = None
            while self._rotated:
                segment = self._rotated[0]
                self._fold_file(segment.path, segment.fd, segment.rows)  # no need to read back our own
                with self._lock:
                    self._rotated.pop(0)
                    self._pending.difference_update(r.id for r in segment.rows)

    def _fold_orphans(self) -> list[Path]:
        """Fold the segments of processes that died (first those this process folded part-way);
        the others' segments, still locked."""
        for name in list(self._held):
            fd = self._held.pop(name, None)
            if fd is not None:  # not taken meanwhile by another thread folding orphans
                self._fold_orphan(self.folder / name, fd)
        live = []
        for path in self._segments():
            try:
                fd = _open_segment(path)
            except FileNotFoundError:
                continue  # folded meanwhile
            except OSError as exc:  # not even readable: nothing here can fold it (said once)
                if path.name not in self._unreadable:
                    self._unreadable.add(path.name)
                    log.warning("cannot open the inbox segment %s: %s", path, exc)
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                live.append(path)
                continue
            # The owner unlinks a segment before it lets go of the lock: a segment that lost its
            # name between our open and our lock was folded already.
            stat = os.fstat(fd)
            if stat.st_nlink == 0:
                os.close(fd)
                continue
            if self._undeletable.get(path.name) == (stat.st_dev, stat.st_ino):
                # Folded here already and not deleted then: deleted now if it can be, never folded again.
                with contextlib.suppress(OSError):
                    path.unlink()
                    self._undeletable.pop(path.name)
                os.close(fd)
                continue
            self._fold_orphan(path, fd)
        return live

    def _fold_orphan(self, path: Path, fd: int) -> None:
        """Fold a dead process's segment, locked by us through ``fd``. If the database fails the
        fold, the lock is let go (the segment is tried again later, by anyone), unless some of its
        chunks were committed: then this process keeps the lock and tries it again first, since
        another process, not knowing them, would count their reports as found stored."""
        try:
            with self._fold_lock:
                self._fold_file(path, fd)
        except StoreError:
            progress = self._progress.get(path.name)
            if progress is not None and progress.stored:
                with self._lock:
                    self._held[path.name] = fd
                    self._start_folding()  # which tries it again until it is folded
            else:
                self._progress.pop(path.name, None)
                os.close(fd)
            raise
        except Exception:
            # Not the database: the segment itself (damage no line check caught). Set aside
            # for the operator, so that it stops no start, no refresh and no other segment.
            log.exception("cannot fold the inbox segment %s; renamed to %s.bad", path, path.name)
            with contextlib.suppress(OSError):
                os.rename(path, path.with_name(path.name + ".bad"))
            self._progress.pop(path.name, None)
            os.close(fd)

    def _fold_file(self, path: Path, fd: int, rows: list[ReportRow] | None = None) -> None:
        """Fold the whole segment at ``path`` (locked by us through ``fd``; its ``rows`` when we
        wrote them, else read from the file), then delete it. Rows this process appended were
        validated when they came in; rows read back from a file may be damaged."""
        validated = rows is not None
        if rows is None:
            with open(path, "rb") as f:
                rows = _parse(f.read(), path)
        if rows:
            # A fold of it that failed part-way left its committed chunks here: not folded again.
            progress = self._progress.setdefault(path.name, FoldProgress())
            try:
                self.store_rows(rows, validated, progress)
            except Exception as exc:
                self._note_fold(exc)
                raise
            finally:
                self._folded = self._folded or bool(progress.stored)
            self._note_fold(None)
            del self._progress[path.name]
            if progress.duplicates:
                self.on_duplicates(progress.duplicates)
        # Counted: from here nothing may fail the fold (a retry would count nothing, but find no file).
        stat = os.fstat(fd)
        if not _discard(path, fd, sync=self.durable):
            self._undeletable[path.name] = (stat.st_dev, stat.st_ino)

    def _segments(self) -> list[Path]:
        """Every segment in the folder but this process's own and those it holds."""
        with self._lock:
            own = {s.path for s in self._rotated} | ({self._current.path} if self._current else set())
        own |= {self.folder / name for name in list(self._held)}
        try:
            return [p for p in self.folder.glob(f"*{SUFFIX}") if p not in own]
        except OSError:
            return []

    def settle(self, seconds: float = SETTLE_SECONDS) -> None:
        """Fold every report acknowledged before this call: this process's at once, a dead
        process's here, a live process's by that process (waiting up to ``seconds`` for it; not
        at all for 0)."""
        self._fold_own()
        live = self._fold_orphans()
        self._delete_dead_drafts()
        waiting = {p for p in live if _size(p) > 0} if seconds > 0 else set()
        deadline = time.monotonic() + seconds
        while waiting and time.monotonic() < deadline:
            time.sleep(0.005)
            # Gone once its process folded it; folded here if that process died meanwhile.
            waiting &= set(self._fold_orphans())
        if waiting:
            log.warning("%d inbox segments of other processes were not folded within %g s", len(waiting), seconds)
        self._after_folding()

    def _delete_dead_drafts(self) -> None:
        """Delete the drafts of processes killed while they made a segment: unlocked, and older
        than :data:`DRAFT_SECONDS` (a live process locks its draft a moment after creating it)."""
        try:
            drafts = list(self.folder.glob(f"*{DRAFT_SUFFIX}"))
        except OSError:
            return
        for draft in drafts:
            try:
                fd = os.open(draft, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if time.time() - os.fstat(fd).st_mtime > DRAFT_SECONDS:
                    draft.unlink()
            except OSError:
                pass  # locked (being made), or not ours to delete: left as it is
            finally:
                os.close(fd)

    def _after_folding(self, interval: float = 0.0) -> None:
        """Call ``after_folding`` if something was folded since it last ran through, and it last
        ran at least ``interval`` seconds ago."""
        with self._fold_lock:
            if not self._folded or time.monotonic() - self._after_at < interval:
                return
            self._after_at = time.monotonic()
            try:
                if self.after_folding():
                    self._folded = False
            except Exception as exc:
                log.warning("after folding the inbox: %s; trying again in %s s", exc, AFTER_FOLDING_INTERVAL)


def _line(row: ReportRow) -> str:
    return f"{row.id}\t{row.schema}\t{row.version}\t{row.window}\t{row.window_end}\t{row.values}\n"


def _parse(data: bytes, path: Path) -> list[ReportRow]:
    """The rows of a segment. A last line without its newline was cut by a crash mid-append: it
    was never acknowledged (its client sends it again), so it is left out."""
    rows = []
    lines = data.decode("utf-8", errors="replace").split("\n")
    for line in lines[:-1]:
        fields = line.split("\t")
        try:
            report_id, schema, version, window, window_end, values = fields
            # Packed when folded, once the line is checked (Counting.countable).
            rows.append(ReportRow(report_id, schema, int(version), window, int(window_end), values, b""))
        except ValueError:
            log.warning("skipping a damaged line in the inbox segment %s", path)
    return rows


def _open_segment(path: Path) -> int:
    """A descriptor of a segment another process left: for reading and writing (emptied once folded),
    or for reading only where the file may not be written (then it cannot be emptied)."""
    try:
        return os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except PermissionError:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)


def _discard(path: Path, fd: int, *, sync: bool = False) -> bool:
    """Empty a segment and delete it, then let go of its lock (so no one takes it for a dead
    process's): whether it is gone. Emptied first: one that cannot be deleted (its folder
    read-only) then holds nothing anyone would fold again."""
    emptied = False
    try:
        os.ftruncate(fd, 0)
        emptied = True
    except OSError:
        pass  # a descriptor for reading only, or an immutable file: deleting it may still work
    try:
        path.unlink(missing_ok=True)
        if sync:
            _sync_folder(path.parent)
        return True
    except OSError as exc:
        log.warning("cannot delete the folded inbox segment %s (%s); %s", path, exc,
                    "it is emptied" if emptied else "this process will not fold it again")
        return False
    finally:
        os.close(fd)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _sync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
