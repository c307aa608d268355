"""Where a device's coins come from: a source of random bytes, passed to every encoder.

Production uses :data:`SYSTEM`, the operating system's CSPRNG (``os.urandom``, what :mod:`secrets`
uses): a predictable coin would undo randomised response. A test vector passes
:class:`FixedBytes` instead, so the exact report that comes out of given bytes can be checked,
in this language or any other. Every draw here is defined byte for byte, so that another
client can reproduce it:

- a Bernoulli(p) coin reads 8 bytes as an unsigned little-endian integer, keeps its top 53
  bits (``>> 11``), and is 1 when that number is below ``int(p * 2**53)``;
- a uniform integer below ``n`` reads ``ceil(bits / 8)`` bytes little-endian (``bits`` the bit
  length of ``n - 1``), masks them to ``bits`` bits and tries again while the number is ``>= n``
  (rejection: no modulo bias).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
from typing import Protocol

# A Bernoulli(p) draw compares 53 CSPRNG bits with p scaled to 2**53, so probabilities are exact
# to 2**-53 (a double's precision).
BITS = 53
SCALE = 1 << BITS
COIN_BYTES = 8
COIN_SHIFT = 8 * COIN_BYTES - BITS


class RandomSource(Protocol):
    """Anything that hands out random bytes: ``take(n)`` returns exactly ``n`` of them."""

    def take(self, n: int) -> bytes: ...


class SystemRandom:
    """Bytes from the OS CSPRNG, read 4 KiB at a time.

    One system call then serves hundreds of coins, which makes the device encoders several times
    faster (a system call costs far more than the arithmetic of a coin). Every byte is used
    once; a forked child starts with an empty pool, so a parent and its child never share coins.
    """

    _SIZE = 4096

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._lock = threading.Lock()
        self._buffer = b""
        self._position = 0

    def take(self, n: int) -> bytes:
        with self._lock:
            start = self._position
            if start + n > len(self._buffer):
                self._buffer = os.urandom(max(self._SIZE, n))
                start = 0
            self._position = start + n
            return self._buffer[start : start + n]


class FixedBytes:
    """Given bytes, handed out in order: for test vectors. Running out is an error, not a wrap."""

    def __init__(self, data: bytes):
        self._data = bytes(data)
        self._position = 0

    def take(self, n: int) -> bytes:
        end = self._position + n
        if end > len(self._data):
            raise ValueError(f"the fixed random bytes ran out: {n} more wanted after {self._position} "
                             f"of {len(self._data)}")
        out = self._data[self._position : end]
        self._position = end
        return out

    @property
    def used(self) -> int:
        """How many bytes were taken so far."""
        return self._position


class HmacStream:
    """A deterministic stream of bytes: HMAC-SHA256(key, message ‖ counter) for counter 0, 1, ...
    (4-byte big-endian), concatenated. Memoisation derives a value's permanent randomised
    response from it, so the response needs no stored state and never changes for that value."""

    def __init__(self, key: bytes, message: bytes):
        self._key, self._message = key, message
        self._buffer = b""
        self._counter = 0

    def take(self, n: int) -> bytes:
        while len(self._buffer) < n:
            block = hmac.new(self._key, self._message + self._counter.to_bytes(4, "big"), hashlib.sha256)
            self._buffer += block.digest()
            self._counter += 1
        out, self._buffer = self._buffer[:n], self._buffer[n:]
        return out


SYSTEM = SystemRandom()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=SYSTEM.reset)


def uniform53(source: RandomSource) -> int:
    """A uniform integer in [0, 2**53) from ``source`` (8 bytes, top 53 bits)."""
    return int.from_bytes(source.take(COIN_BYTES), "little") >> COIN_SHIFT


def threshold(probability: float) -> int:
    """The integer a 53-bit draw must fall below to be a 1 with ``probability``."""
    return int(probability * SCALE)


def bernoulli(probability: float, source: RandomSource) -> bool:
    """True with ``probability``, from ``source``."""
    return uniform53(source) < threshold(probability)


def randbelow(n: int, source: RandomSource) -> int:
    """A uniform integer in [0, n) from ``source`` (rejection sampling, no modulo bias)."""
    bits = (n - 1).bit_length()
    if bits == 0:
        return 0
    mask, size = (1 << bits) - 1, (bits + 7) // 8
    while True:
        value = int.from_bytes(source.take(size), "little") & mask
        if value < n:
            return value
