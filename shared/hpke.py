"""HPKE (RFC 9180), base mode, for the one suite the relay uses: DHKEM(X25519, HKDF-SHA256),
HKDF-SHA256 and AES-128-GCM (KEM 0x0020, KDF 0x0001, AEAD 0x0001).

Written on ``cryptography``'s primitives (X25519, HMAC, HKDF-Expand, AES-GCM) rather than its own
``hpke`` module, because a test vector must fix the sender's ephemeral key
(``ephemeral_private``), which that module does not allow; the tests check this module against
RFC 9180's vectors and against that module both ways.

``cryptography`` is imported inside the functions that compute, not at the top: a client installed
without the ``relay`` extra imports :mod:`ldp_telemetry.shared.ohttp` (and so this module, for the
suite's ids) and never seals anything.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

KEM_X25519 = 0x0020  # DHKEM(X25519, HKDF-SHA256), RFC 9180 §7.1
KDF_HKDF_SHA256 = 0x0001  # §7.2
AEAD_AES_128_GCM = 0x0001  # §7.3
MODE_BASE = 0x00  # §5.1, Table 1

N_ENC = 32  # Nenc = Npk = Nsk = 32 for X25519
N_SECRET = 32  # the KEM's shared secret
N_H = 32  # SHA-256's output
N_K = 16  # AES-128's key
N_N = 12  # AES-GCM's nonce
N_T = 16  # AES-GCM's tag

_VERSION_LABEL = b"HPKE-v1"
# §4.1 (the KEM's own labels) and §5.1 (the key schedule's): each names its suite.
_KEM_SUITE_ID = b"KEM" + KEM_X25519.to_bytes(2, "big")
_HPKE_SUITE_ID = (b"HPKE" + KEM_X25519.to_bytes(2, "big") + KDF_HKDF_SHA256.to_bytes(2, "big")
                  + AEAD_AES_128_GCM.to_bytes(2, "big"))


class DecryptError(ValueError):
    """A ciphertext that does not open: a wrong key, a forged or damaged tag, a bad ``enc``."""


def generate_private_key() -> bytes:
    """A fresh X25519 private key (32 bytes from the OS CSPRNG; X25519 clamps any 32 bytes)."""
    return secrets.token_bytes(N_ENC)


def public_key_of(private_key: bytes) -> bytes:
    """The raw 32-byte X25519 public key of ``private_key`` (SerializePublicKey, RFC 9180 §7.1.1)."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    return X25519PrivateKey.from_private_bytes(_key(private_key, "private key")).public_key().public_bytes(
        Encoding.Raw, PublicFormat.Raw)


@dataclass(frozen=True)
class KeySchedule:
    """What KeySchedule (RFC 9180 §5.1) derives for one sender and receiver: the values the
    test vectors list, and the context's AEAD key and base nonce."""

    shared_secret: bytes
    key_schedule_context: bytes
    secret: bytes
    key: bytes
    base_nonce: bytes
    exporter_secret: bytes


class Context:
    """An encryption context (RFC 9180 §5.2): AES-128-GCM under ``key``, the i-th message sealed
    or opened with nonce ``base_nonce XOR i`` (i as 12 bytes big-endian). A sender's context only
    seals and a receiver's only opens, each in its own order."""

    def __init__(self, schedule: KeySchedule):
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self.schedule = schedule
        self._aead = AESGCM(schedule.key)
        self._seq = 0

    def nonce(self) -> bytes:
        """ComputeNonce(seq) for the next message."""
        return bytes(a ^ b for a, b in zip(self.schedule.base_nonce, self._seq.to_bytes(N_N, "big")))

    def seal(self, aad: bytes, plaintext: bytes) -> bytes:
        ciphertext = self._aead.encrypt(self.nonce(), plaintext, aad)
        self._seq += 1
        return ciphertext

    def open(self, aad: bytes, ciphertext: bytes) -> bytes:
        """The plaintext; :class:`DecryptError` if the tag does not verify."""
        from cryptography.exceptions import InvalidTag

        try:
            plaintext = self._aead.decrypt(self.nonce(), ciphertext, aad)
        except InvalidTag:
            raise DecryptError("the ciphertext does not open under this key (a wrong key or a damaged tag)") from None
        self._seq += 1
        return plaintext


def setup_base_sender(public_key: bytes, info: bytes, *,
                      ephemeral_private: bytes | None = None) -> tuple[bytes, Context]:
    """SetupBaseS (RFC 9180 §5.1.1): ``(enc, context)`` for the receiver's raw ``public_key``.

    Encap (§4.1) draws a fresh ephemeral key; ``ephemeral_private`` fixes it instead, for test
    vectors only (a reused ephemeral key reuses the AEAD key and nonce).
    """
    ephemeral = generate_private_key() if ephemeral_private is None else _key(ephemeral_private, "ephemeral key")
    enc = public_key_of(ephemeral)
    dh = _dh(ephemeral, _key(public_key, "public key"))
    shared_secret = _extract_and_expand(dh, enc + public_key)
    return enc, Context(key_schedule(shared_secret, info))


def setup_base_receiver(enc: bytes, private_key: bytes, info: bytes) -> Context:
    """SetupBaseR (RFC 9180 §5.1.1): the receiver's context for the sender's ``enc``;
    :class:`DecryptError` for an ``enc`` that is no usable X25519 public key."""
    dh = _dh(_key(private_key, "private key"), enc)
    shared_secret = _extract_and_expand(dh, enc + public_key_of(private_key))
    return Context(key_schedule(shared_secret, info))


def seal_base(public_key: bytes, info: bytes, aad: bytes, plaintext: bytes, *,
              ephemeral_private: bytes | None = None) -> tuple[bytes, bytes]:
    """Single-shot SealBase (RFC 9180 §6.1): ``(enc, ciphertext)``."""
    enc, context = setup_base_sender(public_key, info, ephemeral_private=ephemeral_private)
    return enc, context.seal(aad, plaintext)


def open_base(enc: bytes, private_key: bytes, info: bytes, aad: bytes, ciphertext: bytes) -> bytes:
    """Single-shot OpenBase (RFC 9180 §6.1); :class:`DecryptError` if it does not open."""
    return setup_base_receiver(enc, private_key, info).open(aad, ciphertext)


def key_schedule(shared_secret: bytes, info: bytes) -> KeySchedule:
    """KeySchedule(mode_base, shared_secret, info, psk = "", psk_id = "") (RFC 9180 §5.1)."""
    psk_id_hash = _labeled_extract(b"", b"psk_id_hash", b"", _HPKE_SUITE_ID)
    info_hash = _labeled_extract(b"", b"info_hash", info, _HPKE_SUITE_ID)
    context = bytes([MODE_BASE]) + psk_id_hash + info_hash
    secret = _labeled_extract(shared_secret, b"secret", b"", _HPKE_SUITE_ID)
    return KeySchedule(
        shared_secret=shared_secret,
        key_schedule_context=context,
        secret=secret,
        key=_labeled_expand(secret, b"key", context, N_K, _HPKE_SUITE_ID),
        base_nonce=_labeled_expand(secret, b"base_nonce", context, N_N, _HPKE_SUITE_ID),
        exporter_secret=_labeled_expand(secret, b"exp", context, N_H, _HPKE_SUITE_ID),
    )


def _extract_and_expand(dh: bytes, kem_context: bytes) -> bytes:
    """DHKEM's ExtractAndExpand (RFC 9180 §4.1): the KEM's shared secret."""
    eae_prk = _labeled_extract(b"", b"eae_prk", dh, _KEM_SUITE_ID)
    return _labeled_expand(eae_prk, b"shared_secret", kem_context, N_SECRET, _KEM_SUITE_ID)


def _labeled_extract(salt: bytes, label: bytes, ikm: bytes, suite_id: bytes) -> bytes:
    """LabeledExtract (RFC 9180 §4): HKDF-Extract(salt, "HPKE-v1" ‖ suite_id ‖ label ‖ ikm), which is
    HMAC-SHA256 keyed by the salt (RFC 5869 §2.2; an empty salt acts as 32 zero bytes)."""
    from cryptography.hazmat.primitives import hashes, hmac

    mac = hmac.HMAC(salt, hashes.SHA256())
    mac.update(_VERSION_LABEL + suite_id + label + ikm)
    return mac.finalize()


def _labeled_expand(prk: bytes, label: bytes, info: bytes, length: int, suite_id: bytes) -> bytes:
    """LabeledExpand (RFC 9180 §4): HKDF-Expand(prk, I2OSP(length, 2) ‖ "HPKE-v1" ‖ suite_id ‖ label
    ‖ info, length)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

    labeled_info = length.to_bytes(2, "big") + _VERSION_LABEL + suite_id + label + info
    return HKDFExpand(hashes.SHA256(), length, labeled_info).derive(prk)


def _dh(private_key: bytes, public_key: bytes) -> bytes:
    """X25519(private, public); :class:`DecryptError` for a public key that is not 32 bytes or
    gives the all-zero output (RFC 9180 §7.1.4: a small-order point)."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

    if len(public_key) != N_ENC:
        raise DecryptError(f"an X25519 public key is {N_ENC} bytes, got {len(public_key)}")
    try:
        shared = X25519PrivateKey.from_private_bytes(private_key).exchange(X25519PublicKey.from_public_bytes(public_key))
    except ValueError:  # cryptography refuses the all-zero shared secret itself
        raise DecryptError("the X25519 exchange gives the all-zero value (a small-order public key)") from None
    if not any(shared):
        raise DecryptError("the X25519 exchange gives the all-zero value (a small-order public key)")
    return shared


def _key(value: bytes, what: str) -> bytes:
    if not isinstance(value, bytes) or len(value) != N_ENC:
        size = len(value) if isinstance(value, bytes) else type(value).__name__
        raise ValueError(f"an X25519 {what} is {N_ENC} raw bytes, got {size}")
    return value
