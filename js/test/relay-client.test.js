// The client with a relay (DESIGN.md "Relay and amplification", "Client") against stand-in relays:
// real HTTP servers on localhost that answer as a relay may (202, the ohttp-key problem, 413, 503),
// beside a stand-in aggregator that serves keys and counts every other request it gets (none may
// come: a client with a relay never posts around it). The requests are opened here with the
// receiver's key (test/ohttp-receiver.js: an HPKE on node:crypto, independent of src/relay/hpke.ts),
// so each is seen to carry exactly one report, in the Binary HTTP request of DESIGN "Bytes".
import { test } from "node:test";
import assert from "node:assert/strict";
import { installRelay, MemoryStore, TelemetryClient } from "../dist/index.js";
import { KEY_PROBLEM_TYPE, Route } from "../dist/relay.js";
import { byteServer as server, quietLogger } from "./helpers.js";
import { bhttpFields, decapsulate, keyPair } from "./ohttp-receiver.js";

const SCHEMA = { name: "relayed", version: 1, epsilon: 1, window: "hour", attributes: [{ name: "flag", type: "boolean" }] };
const GAP_MS = 150; // the route's minute between the aggregator's key fetch and sending, shortened

installRelay((context) => new Route(context, { keyGapMs: GAP_MS }));

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(condition, ms = 5000) {
  for (const end = Date.now() + ms; !condition() && Date.now() < end;) await sleep(10);
  return condition();
}

const keysAnswer = (res, keys) => {
  res.writeHead(200, { "Content-Type": "application/ohttp-keys" });
  res.end(keys.body);
};

/** A stand-in aggregator: serves `keys()` at /api/v1/ohttp-keys; every request is kept. */
const aggregator = (keys) => server((req, res) => {
  if (req.url === "/api/v1/ohttp-keys") return keysAnswer(res, keys());
  res.writeHead(500).end();
});

/** SCHEMA as served (derived) at `version`; version 2 adds an attribute. */
const served = (version) => ({ ...SCHEMA, version, attributes: [
  { ...SCHEMA.attributes[0], epsilon: 1.0, mechanism: "rr", p: 0.7310585786300049, q: 0.2689414213699951 },
  ...(version === 2 ? [{ name: "dark", type: "boolean", epsilon: 1.0, mechanism: "rr", p: 0.7310585786300049, q: 0.2689414213699951 }] : [])],
  ...(version === 2 && { epsilon: 2 }) });

/** A stand-in relay: `keys()`, the schema (`versions` of it; the last is the latest), and
 * `answer(res, request, n)` for the n-th POST /relay. */
function relay(keys, answer, versions = [1]) {
  let n = 0;
  return server((req, res, body) => {
    if (req.url === "/ohttp-keys") return keysAnswer(res, keys());
    const [, version] = req.url.match(new RegExp(`^/api/v1/schemas/${SCHEMA.name}(?:/(\\d+))?$`)) ?? [];
    const wanted = version === undefined ? versions.at(-1) : Number(version);
    if (req.url.startsWith("/api/v1/schemas/") && versions.includes(wanted)) {
      res.writeHead(200, { "Content-Type": "application/json" });
      return res.end(JSON.stringify(served(wanted)));
    }
    if (req.method === "POST" && req.url === "/relay") return answer(res, body, n++);
    res.writeHead(404).end();
  });
}
const accepted = (res) => res.writeHead(202).end();

/** A stand-in aggregator and relay serving `keys` (the relay `relayKeys`, when given), the relay
 * answering POST /relay with `answer`; both closed when test `t` ends. */
async function standIns(t, { keys = keyPair(), relayKeys, answer = accepted, versions } = {}) {
  const agg = await aggregator(() => keys);
  const rel = await relay(() => relayKeys ?? keys, answer, versions);
  t.after(() => Promise.all([agg.close(), rel.close()]));
  return { keys, agg, rel, posts: () => rel.requests.filter((r) => r.method === "POST") };
}

/** globalThis dressed as a page for the rest of test `t` (Node has none): the event targets the
 * client listens on; the returned target fires pagehide. */
function asPage(t) {
  const page = new EventTarget();
  Object.assign(globalThis, { addEventListener: page.addEventListener.bind(page), removeEventListener: page.removeEventListener.bind(page),
    document: Object.assign(new EventTarget(), { hidden: false }) });
  t.after(() => {
    delete globalThis.addEventListener;
    delete globalThis.removeEventListener;
    delete globalThis.document;
  });
  return page;
}

/** Web Crypto watched for the rest of test `t`: its AES-GCM encryptions (a request's last step of
 * sealing) counted, and `silent` to make it answer nothing more, as to a closing browser page. */
function watchWebCrypto(t) {
  const subtle = globalThis.crypto.subtle;
  const watch = { encrypted: 0, silent: false };
  const names = ["generateKey", "importKey", "exportKey", "deriveBits", "sign", "encrypt"];
  for (const name of names) {
    const real = subtle[name];
    subtle[name] = async (...args) => {
      if (watch.silent) return new Promise(() => {});
      const out = await real.apply(subtle, args);
      if (name === "encrypt") watch.encrypted++;
      return out;
    };
  }
  t.after(() => names.forEach((name) => delete subtle[name]));
  return watch;
}

function client(endpoint, relayUrl, extra = {}) {
  const logger = quietLogger();
  const t = new TelemetryClient({ endpoint, relay: relayUrl, schema: SCHEMA.name, maxEpsilon: 2, store: new MemoryStore(), logger,
    backoffBaseMs: 10, backoffCapMs: 50, requestTimeoutMs: 2000, lingerMs: 0, ...extra });
  return { t, logger };
}

/** Runs `body` with the clock an hour ahead (a record then counts in the next hour's window). */
function inAnHour(body) {
  const realNow = Date.now;
  Date.now = () => realNow() + 3_600_000;
  try {
    body();
  } finally {
    Date.now = realNow;
  }
}

/** Two reports of two windows (hours), made by `t` in the past hours. */
function recordTwo(t) {
  const realNow = Date.now;
  try {
    for (const hoursAgo of [2, 1]) {
      Date.now = () => realNow() - hoursAgo * 3_600_000;
      assert.equal(t.record({ flag: hoursAgo === 1 }).queued, true);
    }
  } finally {
    Date.now = realNow;
  }
}

test("each report goes alone through the relay, encrypted to the aggregator's key, padded; the aggregator gets no report", async (t) => {
  const { keys, agg, rel, posts } = await standIns(t);
  const { t: c, logger } = client(agg.url, rel.url);
  assert.equal(await c.waitForSchema(5000), true, logger.lines.join("\n"));
  recordTwo(c);
  assert.equal(await c.flush(5000), true, logger.lines.join("\n"));
  await c.close(0);
  // The schema and keys from the relay; from the aggregator only its keys.
  assert.deepEqual(agg.requests.map((r) => `${r.method} ${r.url}`), ["GET /api/v1/ohttp-keys"]);
  assert.deepEqual(rel.requests.filter((r) => r.method === "GET").map((r) => r.url), [`/api/v1/schemas/${SCHEMA.name}`, "/ohttp-keys"]);
  assert.equal(posts().length, 2);
  const reports = [];
  for (const post of posts()) {
    assert.equal(post.headers["content-type"], "text/plain"); // no preflight in a browser
    assert.equal(post.headers.cookie, undefined);
    assert.equal(post.body.length, 55 + 1024, "the schema's one size");
    assert.deepEqual([...post.body.subarray(0, 7)], [keys.keyId, 0, 0x20, 0, 1, 0, 1]);
    const m = bhttpFields(decapsulate(post.body, keys));
    assert.deepEqual({ ...m, content: undefined, padding: undefined }, {
      framing: 0, method: "POST", scheme: "https", authority: "", path: "/api/v1/reports",
      headers: "\x0ccontent-type\x10application/json", content: undefined, trailer: 0, padding: undefined });
    assert.ok(m.padding.every((b) => b === 0));
    assert.equal(m.content.reports.length, 1, "one report per request");
    reports.push(m.content.reports[0]);
  }
  assert.notEqual(reports[0].window, reports[1].window);
  const [first, second] = posts().map((p) => p.body.subarray(7, 39).toString("hex"));
  assert.notEqual(first, second, "a fresh ephemeral key each");
  // The aggregator's key fetch and the first report are at least the route's gap apart.
  assert.ok(posts()[0].at - agg.requests[0].at >= GAP_MS, `${posts()[0].at - agg.requests[0].at} ms`);
});

test("keys the relay and the aggregator serve differently are not used: nothing is sent, and the log says why", async (t) => {
  const { agg, rel, posts } = await standIns(t, { keys: keyPair(1), relayKeys: keyPair(1) });
  const { t: c, logger } = client(agg.url, rel.url);
  assert.equal(await c.waitForSchema(5000), true);
  recordTwo(c);
  assert.equal(await c.flush(600), false, "the reports wait");
  await c.close(0);
  assert.equal(posts().length, 0);
  const why = `GET ${rel.url}/ohttp-keys and GET ${agg.url}/api/v1/ohttp-keys serve different key configurations`;
  assert.ok(logger.lines.some((l) => l.includes(why)), logger.lines.join("\n"));
});

test("the ohttp-key problem: the keys are fetched again, the report encapsulated again and resent, never dropped", async (t) => {
  const old = keyPair(1);
  const rotated = keyPair(2);
  let keys = old;
  const agg = await aggregator(() => keys);
  const rel = await relay(() => keys, (res, body, n) => {
    if (n > 0) return accepted(res);
    keys = rotated; // the aggregator rotated: the relay refuses the old key id
    res.writeHead(400, { "Content-Type": "application/problem+json" });
    res.end(JSON.stringify({ type: KEY_PROBLEM_TYPE, title: "key configuration not listed" }));
  });
  t.after(() => Promise.all([agg.close(), rel.close()]));
  const { t: c, logger } = client(agg.url, rel.url);
  assert.equal(await c.waitForSchema(5000), true);
  assert.equal(c.record({ flag: true }).queued, true);
  assert.equal(await c.flush(5000), true, logger.lines.join("\n"));
  await c.close(0);
  const posts = rel.requests.filter((r) => r.method === "POST");
  assert.deepEqual(posts.map((p) => p.body[0]), [1, 2], "re-encapsulated to the new key");
  const [first, second] = [decapsulate(posts[0].body, old), decapsulate(posts[1].body, rotated)].map((m) => bhttpFields(m).content.reports[0]);
  assert.deepEqual(second, first, "the same report, same id");
  assert.equal(agg.requests.length, 2, "the aggregator's keys fetched again, and nothing else");
  assert.ok(!logger.lines.some((l) => /dropped/.test(l)), logger.lines.join("\n"));
});

test("413 drops the report with a warning; 503 with Retry-After is retried, encapsulated anew", async (t) => {
  const answer = (res, body, n) => (n === 0 ? res.writeHead(413).end() : n === 1 ? res.writeHead(503, { "Retry-After": "1" }).end() : accepted(res));
  const { keys, agg, rel, posts } = await standIns(t, { answer });
  const { t: c, logger } = client(agg.url, rel.url);
  assert.equal(await c.waitForSchema(5000), true);
  recordTwo(c);
  assert.equal(await c.flush(8000), true, logger.lines.join("\n"));
  await c.close(0);
  assert.equal(posts().length, 3);
  assert.ok(posts()[2].at - posts()[1].at >= 1000, "Retry-After is a floor");
  // The same report, in new ciphertext: the relay cannot link the two tries.
  const [tried, retried] = posts().slice(1).map((p) => bhttpFields(decapsulate(p.body, keys)).content.reports[0].id);
  assert.equal(retried, tried);
  assert.notDeepEqual(posts()[2].body, posts()[1].body);
  assert.ok(logger.lines.some((l) => l.startsWith(`dropped 1 report(s): POST ${rel.url}/relay answered HTTP 413`)), logger.lines.join("\n"));
  assert.ok(logger.lines.some((l) => l.startsWith(`POST ${rel.url}/relay answered HTTP 503; retry in`)), logger.lines.join("\n"));
});

test("the keys are fetched again when they are older than keysMaxAgeMs", async (t) => {
  installRelay((context) => new Route(context, { keyGapMs: 20, keysMaxAgeMs: 300 }));
  t.after(() => installRelay((context) => new Route(context, { keyGapMs: GAP_MS })));
  const { agg, rel } = await standIns(t);
  const { t: c } = client(agg.url, rel.url);
  assert.equal(await c.waitForSchema(5000), true);
  assert.equal(c.record({ flag: true }).queued, true);
  assert.equal(await c.flush(5000), true);
  await sleep(400);
  inAnHour(() => assert.equal(c.record({ flag: false }).queued, true));
  assert.equal(await c.flush(5000), true);
  await c.close(0);
  assert.equal(agg.requests.length, 2);
  assert.equal(rel.requests.filter((r) => r.url === "/ohttp-keys").length, 2);
});

test("without X25519 in Web Crypto the reports wait in the outbox, said once; nothing goes around the relay", async (t) => {
  const subtle = globalThis.crypto.subtle;
  const generateKey = subtle.generateKey;
  // An older browser: no X25519 (the route asks when it is made, with the client).
  t.after(() => (subtle.generateKey = generateKey));
  subtle.generateKey = function (algorithm, ...rest) {
    if (algorithm?.name === "X25519") return Promise.reject(new DOMException("Unrecognized name.", "NotSupportedError"));
    return generateKey.call(this, algorithm, ...rest);
  };
  const { agg, rel, posts } = await standIns(t);
  const { t: c, logger } = client(agg.url, rel.url, { backoffCapMs: 100 });
  assert.equal(await c.waitForSchema(5000), true);
  recordTwo(c);
  assert.equal(await c.flush(800), false);
  await c.close(0);
  assert.equal(posts().length, 0);
  assert.equal(agg.requests.length, 0);
  const said = logger.lines.filter((l) => l.includes("no X25519"));
  assert.equal(said.length, 1, logger.lines.join("\n"));
  assert.match(said[0], /reports wait in the outbox; they are never sent around the relay/);
});

test("a closing page sends what is stored through the relay with keepalive, one request per report, within the budget", async (t) => {
  let hold = true; // plain fetches are held unanswered until the page closes
  const { keys, agg, rel, posts } = await standIns(t, { answer: (res) => (hold ? undefined : accepted(res)) });
  const page = asPage(t);
  const { t: c, logger } = client(agg.url, rel.url, { requestTimeoutMs: 60_000 });
  assert.equal(await c.waitForSchema(5000), true);
  recordTwo(c);
  assert.ok(await until(() => posts().length > 0), logger.lines.join("\n"));
  hold = false;
  page.dispatchEvent(new Event("pagehide"));
  // The first (held) report again with keepalive, and the second: one request each, 1079 bytes.
  assert.ok(await until(() => posts().length >= 3), logger.lines.join("\n"));
  const ids = posts().map((p) => bhttpFields(decapsulate(p.body, keys)).content.reports[0].id);
  assert.equal(new Set(ids).size, 2);
  assert.ok(posts().every((p) => p.body.length === 1079 && p.headers["content-type"] === "text/plain"));
  assert.equal(agg.requests.length, 1);
  await c.close(0);
});

test("a report that is not valid under its schema is dropped before it is encapsulated, saying why", async (t) => {
  const { agg, rel, posts } = await standIns(t);
  const store = new MemoryStore();
  // A damaged row in the outbox: the aggregator's verdict on it would never come back through the relay.
  const window = new Date(Date.now() - 7_200_000).toISOString().slice(0, 13);
  await store.append([{ id: "A".repeat(32), schema: SCHEMA.name, version: 1, window, epsilon: 1, values: { flag: "yes" } }],
    { maxReports: 10, maxBytes: 1 << 20, perDay: 10 });
  const { t: c, logger } = client(agg.url, rel.url, { store });
  assert.equal(await c.waitForSchema(5000), true);
  assert.equal(await c.flush(5000), true, logger.lines.join("\n"));
  await c.close(0);
  assert.equal(posts().length, 0);
  assert.ok(logger.lines.some((l) => /^dropped 1 report\(s\): invalid \(.*flag.*\), and no relay answer would say so$/.test(l)), logger.lines.join("\n"));
});

test("the keys are kept in the store: the next start (a page's next visit) sends at once, a closing page with keepalive, its request sealed ahead", async (t) => {
  const { agg, rel, posts } = await standIns(t);
  const store = new MemoryStore();
  const first = client(agg.url, rel.url, { store });
  assert.equal(await first.t.waitForSchema(5000), true);
  assert.equal(first.t.record({ flag: true }).queued, true);
  assert.equal(await first.t.flush(5000), true, first.logger.lines.join("\n"));
  await first.t.close(0);

  // The next visit, an hour later: the page records and closes at once; its sender lingers.
  const page = asPage(t);
  const second = client(agg.url, rel.url, { store, lingerMs: 60_000 });
  assert.equal(await second.t.waitForSchema(5000), true);
  const webCrypto = watchWebCrypto(t);
  inAnHour(() => assert.equal(second.t.record({ flag: false }).queued, true));
  // Stored, and its request sealed ahead (milliseconds): then Web Crypto answers no more, as to a
  // closing browser page, and the request leaves all the same.
  assert.ok(await until(() => webCrypto.encrypted === 1), second.logger.lines.join("\n"));
  await sleep(0);
  webCrypto.silent = true;
  page.dispatchEvent(new Event("pagehide"));
  assert.ok(await until(() => posts().length === 2), second.logger.lines.join("\n"));
  await second.t.close(0);
  assert.equal(agg.requests.length, 1, "the aggregator's keys fetched once");
  assert.equal(rel.requests.filter((r) => r.url === "/ohttp-keys").length, 1);
});

test("a report of a version the client no longer knows is checked and padded by that version, fetched from the relay; one not served is dropped", async (t) => {
  const { keys, rel, agg, posts } = await standIns(t, { versions: [1, 2] });
  const store = new MemoryStore();
  // Reports made before a restart under version 1 (and one under a version nobody serves); the relay now serves version 2.
  const window = new Date(Date.now() - 7_200_000).toISOString().slice(0, 13);
  await store.append([{ id: "B".repeat(32), schema: SCHEMA.name, version: 1, window, epsilon: 1, values: { flag: true } },
    { id: "C".repeat(32), schema: SCHEMA.name, version: 7, window: new Date(Date.now() - 3_600_000).toISOString().slice(0, 13), epsilon: 1, values: { flag: true } }],
  { maxReports: 10, maxBytes: 1 << 20, perDay: 10 });
  const { t: c, logger } = client(agg.url, rel.url, { store, maxEpsilon: 2 });
  assert.equal(await c.waitForSchema(5000), true);
  assert.equal(c.schema.version, 2);
  assert.equal(await c.flush(5000), true, logger.lines.join("\n"));
  await c.close(0);
  assert.equal(posts().length, 1);
  assert.deepEqual(bhttpFields(decapsulate(posts()[0].body, keys)).content.reports[0].id, "B".repeat(32));
  assert.ok(rel.requests.some((r) => r.url === `/api/v1/schemas/${SCHEMA.name}/1`));
  assert.ok(logger.lines.includes(`the schema ${SCHEMA.name} version 7 is not served any more: its reports are dropped`), logger.lines.join("\n"));
});

test("two clients of one page (a schema each) share the keys and the minute: the aggregator is asked once", async (t) => {
  const { agg, rel, posts } = await standIns(t);
  const clients = [client(agg.url, rel.url), client(agg.url, rel.url)];
  for (const { t: c } of clients) assert.equal(await c.waitForSchema(5000), true);
  for (const { t: c } of clients) assert.equal(c.record({ flag: true }).queued, true);
  const delivered = await Promise.all(clients.map(({ t: c }) => c.flush(5000)));
  assert.deepEqual(delivered, [true, true], clients.map(({ logger }) => logger.lines.join("\n")).join("\n"));
  for (const { t: c } of clients) await c.close(0);
  assert.equal(agg.requests.length, 1);
  assert.equal(rel.requests.filter((r) => r.url === "/ohttp-keys").length, 1);
  assert.equal(posts().length, 2);
  assert.ok(posts().every((p) => p.at - agg.requests[0].at >= GAP_MS));
});
