// The client with a relay (DESIGN.md "Relay and amplification", "Client") against stand-in relays:
// real HTTP servers on localhost that answer as a relay may (202, the ohttp-key problem, 413, 503),
// beside a stand-in aggregator that serves keys and counts every other request it gets (none may
// come: a client with a relay never posts around it). The requests are opened here with the
// receiver's key (test/ohttp-receiver.js: an HPKE on node:crypto, independent of src/relay/hpke.ts),
// so each is seen to carry exactly one report, in the Binary HTTP request of DESIGN "Bytes".
import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { installRelay, MemoryStore, TelemetryClient } from "../dist/index.js";
import { KEY_PROBLEM_TYPE, Route } from "../dist/relay.js";
import { quietLogger } from "./helpers.js";
import { bhttpFields, decapsulate, keyPair } from "./ohttp-receiver.js";

const SCHEMA = { name: "relayed", version: 1, epsilon: 1, window: "hour", attributes: [{ name: "flag", type: "boolean" }] };
const GAP_MS = 150; // the route's minute between the aggregator's key fetch and sending, shortened

installRelay((context) => new Route(context, { keyGapMs: GAP_MS }));

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(condition, ms = 5000) {
  for (const end = Date.now() + ms; !condition() && Date.now() < end;) await sleep(10);
  return condition();
}

/** A server whose requests (body as bytes) are kept and answered by `handle(req, res, body)`. */
async function server(handle) {
  const requests = [];
  const s = createServer((req, res) => {
    const chunks = [];
    req.on("data", (d) => chunks.push(d));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      requests.push({ method: req.method, url: req.url, body, headers: req.headers, at: Date.now() });
      handle(req, res, body);
    });
  });
  await new Promise((r) => s.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${s.address().port}`, requests, close: () => new Promise((r) => { s.closeAllConnections(); s.close(r); }) };
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

/** A stand-in relay: the schema and `keys()`, and `answer(res, request, n)` for the n-th POST /relay. */
function relay(keys, answer) {
  let n = 0;
  return server((req, res, body) => {
    if (req.url === "/ohttp-keys") return keysAnswer(res, keys());
    if (req.url === `/api/v1/schemas/${SCHEMA.name}`) {
      res.writeHead(200, { "Content-Type": "application/json" });
      return res.end(JSON.stringify({ ...SCHEMA, attributes: [{ ...SCHEMA.attributes[0], epsilon: 1.0, mechanism: "rr", p: 0.7310585786300049, q: 0.2689414213699951 }] }));
    }
    if (req.method === "POST" && req.url === "/relay") return answer(res, body, n++);
    res.writeHead(404).end();
  });
}
const accepted = (res) => res.writeHead(202).end();

function client(endpoint, relayUrl, extra = {}) {
  const logger = quietLogger();
  const t = new TelemetryClient({ endpoint, relay: relayUrl, schema: SCHEMA.name, maxEpsilon: 2, store: new MemoryStore(), logger,
    backoffBaseMs: 10, backoffCapMs: 50, requestTimeoutMs: 2000, lingerMs: 0, ...extra });
  return { t, logger };
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

test("each report goes alone through the relay, encrypted to the aggregator's key, padded; the aggregator gets no report", async () => {
  const keys = keyPair();
  const agg = await aggregator(() => keys);
  const rel = await relay(() => keys, accepted);
  try {
    const { t, logger } = client(agg.url, rel.url);
    assert.equal(await t.waitForSchema(5000), true, logger.lines.join("\n"));
    recordTwo(t);
    assert.equal(await t.flush(5000), true, logger.lines.join("\n"));
    await t.close(0);
    // The schema and keys from the relay; from the aggregator only its keys.
    assert.deepEqual(agg.requests.map((r) => `${r.method} ${r.url}`), ["GET /api/v1/ohttp-keys"]);
    const posts = rel.requests.filter((r) => r.method === "POST");
    assert.deepEqual(rel.requests.filter((r) => r.method === "GET").map((r) => r.url), [`/api/v1/schemas/${SCHEMA.name}`, "/ohttp-keys"]);
    assert.equal(posts.length, 2);
    const reports = [];
    for (const post of posts) {
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
    assert.notEqual(posts[0].body.subarray(7, 39).toString("hex"), posts[1].body.subarray(7, 39).toString("hex"), "a fresh ephemeral key each");
    // The aggregator's key fetch and the first report are at least the route's gap apart.
    assert.ok(posts[0].at - agg.requests[0].at >= GAP_MS, `${posts[0].at - agg.requests[0].at} ms`);
  } finally {
    await agg.close();
    await rel.close();
  }
});

test("keys the relay and the aggregator serve differently are not used: nothing is sent, and the log says why", async () => {
  const [ours, theirs] = [keyPair(1), keyPair(1)];
  const agg = await aggregator(() => ours);
  const rel = await relay(() => theirs, accepted);
  try {
    const { t, logger } = client(agg.url, rel.url);
    assert.equal(await t.waitForSchema(5000), true);
    recordTwo(t);
    assert.equal(await t.flush(600), false, "the reports wait");
    await t.close(0);
    assert.equal(rel.requests.filter((r) => r.method === "POST").length, 0);
    assert.ok(logger.lines.some((l) => l.includes(`GET ${rel.url}/ohttp-keys and GET ${agg.url}/api/v1/ohttp-keys serve different key configurations`)), logger.lines.join("\n"));
  } finally {
    await agg.close();
    await rel.close();
  }
});

test("the ohttp-key problem: the keys are fetched again, the report encapsulated again and resent, never dropped", async () => {
  let keys = keyPair(1);
  const old = keys;
  const agg = await aggregator(() => keys);
  const rel = await relay(() => keys, (res, body, n) => {
    if (n === 0) {
      keys = keyPair(2); // the aggregator rotated: the relay refuses the old key id
      res.writeHead(400, { "Content-Type": "application/problem+json" });
      return res.end(JSON.stringify({ type: KEY_PROBLEM_TYPE, title: "key configuration not listed" }));
    }
    accepted(res);
  });
  try {
    const { t, logger } = client(agg.url, rel.url);
    assert.equal(await t.waitForSchema(5000), true);
    assert.equal(t.record({ flag: true }).queued, true);
    assert.equal(await t.flush(5000), true, logger.lines.join("\n"));
    await t.close(0);
    const posts = rel.requests.filter((r) => r.method === "POST");
    assert.equal(posts.length, 2);
    assert.equal(posts[0].body[0], 1);
    assert.equal(posts[1].body[0], 2, "re-encapsulated to the new key");
    const [first, second] = [decapsulate(posts[0].body, old), decapsulate(posts[1].body, keys)].map((m) => bhttpFields(m).content.reports[0]);
    assert.deepEqual(second, first, "the same report, same id");
    assert.equal(agg.requests.length, 2, "the aggregator's keys fetched again, and nothing else");
    assert.ok(!logger.lines.some((l) => /dropped/.test(l)), logger.lines.join("\n"));
  } finally {
    await agg.close();
    await rel.close();
  }
});

test("413 drops the report with a warning; 503 with Retry-After is retried", async () => {
  const keys = keyPair();
  const agg = await aggregator(() => keys);
  const rel = await relay(() => keys, (res, body, n) => {
    if (n === 0) return res.writeHead(413).end();
    if (n === 1) return res.writeHead(503, { "Retry-After": "1" }).end();
    accepted(res);
  });
  try {
    const { t, logger } = client(agg.url, rel.url);
    assert.equal(await t.waitForSchema(5000), true);
    recordTwo(t);
    const started = Date.now();
    assert.equal(await t.flush(8000), true, logger.lines.join("\n"));
    await t.close(0);
    const posts = rel.requests.filter((r) => r.method === "POST");
    assert.equal(posts.length, 3);
    assert.ok(posts[2].at - posts[1].at >= 1000, "Retry-After is a floor");
    assert.ok(Date.now() - started >= 1000);
    assert.ok(logger.lines.some((l) => l.startsWith(`dropped 1 report(s): POST ${rel.url}/relay answered HTTP 413`)), logger.lines.join("\n"));
    assert.ok(logger.lines.some((l) => l.startsWith(`POST ${rel.url}/relay answered HTTP 503; retry in`)), logger.lines.join("\n"));
  } finally {
    await agg.close();
    await rel.close();
  }
});

test("the keys are fetched again when they are older than keysMaxAgeMs", async () => {
  installRelay((context) => new Route(context, { keyGapMs: 20, keysMaxAgeMs: 300 }));
  const keys = keyPair();
  const agg = await aggregator(() => keys);
  const rel = await relay(() => keys, accepted);
  try {
    const { t } = client(agg.url, rel.url);
    assert.equal(await t.waitForSchema(5000), true);
    assert.equal(t.record({ flag: true }).queued, true);
    assert.equal(await t.flush(5000), true);
    await sleep(400);
    const realNow = Date.now;
    Date.now = () => realNow() + 3_600_000; // the next hour's window
    try {
      assert.equal(t.record({ flag: false }).queued, true);
    } finally {
      Date.now = realNow;
    }
    assert.equal(await t.flush(5000), true);
    await t.close(0);
    assert.equal(agg.requests.length, 2);
    assert.equal(rel.requests.filter((r) => r.url === "/ohttp-keys").length, 2);
  } finally {
    installRelay((context) => new Route(context, { keyGapMs: GAP_MS }));
    await agg.close();
    await rel.close();
  }
});

test("without X25519 in Web Crypto the reports wait in the outbox, said once; nothing goes around the relay", async (t) => {
  const subtle = globalThis.crypto.subtle;
  const generateKey = subtle.generateKey;
  // An older browser: no X25519 (the route asks when it is made, with the client's first send).
  t.after(() => (subtle.generateKey = generateKey));
  subtle.generateKey = function (algorithm, ...rest) {
    if (algorithm?.name === "X25519") return Promise.reject(new DOMException("Unrecognized name.", "NotSupportedError"));
    return generateKey.call(this, algorithm, ...rest);
  };
  const keys = keyPair();
  const agg = await aggregator(() => keys);
  const rel = await relay(() => keys, accepted);
  try {
    const { t: c, logger } = client(agg.url, rel.url, { backoffCapMs: 100 });
    assert.equal(await c.waitForSchema(5000), true);
    recordTwo(c);
    assert.equal(await c.flush(800), false);
    await c.close(0);
    assert.equal(rel.requests.filter((r) => r.method === "POST").length, 0);
    assert.equal(agg.requests.length, 0);
    const said = logger.lines.filter((l) => l.includes("no X25519"));
    assert.equal(said.length, 1, logger.lines.join("\n"));
    assert.match(said[0], /reports wait in the outbox; they are never sent around the relay/);
  } finally {
    await agg.close();
    await rel.close();
  }
});

test("a closing page sends what is stored through the relay with keepalive, one request per report, within the budget", async () => {
  const keys = keyPair();
  const agg = await aggregator(() => keys);
  let hold = true; // plain fetches are held unanswered until the page closes
  const rel = await relay(() => keys, (res) => (hold ? undefined : accepted(res)));
  const page = new EventTarget();
  const document = Object.assign(new EventTarget(), { hidden: false });
  Object.assign(globalThis, { addEventListener: page.addEventListener.bind(page), removeEventListener: page.removeEventListener.bind(page), document });
  try {
    const { t, logger } = client(agg.url, rel.url, { requestTimeoutMs: 60_000 });
    assert.equal(await t.waitForSchema(5000), true);
    recordTwo(t);
    assert.ok(await until(() => rel.requests.some((r) => r.method === "POST")), logger.lines.join("\n"));
    hold = false;
    page.dispatchEvent(new Event("pagehide"));
    // The first (held) report again with keepalive, and the second: one request each, 1079 bytes.
    assert.ok(await until(() => rel.requests.filter((r) => r.method === "POST").length >= 3), logger.lines.join("\n"));
    const posts = rel.requests.filter((r) => r.method === "POST");
    const ids = posts.map((p) => bhttpFields(decapsulate(p.body, keys)).content.reports[0].id);
    assert.equal(new Set(ids).size, 2);
    assert.ok(posts.every((p) => p.body.length === 1079 && p.headers["content-type"] === "text/plain"));
    assert.equal(agg.requests.length, 1);
    await t.close(0);
  } finally {
    delete globalThis.addEventListener;
    delete globalThis.removeEventListener;
    delete globalThis.document;
    await agg.close();
    await rel.close();
  }
});

test("a report that is not valid under its schema is dropped before it is encapsulated, saying why", async () => {
  const keys = keyPair();
  const agg = await aggregator(() => keys);
  const rel = await relay(() => keys, accepted);
  const store = new MemoryStore();
  // A damaged row in the outbox: the aggregator's verdict on it would never come back through the relay.
  const window = new Date(Date.now() - 7_200_000).toISOString().slice(0, 13);
  await store.append([{ id: "A".repeat(32), schema: SCHEMA.name, version: 1, window, epsilon: 1, values: { flag: "yes" } }],
    { maxReports: 10, maxBytes: 1 << 20, perDay: 10 });
  try {
    const { t, logger } = client(agg.url, rel.url, { store });
    assert.equal(await t.waitForSchema(5000), true);
    assert.equal(await t.flush(5000), true, logger.lines.join("\n"));
    await t.close(0);
    assert.equal(rel.requests.filter((r) => r.method === "POST").length, 0);
    assert.ok(logger.lines.some((l) => /^dropped 1 report\(s\): invalid \(.*flag.*\), and no relay answer would say so$/.test(l)), logger.lines.join("\n"));
  } finally {
    await agg.close();
    await rel.close();
  }
});

test("the keys are kept in the store: the next start (a page's next visit) sends at once, a closing page with keepalive", async () => {
  const keys = keyPair();
  const agg = await aggregator(() => keys);
  const rel = await relay(() => keys, accepted);
  const store = new MemoryStore();
  const page = new EventTarget();
  try {
    const first = client(agg.url, rel.url, { store });
    assert.equal(await first.t.waitForSchema(5000), true);
    assert.equal(first.t.record({ flag: true }).queued, true);
    assert.equal(await first.t.flush(5000), true, first.logger.lines.join("\n"));
    await first.t.close(0);

    // The next visit, an hour later: the page records and closes at once; its sender lingers.
    Object.assign(globalThis, { addEventListener: page.addEventListener.bind(page), removeEventListener: page.removeEventListener.bind(page),
      document: Object.assign(new EventTarget(), { hidden: false }) });
    const realNow = Date.now;
    Date.now = () => realNow() + 3_600_000;
    try {
      const second = client(agg.url, rel.url, { store, lingerMs: 60_000 });
      assert.equal(await second.t.waitForSchema(5000), true);
      assert.equal(second.t.record({ flag: false }).queued, true);
      await sleep(50); // stored (milliseconds)
      page.dispatchEvent(new Event("pagehide"));
      assert.ok(await until(() => rel.requests.filter((r) => r.method === "POST").length === 2), second.logger.lines.join("\n"));
      await second.t.close(0);
    } finally {
      Date.now = realNow;
    }
    assert.equal(agg.requests.length, 1, "the aggregator's keys fetched once");
    assert.equal(rel.requests.filter((r) => r.url === "/ohttp-keys").length, 1);
  } finally {
    delete globalThis.addEventListener;
    delete globalThis.removeEventListener;
    delete globalThis.document;
    await agg.close();
    await rel.close();
  }
});
