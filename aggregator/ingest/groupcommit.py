"""Group commit: requests that arrive while a transaction commits share the next one.

A durable commit costs an fsync; one per request caps a server at a few hundred requests a
second whatever else it does. Each thread hands its work in and waits; the first to find no
transaction running leads: it takes everything handed in so far, runs it as one transaction, and
wakes the others with their own results (or the one error, which then fails them all: none of
them was acknowledged). Whoever comes in meanwhile waits for the next leader. No thread of its
own, so nothing to start after a fork or stop at exit.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Sequence, TypeVar

W = TypeVar("W")


@dataclass
class _Slot(Generic[W]):
    work: W
    done: bool = False
    result: Any = None
    error: BaseException | None = None


@dataclass
class GroupCommit(Generic[W]):
    """Runs ``commit(works) -> results`` (one result per work, in order) for groups of works."""

    commit: Callable[[Sequence[W]], Sequence[Any]]
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _waiting: list[_Slot[W]] = field(default_factory=list)
    _leading: bool = False

    def run(self, work: W) -> Any:
        """``work``'s result once the transaction holding it has committed; its error if it failed."""
        slot = _Slot(work)
        with self._cond:
            self._waiting.append(slot)
            while not slot.done and self._leading:
                self._cond.wait()
            if slot.done:
                return _outcome(slot)
            self._leading = True
            group, self._waiting = self._waiting, []
        try:
            results = self.commit([s.work for s in group])
            for s, result in zip(group, results):
                s.result = result
        except BaseException as exc:
            for s in group:
                s.error = exc
        finally:
            with self._cond:
                for s in group:
                    s.done = True
                self._leading = False
                self._cond.notify_all()
        return _outcome(slot)


def _outcome(slot: _Slot[Any]) -> Any:
    if slot.error is not None:
        raise slot.error
    return slot.result
