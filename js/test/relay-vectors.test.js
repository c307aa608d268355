// The relay module's bytes against the vectors both clients pass (../tests/vectors/, described in
// its README): RFC 9180's test vectors for the one suite (DHKEM(X25519, HKDF-SHA256), HKDF-SHA256,
// AES-128-GCM, mode base), RFC 9458 Appendix A's request half, relay.json (padded sizes, messages
// and requests with fixed keys); and the Binary HTTP request of DESIGN.md "Bytes" field by field.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { bhttpRequest, chooseKeyConfig, encap, encapsulate, keySchedule, paddedSize, relayRefusal, setupBaseSender, varint,
  MAX_REQUEST_BYTES, REQUEST_OVERHEAD } from "../dist/relay.js";
import { maxReportBytes, parseJson, parseSchema } from "../dist/index.js";

const hex = (s) => Uint8Array.from(Buffer.from(s, "hex"));
const toHex = (b) => Buffer.from(b).toString("hex");
const vectors = (name) => JSON.parse(readFileSync(new URL(`../../tests/vectors/${name}`, import.meta.url), "utf8"));

test("RFC 9180 A.1.1, mode base: enc, the shared secret, the key schedule and every encryption", async () => {
  const [v] = vectors("hpke_rfc9180.json");
  assert.deepEqual([v.mode, v.kem_id, v.kdf_id, v.aead_id], [0, 32, 1, 1]);
  const { sharedSecret, enc } = await encap(hex(v.pkRm), hex(v.skEm));
  assert.equal(toHex(enc), v.enc);
  assert.equal(toHex(enc), v.pkEm);
  assert.equal(toHex(sharedSecret), v.shared_secret);
  const schedule = await keySchedule(sharedSecret, hex(v.info));
  assert.equal(toHex(schedule.key), v.key);
  assert.equal(toHex(schedule.baseNonce), v.base_nonce);
  // The encryptions under sequence numbers 0 to 256, in order (the exports are not used: the client exports nothing).
  const context = await setupBaseSender(hex(v.pkRm), hex(v.info), hex(v.skEm));
  for (const [seq, e] of v.encryptions.entries()) {
    assert.equal(toHex(await context.seal(hex(e.aad), hex(e.pt))), e.ct, `sequence number ${seq}`);
  }
});

test("RFC 9458 Appendix A: the key configuration is read, and the request encapsulated byte for byte", async () => {
  const a = vectors("ohttp_rfc9458.json");
  const keys = Buffer.concat([Buffer.from([0, hex(a.key_config).length]), hex(a.key_config)]); // application/ohttp-keys
  const config = chooseKeyConfig(new Uint8Array(keys));
  assert.equal(config.keyId, hex(a.key_config)[0]);
  assert.equal(toHex(config.publicKey), a.public_key);
  const request = await encapsulate(config, hex(a.request), hex(a.ephemeral_private_key));
  assert.equal(toHex(request), a.encapsulated_request);
  assert.equal(toHex(request.subarray(7, 39)), a.ephemeral_public_key);
  // A fresh ephemeral key each time otherwise: same header, another enc.
  const fresh = await encapsulate(config, hex(a.request));
  assert.equal(toHex(fresh.subarray(0, 7)), a.encapsulated_request.slice(0, 14));
  assert.notEqual(toHex(fresh.subarray(7, 39)), a.ephemeral_public_key);
});

test("key configurations: the first usable one is taken; malformed bodies are refused saying why", () => {
  const config = (id, kem, pairs, key = 0x11) => {
    const body = [id, kem >> 8, kem & 255, ...Array(kem === 0x20 ? 32 : 65).fill(key), 0, pairs.length * 4];
    for (const [kdf, aead] of pairs) body.push(0, kdf, 0, aead);
    return [body.length >> 8, body.length & 255, ...body];
  };
  const body = (...configs) => Uint8Array.from(configs.flat());
  // A P-256 key first, then X25519 with only ChaCha20, then the usable one.
  const chosen = chooseKeyConfig(body(config(1, 0x10, [[1, 1]]), config(2, 0x20, [[1, 3]]), config(3, 0x20, [[1, 3], [1, 1]], 0x33)));
  assert.equal(chosen.keyId, 3);
  assert.deepEqual([...chosen.publicKey], Array(32).fill(0x33));
  assert.throws(() => chooseKeyConfig(new Uint8Array(0)), /empty/);
  assert.throws(() => chooseKeyConfig(body(config(2, 0x20, [[1, 3]]))), /no key configuration with KEM 0x0020 and \(KDF 0x0001, AEAD 0x0001\)/);
  assert.throws(() => chooseKeyConfig(body(config(1, 0x20, [[1, 1]])).subarray(0, 20)), /runs past/);
  const bad = body(config(1, 0x20, [[1, 1]]));
  bad[2 + 1 + 2 + 32 + 1] = 6; // the low byte of the pairs' length: not a multiple of 4
  assert.throws(() => chooseKeyConfig(bad), /malformed/);
});

test("the Binary HTTP request of DESIGN 'Bytes': known-length POST https, empty authority, one header, empty trailer, zero padding", () => {
  const content = new TextEncoder().encode('{"reports":[{"id":"x"}]}');
  const padded = bhttpRequest(content, 1024);
  assert.equal(padded.length, 1024);
  const expected = Buffer.concat([
    Buffer.from([0]), // known-length request
    Buffer.from([4]), Buffer.from("POST"), Buffer.from([5]), Buffer.from("https"), Buffer.from([0]), Buffer.from([15]), Buffer.from("/api/v1/reports"),
    Buffer.from([30, 12]), Buffer.from("content-type"), Buffer.from([16]), Buffer.from("application/json"),
    Buffer.from([content.length]), content, Buffer.from([0]),
  ]);
  assert.equal(toHex(padded.subarray(0, expected.length)), toHex(expected));
  assert.ok(padded.subarray(expected.length).every((b) => b === 0));
  assert.throws(() => bhttpRequest(content, 64), /over its padded size 64/);
  // Varints in their shortest form (RFC 9000 §16).
  assert.equal(toHex(varint(63)), "3f");
  assert.equal(toHex(varint(64)), "4040");
  assert.equal(toHex(varint(16383)), "7fff");
  assert.equal(toHex(varint(16384)), "80004000");
});

test("the padded size: the smallest multiple of 1024 not below the longest message; over 64 KiB the relay is refused", () => {
  const schema = parseSchema({ name: "app-usage", version: 1, epsilon: 2, window: "day", attributes: [
    { name: "dark_mode", type: "boolean" }, { name: "os", type: "categorical", categories: ["linux", "macos", "windows", "other"] }] });
  const max = maxReportBytes(schema);
  const size = paddedSize(max);
  assert.equal(size % 1024, 0);
  // The longest content (a report of `max` characters in Python's spacing) fits; one more KiB would be too much.
  const longest = new Uint8Array(max + '{"reports":[]}'.length);
  assert.equal(bhttpRequest(longest, size).length, size);
  assert.ok(size - 1024 < 61 + 2 + longest.length + 1);
  assert.equal(relayRefusal("app-usage", 1, max), undefined);
  // The largest bound that still fits in 64 KiB less the request's overhead, and one past it.
  let fits = max;
  while (paddedSize(fits + 1) + REQUEST_OVERHEAD <= MAX_REQUEST_BYTES) fits++;
  assert.equal(paddedSize(fits), 64512);
  assert.match(relayRefusal("big", 2, fits + 1), /^the schema big version 2 cannot go through a relay: its requests would be 65591 bytes, over 65536$/);
});

// tests/vectors/relay.json (written by tests/vectors/generate.py): per schema version its padded
// size; per case the content bytes, the padded message and the request encapsulated with fixed keys.
test("tests/vectors/relay.json: padded sizes, messages and encapsulated requests byte for byte", async () => {
  const v = parseJson(readFileSync(new URL("../../tests/vectors/relay.json", import.meta.url), "utf8"));
  const schemas = new Map(v.schemas.map((s) => [s.name, parseSchema(s)]));
  for (const size of v.sizes) {
    const max = maxReportBytes(schemas.get(size.schema));
    assert.equal(paddedSize(max), size.padded_size, size.name);
    assert.equal(relayRefusal(size.schema, 1, max) !== undefined, size.refused, size.name);
  }
  for (const c of v.cases) {
    const schema = schemas.get(c.schema);
    assert.equal(paddedSize(maxReportBytes(schema)), c.padded_size, c.name);
    const message = bhttpRequest(hex(c.content), c.padded_size);
    assert.equal(toHex(message), c.message, c.name);
    const config = chooseKeyConfig(hex(c.key_configs));
    assert.equal(config.keyId, c.key_id, c.name);
    assert.equal(toHex(await encapsulate(config, message, hex(c.ephemeral_private_key))), c.request, c.name);
  }
  // A schema too big for a relay: its requests would pass 64 KiB.
  const big = v.too_big;
  const categories = Array.from({ length: big.categories }, (_, i) => `c${i}`);
  const schema = parseSchema({ name: "too-big", version: 1, epsilon: big.epsilon, window: "day", attributes: Array.from({ length: big.attributes },
    (_, i) => ({ name: `a${i}`, type: "categorical", categories, mechanism: big.mechanism })) });
  assert.equal(paddedSize(maxReportBytes(schema)), big.padded_size);
  assert.equal(relayRefusal("too-big", 1, maxReportBytes(schema)) !== undefined, big.refused);
});
