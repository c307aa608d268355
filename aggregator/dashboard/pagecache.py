"""Dashboard views kept per refresh: a page's data is read and computed once per change of the
stored estimates (:meth:`Store.estimates_generation`), however often it is asked for.

Per process, least recently used first out, at most :data:`SIZE` views: an anonymous reader
asking for many ranges costs at most one read of a bounded page each, and the memory stays bounded.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Generic, Hashable, TypeVar

SIZE = 128
V = TypeVar("V")  # the kind of view kept


class PageCache(Generic[V]):
    def __init__(self, size: int = SIZE):
        self.size = size
        self._views: OrderedDict[Hashable, tuple[int, V]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, generation: int, make: Callable[[], V]) -> V:
        """The view under ``key`` if made at ``generation``, else ``make()`` (and kept)."""
        with self._lock:
            kept = self._views.get(key)
            if kept is not None and kept[0] == generation:
                self._views.move_to_end(key)
                return kept[1]
        view = make()  # outside the lock: two requests may both make it, neither waits on the other
        with self._lock:
            self._views[key] = (generation, view)
            self._views.move_to_end(key)
            while len(self._views) > self.size:
                self._views.popitem(last=False)
        return view
