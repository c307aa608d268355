"""shared/ohttp.py: key configurations, the padded Binary HTTP request, encapsulation (RFC 9458
Appendix A's request half, and tests/vectors/relay.json), padded sizes and the relay's batches."""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import pytest

from ldp_telemetry.shared import ohttp, parse_schema, randomize
from ldp_telemetry.shared.reports import validate_report

VECTORS = Path(__file__).parent / "vectors"
RFC9458 = json.loads((VECTORS / "ohttp_rfc9458.json").read_text(encoding="utf-8"))
RELAY = json.loads((VECTORS / "relay.json").read_text(encoding="utf-8"))
_spec = importlib.util.spec_from_file_location("vectors_generate", VECTORS / "generate.py")
assert _spec is not None and _spec.loader is not None
generate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(generate)
h = bytes.fromhex
KEY = ohttp.KeyConfig(5, bytes(range(32)))


def test_the_constants_are_the_designs():
    assert (ohttp.KEM_X25519, ohttp.KDF_HKDF_SHA256, ohttp.AEAD_AES_128_GCM) == (0x20, 1, 1)
    assert (ohttp.HEADER_BYTES, ohttp.REQUEST_OVERHEAD, ohttp.PAD_UNIT, ohttp.MAX_REQUEST_BYTES) == (7, 55, 1024, 65536)


# --- RFC 9458 Appendix A, the request half -------------------------------------------------------


def test_rfc_9458_key_configuration():
    """Its configuration lists (HKDF-SHA256, AES-128-GCM) and (HKDF-SHA256, ChaCha20Poly1305): the
    first is ours. Its keys list is the configuration with its 2-byte length."""
    config_bytes = h(RFC9458["key_config"])
    config = ohttp.choose_key_config(len(config_bytes).to_bytes(2, "big") + config_bytes)
    assert config == ohttp.KeyConfig(1, h(RFC9458["public_key"]))
    assert ohttp.public_key_of(h(RFC9458["private_key"])) == config.public_key
    # Ours lists one pair: the RFC's bytes less the ChaCha20Poly1305 pair.
    assert config.encode().hex() == "010020" + RFC9458["public_key"] + "000400010001"


def test_rfc_9458_encapsulated_request():
    config_bytes = h(RFC9458["key_config"])
    config = ohttp.choose_key_config(len(config_bytes).to_bytes(2, "big") + config_bytes)
    request = ohttp.encapsulate(config, h(RFC9458["request"]), ephemeral_private=h(RFC9458["ephemeral_private_key"]))
    assert request.hex() == RFC9458["encapsulated_request"]
    assert request[ohttp.HEADER_BYTES:ohttp.HEADER_BYTES + 32].hex() == RFC9458["ephemeral_public_key"]
    assert ohttp.request_key_id(request) == 1
    assert ohttp.decapsulate(request, h(RFC9458["private_key"])) == h(RFC9458["request"])


# --- tests/vectors/relay.json ------------------------------------------------------------------


@pytest.mark.parametrize("case", [pytest.param(c, id=c["name"]) for c in RELAY["cases"]])
def test_relay_vector(case):
    """From the case's key configurations, report and ephemeral key: the same content, message and
    request; and the receiver's key opens the request to the message, whose content is the report."""
    schema = parse_schema(next(s for s in RELAY["schemas"] if s["name"] == case["schema"]))
    made = generate.run_relay_request(schema, case)
    assert made == {k: case[k] for k in made}
    request, message = h(case["request"]), h(case["message"])
    assert len(request) == ohttp.REQUEST_OVERHEAD + case["padded_size"] and len(message) == case["padded_size"]
    assert ohttp.request_key_id(request) == case["key_id"] == generate.RELAY_KEY_ID
    assert ohttp.decapsulate(request, h(case["receiver_private_key"])) == message
    content = ohttp.bhttp_content(message)
    assert content == h(case["content"])
    assert json.loads(content) == {"reports": [case["report"]]}
    validate_report(case["report"], schema)


@pytest.mark.parametrize("size", [pytest.param(c, id=c["name"]) for c in RELAY["sizes"]])
def test_relay_vector_sizes(size):
    schema = parse_schema(next(s for s in RELAY["schemas"] if s["name"] == size["schema"]))
    assert generate.run_relay_size(schema) == {"padded_size": size["padded_size"], "refused": size["refused"]}


def test_relay_vector_too_big():
    assert RELAY["too_big"]["refused"] and RELAY["too_big"]["padded_size"] == 65536
    assert generate.run_relay_size(generate._too_big_schema()) == {"padded_size": 65536, "refused": True}


# --- key configurations ------------------------------------------------------------------------


def _config(key_id: int = 5, kem: int = 0x20, key: bytes = bytes(range(32)), pairs: bytes = h("00010001")) -> bytes:
    return bytes([key_id]) + kem.to_bytes(2, "big") + key + len(pairs).to_bytes(2, "big") + pairs


def _list(*configs: bytes) -> bytes:
    return b"".join(len(c).to_bytes(2, "big") + c for c in configs)


def test_key_configs_round_trip():
    configs = [ohttp.KeyConfig(2, bytes([2]) * 32), ohttp.KeyConfig(1, bytes([1]) * 32)]
    encoded = ohttp.encode_key_configs(configs)
    assert encoded == _list(_config(2, key=bytes([2]) * 32), _config(1, key=bytes([1]) * 32))
    assert ohttp.choose_key_config(encoded) == configs[0]  # newest first: the first is used


def test_the_first_usable_configuration_is_chosen():
    other_kem = bytes([1]) + (0x10).to_bytes(2, "big") + bytes(65) + h("000400010001")
    chacha_only = _config(2, pairs=h("00010003"))
    data = _list(other_kem, chacha_only, _config(3, pairs=h("0001000300010001")), _config(4))
    assert ohttp.choose_key_config(data) == ohttp.KeyConfig(3, bytes(range(32)))


@pytest.mark.parametrize("data, message", [
    (b"", "empty"),
    (b"\x00", "2-byte length is cut off"),
    (_list(_config())[:-1], "announced"),
    (_list(_config()) + b"\x00", "2-byte length is cut off"),
    (_list(b"\x01\x00"), "too short"),
    (_list(_config()[:20]), "cut off in its public key"),
    (_list(_config(pairs=b"")), "algorithms length 0"),
    (_list(_config(pairs=h("000100"))), "algorithms length 3"),
    (_list(_config() + b"\x00"), "exactly what follows"),
    (_list(_config(), b"\x01"), "key configuration 1: 1 bytes"),
    (_list(_config(pairs=h("00010003"))), "none of the 1"),
    (_list(_config(kem=0x21)), "none of the 1"),
])
def test_malformed_or_unusable_key_configs(data, message):
    with pytest.raises(ValueError, match=message):
        ohttp.choose_key_config(data)


@pytest.mark.parametrize("key_id, public_key", [(-1, bytes(32)), (256, bytes(32)), (True, bytes(32)),
                                                 (1, bytes(31)), (1, "x" * 32)])
def test_a_key_config_is_one_byte_and_32_bytes(key_id, public_key):
    with pytest.raises(ValueError, match="key id|32 bytes"):
        ohttp.KeyConfig(key_id, public_key)


def test_request_key_id():
    request = KEY.header + bytes(48)
    assert ohttp.request_key_id(request) == 5
    with pytest.raises(ValueError, match="at least 55"):
        ohttp.request_key_id(request[:54])
    for position in range(1, 7):  # any other KEM, KDF or AEAD
        changed = bytearray(request)
        changed[position] ^= 0x04
        with pytest.raises(ValueError, match="suite"):
            ohttp.request_key_id(bytes(changed))


def test_decapsulate_refuses_another_suite_and_a_wrong_key():
    private = ohttp.generate_private_key()
    config = ohttp.KeyConfig(3, ohttp.public_key_of(private))
    request = ohttp.encapsulate(config, b"hello")
    assert ohttp.decapsulate(request, private) == b"hello"
    with pytest.raises(ohttp.DecryptError):
        ohttp.decapsulate(request, ohttp.generate_private_key())
    with pytest.raises(ohttp.DecryptError):  # the header is bound through info
        ohttp.decapsulate(bytes([4]) + request[1:], private)
    with pytest.raises(ValueError, match="suite"):
        ohttp.decapsulate(request[:3] + b"\x02" + request[4:], private)
    assert issubclass(ohttp.DecryptError, ValueError)


# --- the Binary HTTP request -------------------------------------------------------------------

CONTENT = b'{"reports":[{"id":"x"}]}'


def test_the_request_bytes():
    message = ohttp.bhttp_request(CONTENT, 1024)
    head = ("00" + "04" + b"POST".hex() + "05" + b"https".hex() + "00" + "0f" + b"/api/v1/reports".hex()
            + "1e" + "0c" + b"content-type".hex() + "10" + b"application/json".hex())
    body = f"{len(CONTENT):02x}" + CONTENT.hex() + "00"
    assert message.hex() == head + body + "00" * (1024 - (len(head) + len(body)) // 2)
    assert ohttp.bhttp_content(message) == CONTENT


def test_a_message_must_fit_its_padded_size():
    unpadded = len(ohttp.bhttp_request(CONTENT, 1024).rstrip(b"\x00")) + 1  # the trailer section's 0
    assert len(ohttp.bhttp_request(CONTENT, unpadded)) == unpadded
    with pytest.raises(ValueError, match="over its padded size"):
        ohttp.bhttp_request(CONTENT, unpadded - 1)


@pytest.mark.parametrize("value, encoded", [(0, "00"), (63, "3f"), (64, "4040"), (16383, "7fff"), (16384, "80004000"),
                                            (2**30 - 1, "bfffffff"), (2**30, "c000000040000000")])
def test_varints_in_their_shortest_form(value, encoded):
    assert ohttp.varint(value).hex() == encoded


def test_content_lengths_of_every_varint_size():
    for size in (0, 63, 64, 16383, 16384, 40000):
        content = b"x" * size
        assert ohttp.bhttp_content(ohttp.bhttp_request(content, 65536)) == content


def _message(*, framing: str = "00", method: bytes = b"POST", scheme: bytes = b"https", authority: bytes = b"",
             path: bytes = b"/api/v1/reports", fields: list[tuple[bytes, bytes]] | None = None,
             content: bytes = CONTENT, trailer: str = "00", padding: bytes = bytes(16)) -> bytes:
    def prefixed(value: bytes) -> bytes:
        return ohttp.varint(len(value)) + value
    lines = b"".join(prefixed(n) + prefixed(v) for n, v in (fields if fields is not None else [ohttp.CONTENT_TYPE]))
    return (h(framing) + prefixed(method) + prefixed(scheme) + prefixed(authority) + prefixed(path) + prefixed(lines)
            + prefixed(content) + h(trailer) + padding)


def test_any_scheme_and_authority_are_accepted():
    assert ohttp.bhttp_content(_message(scheme=b"http", authority=b"aggregator.example")) == CONTENT


@pytest.mark.parametrize("message, complaint", [
    (_message(framing="4000", padding=b""), "not in its shortest form"),  # 0 in two bytes: DESIGN wants one
    (_message(framing="02"), "framing indicator 2"),
    (_message(framing="01"), "framing indicator 1"),
    (_message(method=b"GET"), "method b'GET'"),
    (_message(method=b"post"), "method b'post'"),
    (_message(path=b"/api/v1/reports/"), "path"),
    (_message(path=b"/api/v1/schemas"), "path"),
    (_message(fields=[]), "header fields"),
    (_message(fields=[(b"content-type", b"text/plain")]), "header fields"),
    (_message(fields=[(b"Content-Type", b"application/json")]), "header fields"),
    (_message(fields=[ohttp.CONTENT_TYPE, (b"cookie", b"a=b")]), "header fields"),
    (_message(fields=[ohttp.CONTENT_TYPE, ohttp.CONTENT_TYPE]), "header fields"),
    (_message(trailer="03" + b"a\x00\x00".hex()), "trailer section of 3"),
    (_message(padding=bytes(5) + b"\x01"), "non-zero"),
    (_message(padding=b"\x80"), "non-zero"),
    (_message(trailer="", padding=b""), "ends before its trailer"),
    (b"", "ends before its framing indicator"),
    (h("00") + b"\x04POS", "announces 4 bytes, 3 left"),
    (h("0040"), "ends inside the 2-byte integer"),
    (h("0004") + b"POST" + h("c0000000"), "ends inside the 8-byte integer"),
    (_message()[:70], "content announces"),
])
def test_bhttp_content_refuses(message, complaint):
    with pytest.raises(ValueError, match=complaint.replace("(", r"\(").replace("[", r"\[")):
        ohttp.bhttp_content(message)


def test_every_truncation_of_a_request_is_refused():
    message = ohttp.bhttp_request(CONTENT, 0 + len(_message(padding=b"")))
    for end in range(len(message)):
        with pytest.raises(ValueError):
            ohttp.bhttp_content(message[:end])


# --- padded sizes ------------------------------------------------------------------------------


def _records(schema, rng: random.Random):
    """Many records of ``schema``: each attribute's example, or a value the attribute would take."""
    for _ in range(60):
        yield {a.name: a.kind.example(a) if rng.random() < 0.3 else _value(a, rng) for a in schema.attributes}


def _value(attribute, rng: random.Random):
    """A random true value of the attribute, by what the derived schema shows of it."""
    shown = attribute.to_dict()
    if "categories" in shown and "edges" not in shown:
        return rng.choice(shown["categories"])
    if "range" in shown:
        lo, hi = shown["range"]
        return rng.uniform(lo - 1, hi + 1)
    if "edges" in shown:
        return rng.uniform(shown["edges"][0] - 1, shown["edges"][-1] + 1)
    if "max_length" in shown:
        return "".join(rng.choice("ab\u00e9\u65e5\U0001f600\u202e") for _ in range(rng.randrange(80)))
    return rng.random() < 0.5


WIDE_SCHEMAS = [
    {"name": "long-categories", "version": 3, "epsilon": 6.0, "window": "hour", "attributes": [
        {"name": f"c{i}", "type": "categorical", "mechanism": "grr", "categories": ["\u00e9" * 64, "\u65e5" * 64, "x"]}
        for i in range(40)]},
    {"name": "numbers", "version": 1, "epsilon": 0.5, "attributes": [
        {"name": f"n{i}", "type": "numeric", "range": [-1e9, 1e-9 * (i + 1)], "mechanism": m}
        for i, m in enumerate(["duchi", "pm", "hm", "laplace"] * 8)]},
    {"name": "bits", "version": 1, "epsilon": 1.0, "attributes": [
        {"name": "o", "type": "categorical", "mechanism": "oue", "categories": [f"c{j}" for j in range(1024)]}]},
]


@pytest.mark.parametrize("spec", [pytest.param(s, id=s["name"]) for s in [*generate.SCHEMAS, *WIDE_SCHEMAS]])
def test_every_report_fits_the_padded_size(spec):
    schema = parse_schema(spec)
    size = ohttp.padded_size(schema)
    assert size % ohttp.PAD_UNIT == 0 and ohttp.relay_refusal(schema) is None
    rng = random.Random(spec["name"])
    secret = bytes(32) if schema.epsilon_permanent is not None else None
    for record in _records(schema, rng):
        for window in ("2026-11-21", "2026-11-21T13"):
            if len(window) == (10 if schema.window == "day" else 13):
                report = randomize(schema, record, window=window, device_secret=secret)
                report["id"] = "A" * 64  # the longest id another client may send
                ohttp.bhttp_request(ohttp.report_content(report), size)  # raises if it does not fit


def test_padded_size_grows_by_units_and_the_64_kib_refusal():
    """OUE attributes of 1,024 categories (3 characters a bit): 20 fit under 64 KiB less 55 bytes, 21 do not."""
    def schema(attributes: int):
        return parse_schema({"name": "oue", "version": 1, "epsilon": 2.0, "attributes": [
            {"name": f"a{i}", "type": "categorical", "mechanism": "oue", "categories": [str(j) for j in range(1024)]}
            for i in range(attributes)]})
    sizes = [ohttp.padded_size(schema(n)) for n in (1, 2, 20, 21)]
    assert sizes == sorted(sizes) and all(s % 1024 == 0 for s in sizes)
    assert sizes[2] + ohttp.REQUEST_OVERHEAD <= ohttp.MAX_REQUEST_BYTES and ohttp.relay_refusal(schema(20)) is None
    refusal = ohttp.relay_refusal(schema(21))
    assert refusal is not None and "'oue' version 1" in refusal and "65536" in refusal


# --- batches -----------------------------------------------------------------------------------


def test_batches_frame_and_split():
    requests = [b"", b"a", bytes(1079), b"\xff" * 70000]
    body = ohttp.frame_batch(requests)
    assert body[:9] == h("00000000" + "00000001") + b"a"
    assert ohttp.split_batch(body, max_requests=4) == requests
    assert ohttp.frame_batch([]) == b""


@pytest.mark.parametrize("body, limit, complaint", [
    (b"", 10, "empty"),
    (h("000000"), 10, "request 0: its 4-byte length is cut off"),
    (h("00000002") + b"a", 10, "request 0: 2 bytes announced, 1 left"),
    (h("00000001") + b"a" + h("00"), 10, "request 1: its 4-byte length"),
    (ohttp.frame_batch([b"a", b"b", b"c"]), 2, "more than 2 requests"),
])
def test_split_batch_refuses(body, limit, complaint):
    with pytest.raises(ValueError, match=complaint):
        ohttp.split_batch(body, max_requests=limit)
