"""shared/hpke.py against RFC 9180's test vectors for its one suite, mode base, and against
``cryptography``'s own HPKE (an independent implementation) in both directions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ldp_telemetry.shared import hpke, ohttp

VECTORS = Path(__file__).parent / "vectors"
(RFC9180,) = json.loads((VECTORS / "hpke_rfc9180.json").read_text(encoding="utf-8"))
RFC9458 = json.loads((VECTORS / "ohttp_rfc9458.json").read_text(encoding="utf-8"))
h = bytes.fromhex


def test_the_vector_is_the_suite_in_base_mode():
    assert (RFC9180["mode"], RFC9180["kem_id"], RFC9180["kdf_id"], RFC9180["aead_id"]) == (
        hpke.MODE_BASE, hpke.KEM_X25519, hpke.KDF_HKDF_SHA256, hpke.AEAD_AES_128_GCM)


def test_key_pairs_and_enc():
    assert hpke.public_key_of(h(RFC9180["skRm"])).hex() == RFC9180["pkRm"]
    assert hpke.public_key_of(h(RFC9180["skEm"])).hex() == RFC9180["pkEm"]
    enc, _ = hpke.setup_base_sender(h(RFC9180["pkRm"]), h(RFC9180["info"]), ephemeral_private=h(RFC9180["skEm"]))
    assert enc.hex() == RFC9180["enc"] == RFC9180["pkEm"]


@pytest.mark.parametrize("side", ["sender", "receiver"])
def test_the_key_schedule(side):
    if side == "sender":
        _, context = hpke.setup_base_sender(h(RFC9180["pkRm"]), h(RFC9180["info"]),
                                            ephemeral_private=h(RFC9180["skEm"]))
    else:
        context = hpke.setup_base_receiver(h(RFC9180["enc"]), h(RFC9180["skRm"]), h(RFC9180["info"]))
    schedule = context.schedule
    assert {k: getattr(schedule, k).hex() for k in ("shared_secret", "key_schedule_context", "secret", "key",
                                                    "base_nonce", "exporter_secret")} == {
        k: RFC9180[k] for k in ("shared_secret", "key_schedule_context", "secret", "key", "base_nonce",
                                "exporter_secret")}


def test_every_encryption_of_the_vector():
    """257 messages in order: each nonce (base_nonce XOR the sequence number, past one byte) and
    ciphertext as listed, and the receiver opens each."""
    _, sender = hpke.setup_base_sender(h(RFC9180["pkRm"]), h(RFC9180["info"]), ephemeral_private=h(RFC9180["skEm"]))
    receiver = hpke.setup_base_receiver(h(RFC9180["enc"]), h(RFC9180["skRm"]), h(RFC9180["info"]))
    assert len(RFC9180["encryptions"]) == 257
    for i, case in enumerate(RFC9180["encryptions"]):
        assert sender.nonce().hex() == case["nonce"], i
        assert sender.seal(h(case["aad"]), h(case["pt"])).hex() == case["ct"], i
        assert receiver.open(h(case["aad"]), h(case["ct"])).hex() == case["pt"], i


def test_single_shot_seal_and_open():
    first = RFC9180["encryptions"][0]
    enc, ciphertext = hpke.seal_base(h(RFC9180["pkRm"]), h(RFC9180["info"]), h(first["aad"]), h(first["pt"]),
                                     ephemeral_private=h(RFC9180["skEm"]))
    assert (enc.hex(), ciphertext.hex()) == (RFC9180["enc"], first["ct"])
    assert hpke.open_base(enc, h(RFC9180["skRm"]), h(RFC9180["info"]), h(first["aad"]), ciphertext) == h(first["pt"])


def test_a_fresh_ephemeral_key_each_time():
    public = hpke.public_key_of(hpke.generate_private_key())
    sealed = {hpke.seal_base(public, b"info", b"", b"same message") for _ in range(5)}
    assert len(sealed) == 5


@pytest.mark.parametrize("damage", ["ciphertext", "tag", "aad", "info", "enc", "key"])
def test_what_does_not_open(damage):
    first = RFC9180["encryptions"][0]
    enc, ct, aad, info, key = h(RFC9180["enc"]), h(first["ct"]), h(first["aad"]), h(RFC9180["info"]), h(RFC9180["skRm"])
    if damage == "ciphertext":
        ct = bytes([ct[0] ^ 1]) + ct[1:]
    elif damage == "tag":
        ct = ct[:-1] + bytes([ct[-1] ^ 0x80])
    elif damage == "aad":
        aad += b"!"
    elif damage == "info":
        info = info[:-1]
    elif damage == "enc":
        enc = hpke.public_key_of(hpke.generate_private_key())
    else:
        key = hpke.generate_private_key()
    with pytest.raises(hpke.DecryptError):
        hpke.open_base(enc, key, info, aad, ct)


def test_a_small_order_enc_is_refused():
    """X25519 with a small-order point gives zero: RFC 9180 §7.1.4 says to abort."""
    with pytest.raises(hpke.DecryptError, match="all-zero"):
        hpke.setup_base_receiver(bytes(32), h(RFC9180["skRm"]), b"")
    with pytest.raises(hpke.DecryptError, match="32 bytes"):
        hpke.setup_base_receiver(bytes(31), h(RFC9180["skRm"]), b"")


@pytest.mark.parametrize("bad", [b"", bytes(31), bytes(33), "00" * 32])
def test_keys_must_be_32_raw_bytes(bad):
    with pytest.raises(ValueError, match="32 raw bytes"):
        hpke.public_key_of(bad)
    with pytest.raises(ValueError, match="32 raw bytes"):
        hpke.seal_base(h(RFC9180["pkRm"]), b"", b"", b"x", ephemeral_private=bad)


# --- cryptography's own HPKE, as an outside truth -----------------------------------------------


def _suite():
    """cryptography's HPKE for our suite (cryptography ≥ 48); the dev extra requires it."""
    module = pytest.importorskip("cryptography.hazmat.primitives.hpke",
                                 reason="cryptography < 48 has no hpke module to cross-check against")
    return module.Suite(module.KEM.X25519, module.KDF.HKDF_SHA256, module.AEAD.AES_128_GCM)


def _keys():
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    private = hpke.generate_private_key()
    return private, X25519PrivateKey.from_private_bytes(private)


@pytest.mark.parametrize("size", [0, 1, 1024, 65000])
def test_cryptography_opens_what_we_encapsulate(size):
    suite = _suite()
    private, theirs = _keys()
    config = ohttp.KeyConfig(9, hpke.public_key_of(private))
    message = bytes(range(256)) * (size // 256) + bytes(size % 256)
    request = ohttp.encapsulate(config, message)
    info = b"message/bhttp request\x00" + request[:ohttp.HEADER_BYTES]
    assert suite.decrypt(request[ohttp.HEADER_BYTES:], theirs, info=info) == message


@pytest.mark.parametrize("size", [0, 1, 1024, 65000])
def test_we_decapsulate_what_cryptography_seals(size):
    suite = _suite()
    private, theirs = _keys()
    header = ohttp.KeyConfig(200, hpke.public_key_of(private)).header
    message = b"\x5a" * size
    sealed = suite.encrypt(message, theirs.public_key(), info=b"message/bhttp request\x00" + header)
    assert ohttp.decapsulate(header + sealed, private) == message
    with pytest.raises(hpke.DecryptError):  # and its info binds the header: another key id fails
        ohttp.decapsulate(bytes([201]) + header[1:] + sealed, private)


def test_the_rfc_9458_request_opens_in_cryptography():
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    suite = _suite()
    request = h(RFC9458["encapsulated_request"])
    opened = suite.decrypt(request[ohttp.HEADER_BYTES:], X25519PrivateKey.from_private_bytes(h(RFC9458["private_key"])),
                           info=h(RFC9458["info"]))
    assert opened == h(RFC9458["request"])
