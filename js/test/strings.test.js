// String attributes beyond the vectors: the bundled SHA-256 against known digests and node:crypto,
// the exact hash against BigInt, preparation's edges, the schema rules, and a privacy audit of
// olh (as privacy.test.js does for the other mechanisms).
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash, getRandomValues } from "node:crypto";
import { fingerprint, olhHash, P, parseSchema, prepareText, randomize, SchemaError, sha256, SystemRandom, validateReport } from "../dist/index.js";

const hex = (b) => Buffer.from(b).toString("hex");
const ascii = (s) => new TextEncoder().encode(s);

test("sha256: the FIPS 180-4 examples and the empty message", () => {
  assert.equal(hex(sha256(ascii(""))), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  assert.equal(hex(sha256(ascii("abc"))), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  assert.equal(hex(sha256(ascii("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"))),
    "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  assert.equal(hex(sha256(new Uint8Array(1_000_000).fill(0x61))), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
});

test("sha256: every length from 0 to 300 bytes (each padding case) agrees with node:crypto", () => {
  for (let n = 0; n <= 300; n++) {
    const data = getRandomValues(new Uint8Array(n));
    assert.equal(hex(sha256(data)), createHash("sha256").update(data).digest("hex"), `${n} bytes`);
  }
});

test("sha256: its computed constants are far from a rounding boundary (any engine's sqrt and cbrt give them)", () => {
  // The first 32 fraction bits of p^(1/k), and how far the rest is from 0 or 1, in exact integers.
  const primes = [];
  for (let n = 2; primes.length < 64; n++) if (primes.every((p) => n % p)) primes.push(n);
  let least = 1;
  for (const [k, count] of [[2, 8], [3, 64]]) {
    for (const p of primes.slice(0, count)) {
      const shift = 72n; // root scaled by 2^72: 32 fraction bits kept, 40 beyond
      const target = BigInt(p) << (shift * BigInt(k));
      let lo = 0n;
      let hi = 1n << (shift + 4n);
      while (hi - lo > 1n) {
        const mid = (lo + hi) >> 1n;
        if (mid ** BigInt(k) <= target) lo = mid;
        else hi = mid;
      }
      const rest = Number(lo & ((1n << 40n) - 1n)) / 2 ** 40;
      least = Math.min(least, rest, 1 - rest);
    }
  }
  // At least 2^-8 of the last kept bit: some thousand ulps of a root below 8.
  assert.ok(least > 2 ** -8, `${least}`);
});

test("the hash is exact: ((a·x + b) mod P) mod g as BigInt computes it, at the extremes and at random", () => {
  const cases = [[P - 1, P - 1, P - 1, 65536], [1, 0, 0, 2], [P - 1, 0, P - 1, 7], [65535, P - 1, P - 2, 65536]];
  const words = getRandomValues(new Uint32Array(3000));
  for (let i = 0; i < 1000; i++) {
    cases.push([1 + (words[3 * i] % (P - 1)), words[3 * i + 1] % P, words[3 * i + 2] % P, 2 + (words[3 * i] % 65535)]);
  }
  for (const [a, b, x, g] of cases) {
    assert.equal(olhHash(a, b, x, g), Number(((BigInt(a) * BigInt(x) + BigInt(b)) % BigInt(P)) % BigInt(g)), `${[a, b, x, g]}`);
  }
  assert.equal(fingerprint("example.org"), 367419725);
});

test("preparation: code points, not UTF-16 units; lone surrogates anywhere; never refused for its content", async () => {
  assert.equal(prepareText("\ud83d\ude00x", 1), "\ud83d\ude00");
  assert.equal(prepareText("x\ud83d", 64), "x\ufffd");
  assert.equal(prepareText("\ude00\ud83d", 64), "\ufffd\ufffd");
  assert.equal(prepareText("a\u00adb", 64), "a\ufffdb"); // a soft hyphen is a format character
  const schema = { name: "s", version: 1, epsilon: 2, attributes: [{ name: "s", type: "string", max_length: 3 }] };
  const report = await randomize(schema, { s: "\u0000\u202e\ud800 anything at all" }, { window: "2026-11-21" });
  assert.deepEqual(Object.keys(report.values.s), ["a", "b", "y"]);
  validateReport(report, parseSchema(schema));
});

test("schemas: a string's g and p are checked against the client's own; discovery needs an alphabet", () => {
  const derived = parseSchema({ name: "s", version: 1, epsilon: 2, attributes: [{ name: "s", type: "string" }] });
  const a = derived.attributes[0];
  assert.equal(a.params.g, 8);
  const served = (extra) => ({ name: "s", version: 1, epsilon: 2, attributes: [{ name: "s", type: "string", ...extra }] });
  assert.throws(() => parseSchema(served({ g: 8.5 })), (e) => e instanceof SchemaError && e.field === "attributes[0].g");
  assert.throws(() => parseSchema(served({ p: a.p + 1e-6 })), (e) => e instanceof SchemaError && e.field === "attributes[0].p");
  assert.equal(parseSchema(served({ p: a.p + 1e-12 })).attributes[0].p, a.p + 1e-12); // the served p is used
  assert.throws(() => parseSchema(served({ discover: true })), (e) => e instanceof SchemaError && e.field === "attributes[0].alphabet");
  assert.throws(() => parseSchema({ name: "n", version: 1, epsilon: 2, attributes: [{ name: "n", type: "boolean", g: 2 }] }),
    (e) => e instanceof SchemaError && e.field === "attributes[0].g");
});

test("privacy: olh at epsilon 1 (the report's hash of one string against another's)", () => {
  // g = 4 at ε = 1. For the report's own seed, y = h(x) is the most telling event against x'
  // when h(x) ≠ h(x'): P = p·P(h ≠ h') under x and (1 - p)/(g - 1)·P(h ≠ h') under x', whose
  // ratio is e^ε exactly; "supports x" alone (ratio g·p) tells less.
  const N = 60_000;
  const schema = parseSchema({ name: "audit", version: 1, epsilon: 1, attributes: [{ name: "a", type: "string" }] });
  const a = schema.attributes[0];
  const source = new SystemRandom();
  const [x, other] = [fingerprint("x"), fingerprint("y")];
  const rate = (truth, event) => {
    let hits = 0;
    for (let i = 0; i < N; i++) if (event(a.mech.encode(a, truth, source))) hits++;
    return hits / N;
  };
  const telling = (r) => r.y === olhHash(r.a, r.b, x, 4) && r.y !== olhHash(r.a, r.b, other, 4);
  const supports = (r) => r.y === olhHash(r.a, r.b, x, 4);
  for (const [event, most] of [[telling, true], [supports, false]]) {
    const p = rate("x", event);
    const q = rate("y", event);
    const eps = Math.abs(Math.log(p / q));
    const tolerance = 4.5 * Math.sqrt((1 - p) / (N * p) + (1 - q) / (N * q));
    assert.ok(eps <= 1 + tolerance, `olh: empirical epsilon ${eps.toFixed(4)} over 1 + ${tolerance.toFixed(4)}`);
    if (most) assert.ok(eps >= 1 - tolerance, `olh: the most telling event gives ${eps.toFixed(4)}, far below 1`);
  }
});
