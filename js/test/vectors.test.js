// Every case of tests/vectors/ that concerns a client, byte for byte: the same files the Python
// code is checked against (tests/test_vectors.py), so the two clients cannot drift apart.
// The checks are plain functions of a vector file's content, so the last test can run them on a
// copy with one byte changed and show that they notice.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import {
  FixedBytes, bernoulli, randbelow, hmacKey, hmacStream, parseSchema, schemaDict, SchemaError,
  randomize, RecordError, permanentMessage, windowOf, windowStart, windowEnd, overlapping, ROLLUP, validateReport,
  prepareText, prefix, fingerprint, olhHash, P, parseJson, PyFloat,
} from "../dist/index.js";

const VECTORS = fileURLToPath(new URL("../../tests/vectors/", import.meta.url));
export const load = (name) => readFileSync(VECTORS + name, "utf8");
const hex = (s) => Uint8Array.from(s.match(/../g) ?? [], (h) => parseInt(h, 16));
const toHex = (b) => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");

function refusedWith(fn, Kind, field, name) {
  assert.throws(fn, (e) => {
    assert.ok(e instanceof Kind, `${name}: expected a ${Kind.name}, got ${e}`);
    assert.equal(e.field, field, name);
    return true;
  }, name);
}

async function refusedAsync(promise, Kind, field) {
  await assert.rejects(promise, (e) => {
    assert.ok(e instanceof Kind, `expected a ${Kind.name}, got ${e}`);
    assert.equal(e.field, field);
    return true;
  });
}

// -- the checks, one per file ---------------------------------------------------------------

export async function checkRandomness(text) {
  const v = JSON.parse(text);
  // The schemas as served, read as the client reads them (parseJson): an edge written 100.0 is
  // written so again in memoisation's HMAC message, as in Python.
  const schemas = new Map(parseJson(text).schemas.map((s) => [s.name, s]));
  let n = 0;
  for (const c of v.bernoulli) {
    const src = new FixedBytes(hex(c.bytes));
    assert.equal(bernoulli(c.p, src), c.result, c.name);
    assert.equal(src.used, hex(c.bytes).length, c.name);
    n++;
  }
  for (const c of v.randbelow) {
    const src = new FixedBytes(hex(c.bytes));
    assert.equal(randbelow(c.n, src), c.result, c.name);
    assert.equal(src.used, hex(c.bytes).length, c.name);
    n++;
  }
  for (const c of v.hmac_stream) {
    const key = await hmacKey(hex(c.key));
    const bytes = await hmacStream(key, new TextEncoder().encode(c.message), Math.ceil(c.length / 32));
    assert.equal(toHex(bytes.subarray(0, c.length)), c.bytes, c.name);
    n++;
  }
  for (const c of v.reports) {
    const derived = schemas.get(c.schema);
    const schema = parseSchema(derived);
    const secret = c.device_secret === null ? undefined : hex(c.device_secret);
    const src = new FixedBytes(hex(c.random_bytes));
    const report = await randomize(derived, c.record, { window: c.window, deviceSecret: secret, source: src });
    assert.deepEqual(report, c.report, c.name);
    assert.equal(src.used, hex(c.random_bytes).length, `${c.name}: every random byte read, no more`);
    for (const [name, p] of Object.entries(c.permanent ?? {})) {
      const a = schema.byName.get(name);
      const truth = a.type === "boolean" ? c.record[name] : a.type === "histogram" ? bucketIndex(a, c.record[name]) : a.indexOf.get(c.record[name]);
      const message = permanentMessage(schema, a, truth);
      assert.equal(message, p.message, `${c.name}: HMAC message of ${name}`);
      const stream = await hmacStream(await hmacKey(secret), new TextEncoder().encode(message), 2 + a.categories.length);
      assert.deepEqual(a.mech.permanentResponse(a, truth, new FixedBytes(stream, "the HMAC stream")), p.response, `${c.name}: permanent response of ${name}`);
    }
    n++;
  }
  // Strings: a value as the device prepares it, and its fingerprint (the bundled SHA-256).
  for (const c of v.string_values) {
    assert.equal(prepareText(c.value, c.max_length), c.prepared, c.name);
    assert.equal(fingerprint(c.prepared), c.fingerprint, c.name);
    n++;
  }
  // A discovery prefix (alphabet, U+FFFD, U+0000 padding) and its fingerprint, of exactly that text.
  for (const c of v.string_prefixes) {
    assert.equal(prefix(c.prepared, c.length, c.alphabet), c.prefix, c.name);
    assert.equal(fingerprint(c.prefix), c.fingerprint, c.name);
    n++;
  }
  // A report's seed: a = 1 + randbelow(P - 1), b = randbelow(P), rejections included.
  for (const c of v.string_draws) {
    const src = new FixedBytes(hex(c.bytes));
    assert.deepEqual({ a: 1 + randbelow(P - 1, src), b: randbelow(P, src) }, c.result, c.name);
    assert.equal(src.used, hex(c.bytes).length, c.name);
    n++;
  }
  // The candidates a wire value supports: ((a·x + b) mod P) mod g = y, in the schema's order.
  for (const c of v.supports) {
    const a = parseSchema(schemas.get(c.schema)).byName.get(c.attribute);
    const { a: seed, b, y } = c.value;
    assert.deepEqual(a.strings.candidates.filter((s) => olhHash(seed, b, fingerprint(s), a.params.g) === y), c.supported, c.name);
    n++;
  }
  for (const c of v.invalid_records) {
    const secret = c.device_secret === null ? undefined : hex(c.device_secret);
    await refusedAsync(randomize(schemas.get(c.schema), c.record, { window: c.window, deviceSecret: secret, source: new FixedBytes(new Uint8Array(0)) }),
      RecordError, c.field === "device_secret" ? "deviceSecret" : c.field);
    n++;
  }
  return n;
}

function bucketIndex(a, x) {
  return a.categories.indexOf(a.categories.find((_, i) => i === a.categories.length - 1 || x < a.edges[i + 1]));
}

// V8's Math.exp and Math.log (fdlibm) differ from glibc's in the last bit for about one argument
// in ten (measured: exp at 205 of the 2,000 ε from 0.01 to 20 in steps of 0.01). A p or q this
// client derives itself may therefore differ from Python's in its last digit; the client then
// uses the served p and q (checked within 1e-9), so its coins are the server's. Hence: the
// derivation from a bare schema may be off by a few ulps, and only that.
function sameUpToUlps(actual, expected, where) {
  if (typeof expected === "number" && typeof actual === "number") {
    assert.ok(Math.abs(actual - expected) <= 4 * Number.EPSILON * Math.max(Math.abs(actual), Math.abs(expected)),
      `${where}: ${actual} vs ${expected}`);
  } else if (expected && typeof expected === "object") {
    assert.deepEqual(Object.keys(actual).sort(), Object.keys(expected).sort(), where);
    for (const k of Object.keys(expected)) sameUpToUlps(actual[k], expected[k], `${where}.${k}`);
  } else {
    assert.equal(actual, expected, where);
  }
}

export function checkSchemas(text) {
  let n = 0;
  for (const c of JSON.parse(text)) {
    const expected = c.derived;
    sameUpToUlps(schemaDict(parseSchema(c.schema)), expected, c.name);
    // Publishing the derived form again gives the derived form.
    assert.deepEqual(schemaDict(parseSchema(c.derived)), expected, `${c.name} (derived again)`);
    n++;
  }
  return n;
}

export function checkInvalidSchemas(text) {
  let n = 0;
  for (const c of parseJson(text)) {
    refusedWith(() => parseSchema(c.schema), SchemaError, c.field, c.name);
    n++;
  }
  return n;
}

export function checkWindows(text) {
  const v = JSON.parse(text);
  assert.equal(ROLLUP, v.rollup);
  let n = 1;
  for (const c of v.window_of) {
    assert.equal(windowOf(new Date(c.instant), c.kind), c.window, c.instant);
    n++;
  }
  for (const c of v.bounds) {
    assert.equal(new Date(windowStart(c.window, c.kind)).toISOString().replace(".000Z", "Z"), c.start, c.window);
    assert.equal(new Date(windowEnd(c.window, c.kind)).toISOString().replace(".000Z", "Z"), c.end, c.window);
    n++;
  }
  for (const c of v.invalid) {
    assert.throws(() => windowStart(c.window, c.kind), RangeError, JSON.stringify(c));
    n++;
  }
  for (const c of v.overlapping) {
    assert.deepEqual(overlapping(c.window), c.windows);
    n++;
  }
  return n;
}

// A report the JS client makes must be one the server accepts: the client checks reports it
// reads back from its own storage against the same rules (validateReport), so the valid and
// invalid reports of the vectors concern it too.
export function checkReports(text) {
  const v = parseJson(text);
  const schemas = v.schemas.map(parseSchema);
  let n = 0;
  for (const c of v.cases) {
    const schema = schemas.find((s) => s.name === c.report.schema && s.version === c.report.version);
    assert.doesNotThrow(() => validateReport(c.report, schema), c.name);
    // A string attribute's counters are its supports: the candidates the report's (a, b, y) hashes
    // to; a discovery prefix's report (level above 0) supports none and is not counted.
    for (const a of schema.attributes.filter((a) => a.type === "string" && c.report.values[a.name])) {
      const { a: seed, b, y, level = 0 } = c.report.values[a.name];
      const supported = level ? [] : a.strings.candidates.filter((s) => olhHash(seed, b, fingerprint(s), a.params.g) === y);
      assert.deepEqual(Object.fromEntries(supported.map((s) => [s, 1])), c.counters[a.name].amounts, `${c.name}: supports of ${a.name}`);
      assert.equal(level ? 0 : 1, c.counters[a.name].n, `${c.name}: n of ${a.name}`);
    }
    n++;
  }
  return n;
}

// Cases that hinge on a JSON number's spelling (1.0 vs 1: an OUE bit, a string report's b,
// max_length) are read with parseJson, which keeps a whole number written as a float a float
// (JSON.parse would make it an integer), as the Python side reads them.
export function checkReportValidation(text) {
  const v = parseJson(text);
  const schemas = v.schemas.map(parseSchema);
  const lookup = (name, version) => schemas.find((s) => s.name === name && s.version === version);
  let n = 0;
  for (const c of v.cases) {
    assert.throws(() => validateReport(c.report, lookup), (e) => {
      assert.equal(e.field, c.field, c.name);
      return true;
    }, c.name);
    n++;
  }
  return n;
}

const CHECKS = {
  "randomness.json": checkRandomness,
  "schemas.json": checkSchemas,
  "invalid_schemas.json": checkInvalidSchemas,
  "windows.json": checkWindows,
  "reports.json": checkReports,
  "report_validation.json": checkReportValidation,
};

for (const [file, check] of Object.entries(CHECKS)) {
  test(`vectors: every case of ${file}`, async () => {
    const n = await check(load(file));
    assert.ok(n > 0);
  });
}

test("vectors: changing one byte of a vector makes the checks fail", async () => {
  // One digit of a random byte, one bit of an expected report (an id character), one hex digit
  // of an HMAC message's expected stream: each copy must fail where the original passes.
  const original = load("randomness.json");
  const v = JSON.parse(original);
  const flipHex = (s, i) => s.slice(0, i) + (s[i] === "0" ? "1" : "0") + s.slice(i + 1);
  const copies = [];
  // (A coin reads the top 53 of 64 bits, so a byte's low bits may not matter: the id's bytes all do.)
  for (const i of [0, 17, 47]) {
    const w = structuredClone(v);
    w.reports[3].random_bytes = flipHex(w.reports[3].random_bytes, i);
    copies.push(["a random byte of a report", w]);
  }
  const value = structuredClone(v);
  value.reports[0].report.values.dark_mode = !value.reports[0].report.values.dark_mode;
  copies.push(["a report's value", value]);
  const id = structuredClone(v);
  id.reports[0].report.id = (id.reports[0].report.id[0] === "A" ? "B" : "A") + id.reports[0].report.id.slice(1);
  copies.push(["a report's id", id]);
  const stream = structuredClone(v);
  stream.hmac_stream[0].bytes = flipHex(stream.hmac_stream[0].bytes, 7);
  copies.push(["an HMAC stream", stream]);
  const memo = structuredClone(v);
  const m = memo.reports.find((c) => c.permanent);
  const key = Object.keys(m.permanent)[0];
  m.permanent[key].message = m.permanent[key].message.replace("0.5", "0.6");
  copies.push(["an HMAC message", memo]);
  // Strings: a random byte of a string report (its seed's first byte), its expected y, a prepared
  // value, a fingerprint, a seed draw's byte, a supported candidate.
  const stringReport = v.reports.findIndex((c) => c.name === "string-0");
  for (const i of [48, 56]) {
    const w = structuredClone(v);
    w.reports[stringReport].random_bytes = flipHex(w.reports[stringReport].random_bytes, i);
    copies.push(["a random byte of a string report", w]);
  }
  const y = structuredClone(v);
  y.reports[stringReport].report.values.home.y = (y.reports[stringReport].report.values.home.y + 1) % 8;
  copies.push(["a string report's y", y]);
  const prepared = structuredClone(v);
  prepared.string_values[3].prepared = "cafe\u0301";
  copies.push(["a prepared string", prepared]);
  const print = structuredClone(v);
  print.string_values[0].fingerprint += 1;
  copies.push(["a fingerprint", print]);
  const draw = structuredClone(v);
  draw.string_draws[3].bytes = flipHex(draw.string_draws[3].bytes, 1);
  copies.push(["a seed's byte", draw]);
  const supports = structuredClone(v);
  supports.supports[0].supported.pop();
  copies.push(["a supported candidate", supports]);
  for (const [what, copy] of copies) {
    await assert.rejects(checkRandomness(JSON.stringify(copy)), assert.AssertionError, `changing ${what} went unnoticed`);
  }
  // And byte-level, on the file's text: the first hex digit of the first report's random bytes.
  const at = original.indexOf('"random_bytes": "') + '"random_bytes": "'.length;
  const flipped = original.slice(0, at) + (original[at] === "0" ? "1" : "0") + original.slice(at + 1);
  await assert.rejects(checkRandomness(flipped), assert.AssertionError);
  const schemaText = load("schemas.json");
  const p = schemaText.indexOf("0.7310585786300049");
  assert.throws(() => checkSchemas(schemaText.slice(0, p) + "0.7310585786300149" + schemaText.slice(p + 18)), assert.AssertionError);
  const e = schemaText.indexOf('"epsilon": 2.0');
  assert.throws(() => checkSchemas(schemaText.slice(0, e) + '"epsilon": 3.0' + schemaText.slice(e + 14)), assert.AssertionError);
  // Byte-level too on a string case: one hex digit of the first string vector's fingerprint.
  const f = original.indexOf('"fingerprint": ') + '"fingerprint": '.length;
  await assert.rejects(checkRandomness(original.slice(0, f) + (original[f] === "1" ? "2" : "1") + original.slice(f + 1)), assert.AssertionError);
  await checkRandomness(original); // the original still passes
});

test("vectors: parseJson keeps what JSON.parse erases, a whole number written as a float", async () => {
  const v = parseJson('{"a": 1.0, "b": 1, "c": [2.5, -0.0, 1e3, "1.0"], "d": "x\\"1.0"}');
  assert.ok(v.a instanceof PyFloat && v.a.value === 1 && v.b === 1 && v.c[0] === 2.5 && v.c[2] instanceof PyFloat);
  assert.ok(Object.is(v.c[1].value, -0) && v.c[3] === "1.0" && v.d === 'x"1.0');
  // The case it matters for: read with JSON.parse, the float-edge histogram's HMAC message is not Python's.
  const text = load("randomness.json");
  const c = JSON.parse(text).reports.find((r) => r.name === "memoised-float-edges");
  const message = (schemas) => {
    const s = parseSchema(schemas.find((x) => x.name === c.schema));
    return permanentMessage(s, s.byName.get("load_ms"), 1);
  };
  assert.equal(message(parseJson(text).schemas), c.permanent.load_ms.message);
  assert.notEqual(message(JSON.parse(text).schemas), c.permanent.load_ms.message);
});
