"""What the relay serves on the aggregator's behalf: its key configurations and its schemas,
fetched by the relay on its own schedule and answered from a cache (DESIGN.md, "Relay").

So the aggregator never sees which client asks for a schema or for the keys: it sees the relay
ask, every :data:`REFRESH_SECONDS`, for all of them. The answers are kept byte for byte (a client
compares the relay's keys with the aggregator's own, byte for byte) in the relay's store, so a
relay restarted while the aggregator is away still answers and still checks requests.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from urllib.parse import quote

import requests

from ..shared import ohttp
from .store import RelayStore

log = logging.getLogger(__name__)

# Seconds between two refreshes; the aggregator lets its key list be cached for an hour, and a
# rotated key should reach the relay well within that.
REFRESH_SECONDS = 300.0
# Seconds before trying again after a refresh failed (the aggregator restarting, the network).
RETRY_SECONDS = 30.0
# Seconds one fetch may take (the first refresh delays the relay's start by as much).
FETCH_SECONDS = 10.0
# Schema documents fetched in one refresh at most: a bound on the work an aggregator with very
# many versions makes (what is not fetched now is fetched at the next refresh).
MAX_FETCHES = 1000
KEYS = "keys"


def schema_key(name: str, version: int | None = None) -> str:
    """The cache key of ``GET /api/v1/schemas/<name>[/<version>]``."""
    return f"schema:{name}" + ("" if version is None else f"/{version}")


def listed_key_ids(data: bytes) -> frozenset[int]:
    """The key ids of the usable configurations of an ``application/ohttp-keys`` list (RFC 9458
    §3.2); ``ValueError`` if it is malformed or lists none (:func:`~..shared.ohttp.choose_key_config`)."""
    ohttp.choose_key_config(data)
    ids, offset = set(), 0
    while offset < len(data):
        end = offset + 2 + int.from_bytes(data[offset:offset + 2], "big")
        try:
            ids.add(ohttp.choose_key_config(data[offset:end]).key_id)
        except ValueError:  # another KEM or suite: listed, but no request we pass can use it
            pass
        offset = end
    return frozenset(ids)


class Cache:
    """The aggregator's answers in memory, as the store has them; the key ids of its key list."""

    def __init__(self, entries: Mapping[str, bytes]) -> None:
        self.lock = threading.Lock()
        self.entries = dict(entries)
        self.key_ids = self._key_ids(self.entries.get(KEYS))

    def get(self, key: str) -> bytes | None:
        with self.lock:
            return self.entries.get(key)

    def update(self, entries: Mapping[str, bytes]) -> None:
        key_ids = self._key_ids(entries[KEYS]) if KEYS in entries else None
        with self.lock:
            self.entries.update(entries)
            if key_ids is not None:
                self.key_ids = key_ids

    def keys_known(self) -> bool:
        return bool(self.key_ids)

    @staticmethod
    def _key_ids(data: bytes | None) -> frozenset[int]:
        if data is None:
            return frozenset()
        try:
            return listed_key_ids(data)
        except ValueError:
            return frozenset()


def fetch_keys(session: requests.Session, aggregator: str) -> dict[str, bytes]:
    """The aggregator's key list; ``RuntimeError`` naming what failed."""
    keys = _get(session, f"{aggregator}/api/v1/ohttp-keys", ohttp.KEYS_MEDIA_TYPE)
    try:
        listed_key_ids(keys)
    except ValueError as exc:
        raise RuntimeError(f"the aggregator's key list is unusable: {exc}") from None
    return {KEYS: keys}


def fetch_schemas(session: requests.Session, aggregator: str, have: Mapping[str, bytes]) -> dict[str, bytes]:
    """The aggregator's schemas that are new or may have changed: the latest of each name, and
    each version not in ``have`` (a published version never changes). ``RuntimeError`` naming
    what failed."""
    listing = _get(session, f"{aggregator}/api/v1/schemas", "application/json")
    try:
        latest = {item["name"]: int(item["version"]) for item in json.loads(listing)["schemas"]}
    except (ValueError, TypeError, KeyError) as exc:
        raise RuntimeError(f"the aggregator's schema list is not what GET /api/v1/schemas answers: {exc!r}") from None
    entries: dict[str, bytes] = {}
    for name, newest in sorted(latest.items()):
        for version in [None, *range(1, newest + 1)]:
            key = schema_key(name, version)
            if (version is not None and key in have) or len(entries) >= MAX_FETCHES:
                continue
            path = quote(name, safe="") + ("" if version is None else f"/{version}")
            entries[key] = _get(session, f"{aggregator}/api/v1/schemas/{path}", "application/json")
    return entries


def _get(session: requests.Session, url: str, media_type: str) -> bytes:
    try:
        response = session.get(url, timeout=FETCH_SECONDS, allow_redirects=False)
    except requests.RequestException as exc:
        raise RuntimeError(f"GET {url} failed: {type(exc).__name__}") from None
    got = response.headers.get("Content-Type", "").split(";")[0].strip()
    if response.status_code != 200 or got != media_type:
        raise RuntimeError(f"GET {url} answered HTTP {response.status_code} ({got or 'no content type'}), "
                           f"not 200 with {media_type}")
    return response.content


class Refresher:
    """Keeps :class:`Cache` and the store's copy fresh, in a thread of its own."""

    def __init__(self, aggregator: str, store: RelayStore, cache: Cache) -> None:
        self.aggregator = aggregator
        self.store = store
        self.cache = cache
        self.session = requests.Session()
        self.failing: str | None = None  # the last failure, None after a success

    def refresh(self) -> bool:
        """Fetch the keys, then the schemas (each whether or not the other worked); whether both
        worked. A failure is logged once, until a refresh works again."""
        failures = []
        fetches: tuple[Callable[[], dict[str, bytes]], ...] = (
            lambda: fetch_keys(self.session, self.aggregator),
            lambda: fetch_schemas(self.session, self.aggregator, self.store.cache_entries()))
        for fetch in fetches:
            try:
                entries = fetch()
            except RuntimeError as exc:
                failures.append(str(exc))
                continue
            self.store.cache(entries)
            self.cache.update(entries)
        failing = "; ".join(failures) or None
        if failing is not None and self.failing is None:
            log.warning("relay: could not refresh the aggregator's keys and schemas: %s", failing)
        elif failing is None and self.failing is not None:
            log.warning("relay: the aggregator's keys and schemas are refreshed again")
        self.failing = failing
        return failing is None

    def run(self, stop: threading.Event, worked: bool) -> None:
        """Refresh until ``stop`` is set; ``worked``: whether the refresh just before did."""
        while not stop.wait(REFRESH_SECONDS if worked else RETRY_SECONDS):
            worked = self.refresh()
