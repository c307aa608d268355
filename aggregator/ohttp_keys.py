"""The aggregator's Oblivious HTTP keys (DESIGN.md, "Relay and amplification", "Keys").

HPKE key pairs of DHKEM(X25519, HKDF-SHA256), kept in the database so every node has the same
ones (:class:`.store.StoredKey`), each named by a one-byte key id. The first is made at the
first start (:func:`ensure_key`); ``ldp-telemetry relay-key rotate`` (:func:`rotate`) makes a new
one under the smallest key id not accepted now and retires the one before. A retired key is
still accepted for ``LDP_RELAY_KEY_GRACE`` seconds (a relay may hold a request encapsulated to it
for its ``--max-age``), then its private half is deleted (:func:`forget_expired`, a scheduled
job); its id may then be used again. Whether a key is accepted is decided by the clock, so a job
that runs late never lets a key live longer.

Both changes run in one write transaction that reads the keys locked (``Tx.ohttp_keys(lock=True)``):
nodes or workers starting at once make exactly one first key.
"""

from __future__ import annotations

from typing import Sequence

from flask import Flask

from ..shared import ohttp
from . import context
from .store import Store, StoredKey, Tx

KEY_IDS = 256  # a key id is one byte


def accepted(keys: Sequence[StoredKey], now: int, grace: float) -> list[StoredKey]:
    """The keys of ``keys`` accepted at ``now`` (Unix seconds): with their private half, current
    or retired less than ``grace`` seconds ago; in the order given (the store's: newest first)."""
    return [k for k in keys if k.private_key is not None and (k.retired is None or now - k.retired < grace)]


def _new_key(keys: Sequence[StoredKey], now: int) -> StoredKey:
    """A fresh key pair under the smallest key id that no key of ``keys`` still holding its
    private half has: every accepted key's, and a retired one's until the hourly job forgets it,
    so a rotation run with a shorter LDP_RELAY_KEY_GRACE than the servers' never replaces a key
    they still accept."""
    taken = {k.key_id for k in keys if k.private_key is not None}
    key_id = next((i for i in range(KEY_IDS) if i not in taken), None)
    if key_id is None:  # 256 keys within one grace: rotations faster than any relay could follow
        raise RuntimeError(f"all {KEY_IDS} key ids hold keys not yet forgotten; wait for the oldest to pass "
                           "LDP_RELAY_KEY_GRACE (and the hourly job to forget it) before rotating again")
    private = ohttp.generate_private_key()
    return StoredKey(key_id, ohttp.public_key_of(private), private, now, None)


def ensure_key(store: Store, now: int, grace: float) -> StoredKey | None:
    """Make the first key if no key is accepted at ``now``: the key made, or None. A read first, so a
    start beside a busy writer waits for no lock when there is a key (as it always is but once)."""
    if accepted(store.run_tx("ohttp_keys", lambda tx: tx.ohttp_keys(), write=False), now, grace):
        return None

    def make(tx: Tx) -> StoredKey | None:
        keys = tx.ohttp_keys(lock=True)  # again, locked: another process may have made it meanwhile
        if accepted(keys, now, grace):
            return None
        key = _new_key(keys, now)
        tx.add_ohttp_key(key, now)
        return key

    return store.run_tx("first_ohttp_key", make)


def rotate(store: Store, now: int) -> StoredKey:
    """Make a new current key (under the smallest key id free: :func:`_new_key`) and retire the one
    before at ``now``: it stays accepted for ``LDP_RELAY_KEY_GRACE`` seconds. The key made."""

    def make(tx: Tx) -> StoredKey:
        key = _new_key(tx.ohttp_keys(lock=True), now)
        tx.add_ohttp_key(key, now)
        return key

    return store.run_tx("rotate_ohttp_key", make)


def accepted_keys(app: Flask) -> list[StoredKey]:
    """The keys the app accepts now, newest first."""
    return accepted(context.store(app).run_tx("ohttp_keys", lambda tx: tx.ohttp_keys(), write=False),
                    int(context.now(app).timestamp()), app.config["LDP_RELAY_KEY_GRACE"])


def key_configs(keys: Sequence[StoredKey]) -> bytes:
    """``keys`` as ``application/ohttp-keys`` (RFC 9458 section 3.2), in their order."""
    return ohttp.encode_key_configs([ohttp.KeyConfig(k.key_id, k.public_key) for k in keys])


def forget_expired(app: Flask) -> list[int]:
    """The scheduled job: delete the private half of every key retired ``LDP_RELAY_KEY_GRACE``
    seconds ago or more; the key ids whose private half went."""
    cutoff = int(context.now(app).timestamp() - app.config["LDP_RELAY_KEY_GRACE"])
    return context.store(app).run_tx("forget_ohttp_keys", lambda tx: tx.forget_private_keys(cutoff))
