"""Oblivious HTTP (RFC 9458) as the relay uses it: key configurations, the padded Binary HTTP
request (RFC 9292) that carries one report, its encapsulation, and the relay's batches.

Pure bytes, shared by the client (which builds and encapsulates), the relay (which checks a
request's header against the keys and frames batches) and the aggregator's gateway (which
splits, decapsulates and parses). DESIGN.md, "Relay and amplification", section "Bytes", fixes
every byte; the suite is HPKE's DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-128-GCM
(:mod:`.hpke`). Only :func:`encapsulate`, :func:`decapsulate`, :func:`generate_private_key` and
:func:`public_key_of` need ``cryptography``, which :mod:`.hpke` imports when they run.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from . import hpke
from .hpke import AEAD_AES_128_GCM as AEAD_AES_128_GCM
from .hpke import KDF_HKDF_SHA256 as KDF_HKDF_SHA256
from .hpke import KEM_X25519 as KEM_X25519
from .hpke import DecryptError as DecryptError
from .hpke import generate_private_key as generate_private_key
from .hpke import public_key_of as public_key_of
from .reports import max_report_bytes
from .schema import Schema

KEYS_MEDIA_TYPE = "application/ohttp-keys"
REQUEST_MEDIA_TYPE = "message/ohttp-req"
BATCH_MEDIA_TYPE = "application/ohttp-batch"
# RFC 9458 §5.3: the problem type of a 400 for a request whose key configuration is not (or no
# longer) accepted; a client refetches the keys and sends again.
KEY_PROBLEM_TYPE = "https://iana.org/assignments/http-problem-types#ohttp-key"

HEADER_BYTES = 7  # key id (1), KEM, KDF, AEAD (2 each): RFC 9458 §4.3's hdr
REQUEST_OVERHEAD = HEADER_BYTES + hpke.N_ENC + hpke.N_T  # hdr, enc, the AEAD tag: 55
PAD_UNIT = 1024  # every padded message of a schema version is a multiple of this
MAX_REQUEST_BYTES = 65536  # the most the relay takes in one request (DESIGN "Relay")
_SUITE = KEM_X25519.to_bytes(2, "big") + KDF_HKDF_SHA256.to_bytes(2, "big") + AEAD_AES_128_GCM.to_bytes(2, "big")
_PAIR = _SUITE[2:]  # the one (KDF, AEAD) pair a configuration lists and a client takes
_REQUEST_LABEL = b"message/bhttp request"  # RFC 9458 §4.3: info = label ‖ 0x00 ‖ hdr

# The one request a relayed report travels in (RFC 9292 §3.1, known-length): what is fixed of it.
METHOD = b"POST"
SCHEME = b"https"
PATH = b"/api/v1/reports"
CONTENT_TYPE = (b"content-type", b"application/json")
MAX_BATCH_REQUEST_LENGTH = 1 << 32  # a batch member's length is 4 bytes

# What a relay and the aggregator agree on besides the bytes (DESIGN.md, "Relay" and "Gateway").
MAX_BATCH_REQUESTS = 100_000  # the most requests the gateway takes in one batch
RELAY_MAX_AGE = 7 * 86_400  # a relay's default --max-age: a key's grace must outlast it by a day
MIN_RELAY_TOKEN = 16  # characters of a relay's bearer token, at least


def relay_token_problem(token: str) -> str | None:
    """Why ``token`` cannot be a relay's bearer token (one of the aggregator's ``LDP_RELAY_TOKENS``),
    or None: at least :data:`MIN_RELAY_TOKEN` printable characters without spaces, since it is all
    that stands between a stranger and the gateway's large bodies."""
    if len(token) < MIN_RELAY_TOKEN or not token.isprintable() or " " in token:
        return (f"a relay's token is at least {MIN_RELAY_TOKEN} printable characters without spaces, "
                f"got one of {len(token)} characters")
    return None


@dataclass(frozen=True)
class KeyConfig:
    """One key configuration (RFC 9458 §3.1) of the aggregator: a one-byte id and an X25519
    public key; it always lists the one (KDF, AEAD) pair (HKDF-SHA256, AES-128-GCM)."""

    key_id: int
    public_key: bytes

    def __post_init__(self) -> None:
        if type(self.key_id) is not int or not 0 <= self.key_id <= 255:
            raise ValueError(f"a key id is one byte (0 to 255), got {self.key_id!r}")
        if not isinstance(self.public_key, bytes) or len(self.public_key) != hpke.N_ENC:
            got = len(self.public_key) if isinstance(self.public_key, bytes) else type(self.public_key).__name__
            raise ValueError(f"an X25519 public key is {hpke.N_ENC} bytes, got {got}")

    def encode(self) -> bytes:
        """key id ‖ KEM ‖ public key ‖ length of the pairs (2 bytes) ‖ (KDF, AEAD)."""
        return (bytes([self.key_id]) + KEM_X25519.to_bytes(2, "big") + self.public_key
                + len(_PAIR).to_bytes(2, "big") + _PAIR)

    @property
    def header(self) -> bytes:
        """The 7-byte ``hdr`` of a request encapsulated to this key (RFC 9458 §4.3)."""
        return bytes([self.key_id]) + _SUITE


def encode_key_configs(configs: Sequence[KeyConfig]) -> bytes:
    """``application/ohttp-keys`` (RFC 9458 §3.2): each configuration preceded by its length, 2
    bytes big-endian."""
    return b"".join(len(encoded).to_bytes(2, "big") + encoded for encoded in (c.encode() for c in configs))


def choose_key_config(data: bytes) -> KeyConfig:
    """The first configuration of an ``application/ohttp-keys`` body whose KEM is 0x0020 and that
    lists (HKDF-SHA256, AES-128-GCM). ``ValueError`` naming what is wrong for a malformed body
    (every configuration is parsed, used or not) or one with no usable configuration."""
    if not data:
        raise ValueError("the key configuration list is empty")
    configs = _length_prefixed_items(data, 2, "key configuration")
    parsed = [_parse_key_config(config, i) for i, config in enumerate(configs)]  # all: a malformed one is refused
    usable = next((config for config in parsed if config is not None), None)
    if usable is None:
        raise ValueError(f"none of the {len(configs)} key configuration(s) is DHKEM(X25519, HKDF-SHA256) with "
                         "(HKDF-SHA256, AES-128-GCM)")
    return usable


def _parse_key_config(config: bytes, index: int) -> KeyConfig | None:
    """One key configuration (RFC 9458 §3.1): ours if usable, None if another KEM or suite."""
    if len(config) < 3:
        raise ValueError(f"key configuration {index}: {len(config)} bytes, too short for a key id and a KEM id")
    kem = int.from_bytes(config[1:3], "big")
    if kem != KEM_X25519:
        return None  # its public key's length is the KEM's, unknown here: the length prefix skips it
    end_of_key = 3 + hpke.N_ENC
    if len(config) < end_of_key + 2:
        raise ValueError(f"key configuration {index}: cut off in its public key or the length of its algorithms")
    pairs_length = int.from_bytes(config[end_of_key:end_of_key + 2], "big")
    pairs = config[end_of_key + 2:]
    if pairs_length == 0 or pairs_length % 4 or len(pairs) != pairs_length:
        raise ValueError(f"key configuration {index}: algorithms length {pairs_length} for {len(pairs)} bytes "
                         "(a non-zero multiple of 4, exactly what follows)")
    listed = {pairs[i:i + 4] for i in range(0, pairs_length, 4)}
    return KeyConfig(config[0], config[3:end_of_key]) if _PAIR in listed else None


def request_key_id(request: bytes) -> int:
    """The key id of an encapsulated request whose 7-byte header names our suite; ``ValueError``
    for a request too short to hold a header, ``enc`` and a tag, or with another suite."""
    if len(request) < REQUEST_OVERHEAD:
        raise ValueError(f"an encapsulated request is at least {REQUEST_OVERHEAD} bytes, got {len(request)}")
    if request[1:HEADER_BYTES] != _SUITE:
        raise ValueError(f"the request's suite is {request[1:HEADER_BYTES].hex()}, not {_SUITE.hex()} "
                         "(DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-128-GCM)")
    return request[0]


def encapsulate(config: KeyConfig, message: bytes, *, ephemeral_private: bytes | None = None) -> bytes:
    """The encapsulated request ``hdr ‖ enc ‖ ct`` of ``message`` (RFC 9458 §4.3): HPKE base mode
    to the configuration's key, info = "message/bhttp request" ‖ 0x00 ‖ hdr, empty AAD.
    ``ephemeral_private`` fixes the sender's key, for test vectors only."""
    header = config.header
    enc, ciphertext = hpke.seal_base(config.public_key, _REQUEST_LABEL + b"\x00" + header, b"", message,
                                     ephemeral_private=ephemeral_private)
    return header + enc + ciphertext


def decapsulate(request: bytes, private_key: bytes) -> bytes:
    """The message of an encapsulated request, opened with the private key of its key id (the
    caller looks that up with :func:`request_key_id`); :class:`DecryptError` if it does not open,
    ``ValueError`` if it is not a request of our suite."""
    request_key_id(request)
    header, enc = request[:HEADER_BYTES], request[HEADER_BYTES:HEADER_BYTES + hpke.N_ENC]
    return hpke.open_base(enc, private_key, _REQUEST_LABEL + b"\x00" + header, b"",
                          request[HEADER_BYTES + hpke.N_ENC:])


# --- the Binary HTTP request (RFC 9292) ------------------------------------------------------


def varint(value: int) -> bytes:
    """``value`` as a QUIC variable-length integer in its shortest form (RFC 9000 §16)."""
    for prefix, size in ((0, 1), (1, 2), (2, 4), (3, 8)):
        if value < 1 << (8 * size - 2):
            return ((prefix << (8 * size - 2)) | value).to_bytes(size, "big")
    raise ValueError(f"{value} does not fit a QUIC varint (62 bits)")


def _length_prefixed(value: bytes) -> bytes:
    return varint(len(value)) + value


_FIELD_SECTION = _length_prefixed(b"".join(_length_prefixed(part) for part in CONTENT_TYPE))
# Everything before the content's length: framing indicator 0 (known-length request), the request
# control data (method, scheme, an empty authority, path) and the header section.
_HEAD = (varint(0) + _length_prefixed(METHOD) + _length_prefixed(SCHEME) + _length_prefixed(b"")
         + _length_prefixed(PATH) + _FIELD_SECTION)
_EMPTY_TRAILERS = varint(0)


def bhttp_request(content: bytes, padded_size: int) -> bytes:
    """The known-length request of DESIGN "Bytes" carrying ``content`` (the JSON text of
    ``{"reports": [report]}``), followed by zero bytes up to ``padded_size`` (RFC 9292 §3.8)."""
    message = _HEAD + _length_prefixed(content) + _EMPTY_TRAILERS
    if len(message) > padded_size:
        raise ValueError(f"the message is {len(message)} bytes, over its padded size {padded_size}")
    return message + bytes(padded_size - len(message))


def bhttp_content(message: bytes) -> bytes:
    """The content of exactly the request :func:`bhttp_request` makes: method ``POST``, path
    ``/api/v1/reports``, one header field ``content-type: application/json``, no trailers (the
    section present and empty), then only zero bytes; any scheme and authority; every integer in
    its shortest form, as DESIGN.md "Bytes" fixes it (RFC 9000 §16 would let a writer pad one, which
    would set its requests apart from the others in a crowd). ``ValueError`` naming the first thing
    that differs."""
    reader = _Reader(message)
    if (framing := reader.varint("framing indicator")) != 0:
        raise ValueError(f"framing indicator {framing}: only a known-length request (0) is accepted")
    if (method := reader.field("method")) != METHOD:
        raise ValueError(f"method {method!r}: only {METHOD!r} is accepted")
    reader.field("scheme")
    reader.field("authority")
    if (path := reader.field("path")) != PATH:
        raise ValueError(f"path {path[:100]!r}: only {PATH!r} is accepted")
    headers = _Reader(reader.field("header section"))
    lines = []
    while not headers.done:
        lines.append((headers.field("header name"), headers.field("header value")))
    if lines != [CONTENT_TYPE]:
        raise ValueError(f"header fields {[name[:40] for name, _ in lines]!r} with their values: only one, "
                         f"{CONTENT_TYPE[0]!r}: {CONTENT_TYPE[1]!r}, is accepted")
    content = reader.field("content")
    if (trailers := reader.varint("trailer section length")) != 0:
        raise ValueError(f"a trailer section of {trailers} bytes: only an empty one is accepted")
    if any(reader.rest()):
        raise ValueError("the padding after the message holds a non-zero byte")
    return content


class _Reader:
    """Reads the varints and length-prefixed fields of a message, front to back."""

    def __init__(self, data: bytes):
        self._data = data
        self._at = 0

    @property
    def done(self) -> bool:
        return self._at >= len(self._data)

    def varint(self, what: str) -> int:
        if self.done:
            raise ValueError(f"the message ends before its {what}")
        size = 1 << (self._data[self._at] >> 6)
        if self._at + size > len(self._data):
            raise ValueError(f"the message ends inside the {size}-byte integer of its {what}")
        value = int.from_bytes(self._data[self._at:self._at + size], "big") & ((1 << (8 * size - 2)) - 1)
        if len(varint(value)) != size:  # a longer form than needed would mark its writer among the crowd
            raise ValueError(f"the integer of its {what} ({value}) is not in its shortest form")
        self._at += size
        return value

    def field(self, what: str) -> bytes:
        length = self.varint(f"{what}'s length")
        if self._at + length > len(self._data):
            raise ValueError(f"the {what} announces {length} bytes, {len(self._data) - self._at} left")
        value = self._data[self._at:self._at + length]
        self._at += length
        return value

    def rest(self) -> bytes:
        return self._data[self._at:]


def report_content(report: Mapping[str, object]) -> bytes:
    """The content of a relayed report's request: the JSON text of ``{"reports": [report]}`` as the
    Python client writes it (compact separators, non-ASCII as ``\\u`` escapes), UTF-8."""
    return json.dumps({"reports": [report]}, separators=(",", ":")).encode("utf-8")


# What report_content adds around the report's own text.
_ENVELOPE_BYTES = len(report_content({})) - len(b"{}")


def padded_size(schema: Schema) -> int:
    """The size every padded message of ``schema``'s version has: the smallest multiple of
    :data:`PAD_UNIT` not below the longest message a report of it can make (its
    :func:`report_content`, the report's text bounded by :func:`~.reports.max_report_bytes`)."""
    content = _ENVELOPE_BYTES + max_report_bytes(schema)
    longest = len(_HEAD) + len(varint(content)) + content + len(_EMPTY_TRAILERS)
    return -(-longest // PAD_UNIT) * PAD_UNIT


def encapsulate_report(config: KeyConfig, schema: Schema, report: Mapping[str, object]) -> bytes:
    """The request a report of ``schema`` travels in, alone: its :func:`report_content` in the
    Binary HTTP request padded to the schema's :func:`padded_size`, encapsulated to ``config``."""
    return encapsulate(config, bhttp_request(report_content(report), padded_size(schema)))


def relay_refusal(schema: Schema) -> str | None:
    """Why ``schema``'s reports cannot go through a relay (their padded request would be over
    :data:`MAX_REQUEST_BYTES`), or None when they can."""
    size = REQUEST_OVERHEAD + padded_size(schema)
    if size <= MAX_REQUEST_BYTES:
        return None
    return (f"schema {schema.name!r} version {schema.version}: its reports, padded and encapsulated, take "
            f"{size} bytes, over the relay's {MAX_REQUEST_BYTES}: they cannot go through a relay")


# --- the relay's batches (application/ohttp-batch) -------------------------------------------


def frame_batch(requests: Iterable[bytes]) -> bytes:
    """``application/ohttp-batch``: each encapsulated request preceded by its length, 4 bytes
    big-endian."""
    parts = []
    for request in requests:
        if len(request) >= MAX_BATCH_REQUEST_LENGTH:
            raise ValueError(f"a request of {len(request)} bytes does not fit a batch's 4-byte length")
        parts.append(len(request).to_bytes(4, "big") + request)
    return b"".join(parts)


def split_batch(body: bytes, *, max_requests: int) -> list[bytes]:
    """The requests of an ``application/ohttp-batch`` body, in order; ``ValueError`` for a body that
    is empty, cut off inside a length or a request, or holds more than ``max_requests``."""
    if not body:
        raise ValueError("the batch is empty")
    return _length_prefixed_items(body, 4, "request", most=max_requests)


def _length_prefixed_items(data: bytes, length_bytes: int, what: str, most: int | None = None) -> list[bytes]:
    """The items of ``data``, each preceded by its length in ``length_bytes`` bytes big-endian;
    ``ValueError`` naming the item cut off, or when there are more than ``most``."""
    items: list[bytes] = []
    offset = 0
    while offset < len(data):
        if len(items) == most:
            raise ValueError(f"there are more than {most} {what}s")
        if offset + length_bytes > len(data):
            raise ValueError(f"{what} {len(items)}: its {length_bytes}-byte length is cut off")
        length = int.from_bytes(data[offset:offset + length_bytes], "big")
        offset += length_bytes
        if offset + length > len(data):
            raise ValueError(f"{what} {len(items)}: {length} bytes announced, {len(data) - offset} left")
        items.append(data[offset:offset + length])
        offset += length
    return items
