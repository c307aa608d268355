// The client against servers that misbehave: real HTTP servers on localhost (not our aggregator,
// which behaves) that redirect elsewhere, drip, flood, reject and inject text into logs, plus the
// client's own rules (RecordError, maxEpsilon, the ledger's daily cap, the outbox's bounds).
import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { join } from "node:path";
import { MemoryStore, RecordError, TelemetryClient } from "../dist/index.js";
import { freePort, quietLogger, tempDir } from "./helpers.js";

const SCHEMA = { name: "hostile", version: 1, epsilon: 1, window: "day", attributes: [{ name: "flag", type: "boolean" }] };

/** A server whose every request is answered by `handle(req, res, body)`; `requests` keeps them. */
async function server(handle) {
  const requests = [];
  const s = createServer((req, res) => {
    let body = "";
    req.on("data", (d) => (body += d));
    req.on("end", () => {
      requests.push({ method: req.method, url: req.url, body, headers: req.headers });
      handle(req, res, body);
    });
  });
  await new Promise((r) => s.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${s.address().port}`;
  return { url, requests, close: () => new Promise((r) => { s.closeAllConnections(); s.close(r); }) };
}

const ack = (res, n = 1) => {
  res.writeHead(202, { "Content-Type": "application/json" });
  res.end(JSON.stringify({ accepted: n, duplicates: 0 }));
};

function client(url, extra = {}) {
  const logger = quietLogger();
  const t = new TelemetryClient({ endpoint: url, schema: SCHEMA, maxEpsilon: 2, store: new MemoryStore(), logger,
    backoffBaseMs: 10, backoffCapMs: 50, requestTimeoutMs: 1000, ...extra });
  return { t, logger };
}

/** Runs `body(page)` with globalThis dressed as a page (Node has none): the two event targets the
 * client listens on; `page` fires pagehide. Undressed afterwards. */
async function asPage(body) {
  const page = new EventTarget();
  const document = Object.assign(new EventTarget(), { hidden: false });
  Object.assign(globalThis, { addEventListener: page.addEventListener.bind(page), removeEventListener: page.removeEventListener.bind(page), document });
  try {
    await body(page);
  } finally {
    delete globalThis.addEventListener;
    delete globalThis.removeEventListener;
    delete globalThis.document;
  }
}

test("record() throws a RecordError naming the attribute, never the value, and nothing else", async () => {
  const { t } = client("http://127.0.0.1:9");
  await t.waitForSchema(2000);
  assert.throws(() => t.record({ flag: "secret-value" }), (e) => e instanceof RecordError && e.field === "flag" && !e.message.includes("secret-value"));
  assert.throws(() => t.record({ flagg: true }), (e) => e instanceof RecordError && e.field === "flagg");
  await t.close(0);
  assert.deepEqual(t.record({ flag: true }), { queued: false, pending: false, reason: "the client is closed" });
});

test("a schema over maxEpsilon is refused: in code at construction, from the server on every record", async () => {
  assert.throws(() => new TelemetryClient({ endpoint: "http://127.0.0.1:9", schema: SCHEMA, maxEpsilon: 0.5, store: new MemoryStore() }), /maxEpsilon/);
  const s = await server((req, res) => {
    res.writeHead(200, { "Content-Type": "application/json" });
    res.end(JSON.stringify({ ...SCHEMA, epsilon: 8 }));
  });
  try {
    const { t } = client(s.url, { schema: "hostile" });
    t.record({ flag: true });
    assert.equal(await t.waitForSchema(2000), false);
    const r = t.record({ flag: true });
    assert.equal(r.queued, false);
    assert.match(r.reason, /refused/);
    // Where it came from and why, for the app's log.
    assert.ok(r.reason.includes(`from GET ${s.url}/api/v1/schemas/hostile was refused: "epsilon 8 is over maxEpsilon 2"`), r.reason);
    await t.close(0);
  } finally {
    await s.close();
  }
});

test("a redirect to another origin is not followed; one to the same origin is", async () => {
  const elsewhere = await server((req, res) => ack(res));
  const s = await server((req, res) => {
    if (req.url === "/api/v1/reports") {
      res.writeHead(307, { Location: `${elsewhere.url}/api/v1/reports` });
      res.end();
    } else ack(res);
  });
  try {
    const { t } = client(s.url);
    t.record({ flag: true });
    assert.equal(await t.flush(400), false);
    assert.equal(elsewhere.requests.length, 0, "the report went to another origin");
    await t.close(0);
  } finally {
    await Promise.all([s.close(), elsewhere.close()]);
  }
  const same = await server((req, res) => {
    if (req.url === "/api/v1/reports") {
      res.writeHead(308, { Location: "/v2/reports" });
      res.end();
    } else ack(res);
  });
  try {
    const { t } = client(same.url);
    t.record({ flag: true });
    assert.equal(await t.flush(5000), true);
    assert.deepEqual(same.requests.map((r) => r.url), ["/api/v1/reports", "/v2/reports"]);
    assert.equal(JSON.parse(same.requests[1].body).reports.length, 1);
    await t.close(0);
  } finally {
    await same.close();
  }
});

test("a server that drips its answer or sends too much is cut off, and the report kept for a retry", async () => {
  let mode = "drip";
  const s = await server((req, res) => {
    if (mode === "drip") {
      res.writeHead(202, { "Content-Type": "application/json" });
      res.write("{"); // and never more: only the request's deadline ends this
    } else if (mode === "flood") {
      res.writeHead(202, { "Content-Type": "application/json" });
      res.end(`{"accepted": 1, "duplicates": 0, "pad": "${"x".repeat(2 << 20)}"}`);
    } else ack(res);
  });
  try {
    const { t, logger } = client(s.url, { requestTimeoutMs: 200 });
    t.record({ flag: true });
    assert.equal(await t.flush(600), false);
    mode = "flood";
    assert.equal(await t.flush(600), false);
    mode = "ack";
    assert.equal(await t.flush(5000), true, logger.lines.join("\n"));
    const ids = new Set(s.requests.map((r) => JSON.parse(r.body).reports[0].id));
    assert.equal(ids.size, 1, "every retry sends the same report (same id)");
    await t.close(0);
  } finally {
    await s.close();
  }
});

// A page closing while a plain fetch carries its report: the browser cancels that fetch, so the
// report must go again with keepalive (its id makes the second copy harmless). Node has no page:
// the test dresses globalThis as a page (asPage) and fires pagehide itself.
test("a page closing while its report is in a plain fetch sends it again with keepalive", async () => {
  const s = await server((req, res) => {
    if (req.headers["content-type"].startsWith("text/plain")) ack(res); // keepalive: answered
    // else: a plain fetch, held unanswered, as one the closing page is about to cancel
  });
  try {
    await asPage(async (page) => {
      const { t, logger } = client(s.url, { lingerMs: 0, requestTimeoutMs: 60_000 });
      assert.equal(await t.waitForSchema(5000), true);
      assert.equal(t.record({ flag: true }).queued, true);
      for (let i = 0; i < 200 && !s.requests.length; i++) await new Promise((r) => setTimeout(r, 10));
      assert.equal(s.requests.length, 1, "the plain fetch is on its way");
      page.dispatchEvent(new Event("pagehide"));
      for (let i = 0; i < 200 && s.requests.length < 2; i++) await new Promise((r) => setTimeout(r, 10));
      assert.equal(s.requests.length, 2, logger.lines.join("\n"));
      const [plain, closing] = s.requests;
      assert.match(closing.headers["content-type"], /^text\/plain/);
      assert.deepEqual(JSON.parse(closing.body), JSON.parse(plain.body), "the same report, same id");
      page.dispatchEvent(new Event("pagehide")); // again: acknowledged, so nothing more goes
      await new Promise((r) => setTimeout(r, 100));
      assert.equal(s.requests.length, 2);
      await t.close(0);
    });
  } finally {
    await s.close();
  }
});

// A report made while the sender's turn waits on the network (here a slow schema refresh; the page
// already has the schema from its cache) is stored at once, so a page closing meanwhile sends it.
test("a report made while a turn waits on a slow schema request leaves a page that closes", async () => {
  let slow = false;
  const s = await server((req, res, body) => {
    if (req.url.includes("/reports")) return ack(res, JSON.parse(body).reports.length);
    setTimeout(() => {
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end(JSON.stringify(SCHEMA));
    }, slow ? 3000 : 0);
  });
  try {
    const store = new MemoryStore();
    const first = client(s.url, { store, schema: SCHEMA.name });
    assert.equal(await first.t.waitForSchema(5000), true); // cached in the store
    await first.t.close(0);
    slow = true;
    await asPage(async (page) => {
      const { t } = client(s.url, { store, schema: SCHEMA.name, lingerMs: 60_000 });
      assert.equal(await t.waitForSchema(1000), true, "from the cache, while the refresh is slow");
      assert.equal(t.record({ flag: true }).queued, true);
      await new Promise((r) => setTimeout(r, 300));
      page.dispatchEvent(new Event("pagehide"));
      for (let i = 0; i < 100 && !s.requests.some((r) => r.url.includes("/reports")); i++) await new Promise((r) => setTimeout(r, 10));
      const sent = s.requests.filter((r) => r.url.includes("/reports"));
      assert.equal(sent.length, 1);
      assert.match(sent[0].headers["content-type"], /^text\/plain/, "by the closing page, with keepalive");
      await t.close(0);
    });
  } finally {
    await s.close();
  }
});

// A store that fails (storage full) or a server that answers 503 after close(): the stopped sender
// retries after backoff (base 1 s here), never in a loop. Before, it ran a turn every few ms.
test("after close(), a failing store or server is retried after backoff, not in a loop", async () => {
  for (const failing of ["store", "server"]) {
    const s = await server((req, res) => {
      if (failing === "server") {
        res.writeHead(503);
        return res.end();
      }
      ack(res);
    });
    const store = new MemoryStore();
    let tries = 0;
    const append = store.append.bind(store);
    store.append = async (...args) => {
      tries++;
      if (failing === "store") throw new Error("QuotaExceededError");
      return append(...args);
    };
    const peek = store.peek.bind(store);
    if (failing === "server") store.peek = async (...args) => (tries++, peek(...args)); // a turn reads the outbox
    try {
      const { t } = client(s.url, { store, backoffBaseMs: 1000, backoffCapMs: 1000 });
      assert.equal(await t.waitForSchema(5000), true);
      t.record({ flag: true });
      await t.close(200);
      const before = tries;
      await new Promise((r) => setTimeout(r, 1500));
      // Full jitter, waits uniform in [0, 1 s]: 15 turns (30 tries at most 2 a turn) fit in 1.5 s
      // with probability 1.5^15/15! < 1e-9; a loop makes hundreds.
      assert.ok(tries - before <= 30, `${failing}: ${tries - before} tries in 1.5 s after close()`);
    } finally {
      await s.close();
    }
  }
});

// Two tabs share one store (as they share IndexedDB); tab B read the ledger before tab A spent the
// day. B's record passes B's copy of the ledger, but a closing page sends only stored reports,
// whose window the store's check-and-spend took: so B's report of the spent day never leaves.
test("a closing tab never sends a report of a window another tab spent since it read the ledger", async () => {
  const s = await server((req, res, body) => ack(res, JSON.parse(body).reports.length));
  try {
    await asPage(async (page) => {
      const store = new MemoryStore();
      const a = client(s.url, { store });
      const b = client(s.url, { store });
      assert.ok((await a.t.waitForSchema(5000)) && (await b.t.waitForSchema(5000)));
      assert.equal(a.t.record({ flag: true }).queued, true);
      assert.equal(await a.t.flush(5000), true);
      assert.equal(b.t.record({ flag: false }).queued, true, "B's copy of the ledger is stale");
      await new Promise((r) => setTimeout(r, 0)); // a later task, as a real pagehide is
      page.dispatchEvent(new Event("pagehide"));
      await b.t.flush(2000);
      const sent = s.requests.flatMap((r) => JSON.parse(r.body).reports);
      assert.equal(sent.length, 1, JSON.stringify(sent));
      assert.match(b.logger.lines.join("\n"), /dropped 1 report\(s\): already reported/);
      await a.t.close(0);
      await b.t.close(0);
    });
  } finally {
    await s.close();
  }
});

test("a 400 naming some reports drops those only; the server's text is escaped in the log", async () => {
  let first = true;
  const s = await server((req, res, body) => {
    const n = JSON.parse(body).reports.length;
    if (first && n === 2) {
      first = false;
      res.writeHead(400, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ error: "bad\n\u001b[31mFORGED LOG LINE", details: [{ index: 1, field: "values.flag\r\nX", message: "no" }] }));
    } else ack(res, n);
  });
  try {
    // Two reports of two days already in the outbox, as after a restart, go as one batch.
    const store = new MemoryStore();
    const logger = quietLogger();
    await store.append([
      { id: "a".repeat(32), schema: "hostile", version: 1, window: "2026-11-20", epsilon: 1, values: { flag: true } },
      { id: "b".repeat(32), schema: "hostile", version: 1, window: "2026-11-21", epsilon: 1, values: { flag: false } },
    ], { maxReports: 10, maxBytes: 1 << 20, perDay: 1 });
    const t = new TelemetryClient({ endpoint: s.url, schema: SCHEMA, maxEpsilon: 2, store, logger, backoffBaseMs: 10 });
    assert.equal(await t.flush(5000), true);
    assert.equal(s.requests.length, 2);
    assert.deepEqual(JSON.parse(s.requests[1].body).reports.map((r) => r.id), ["a".repeat(32)]);
    const line = logger.lines.find((l) => l.includes("dropped"));
    assert.ok(line, logger.lines.join("\n"));
    assert.ok(!/[\r\n\u001b]/.test(line), `unescaped server text: ${line}`);
    await t.close(0);
  } finally {
    await s.close();
  }
});

test("requests send no cookies and no referrer, and are never followed blindly", async () => {
  const inits = [];
  const s = await server((req, res) => ack(res));
  try {
    const recording = (url, init) => {
      inits.push(init);
      return fetch(url, init);
    };
    const { t } = client(s.url, { fetch: recording });
    t.record({ flag: true });
    assert.equal(await t.flush(5000), true);
    assert.ok(inits.length >= 1);
    for (const init of inits) {
      assert.equal(init.credentials, "omit");
      assert.equal(init.referrerPolicy, "no-referrer");
      assert.equal(init.redirect, "manual");
      assert.ok(init.signal instanceof AbortSignal);
    }
    await t.close(0);
  } finally {
    await s.close();
  }
});

test("the ledger: one report per window, a day and its hours overlap, and the daily cap", async () => {
  const store = new MemoryStore();
  const limits = { maxReports: 100, maxBytes: 1 << 20, perDay: 2.5 };
  const report = (window, id) => ({ id: id.repeat(32), schema: "s", version: 1, window, epsilon: 1, values: {} });
  const a = await store.append([report("2026-11-21T05", "a"), report("2026-11-21T05", "b"), report("2026-11-21", "c"),
    report("2026-11-21T06", "d"), report("2026-11-21T07", "e"), report("2026-11-22", "f")], limits);
  assert.equal(a.refused.length, 3); // the same hour, its day, then the cap (2 spent + 1 > 2.5)
  assert.deepEqual((await store.peek(10)).map((r) => r.report.id[0]), ["a", "d", "f"]);
});

test("the outbox is bounded in reports and bytes: the oldest go first", async () => {
  const store = new MemoryStore();
  const report = (i) => ({ id: String(i).padStart(32, "x"), schema: "s", version: 1, window: `2026-11-${String(i).padStart(2, "0")}`, epsilon: 1, values: {} });
  const r = await store.append([1, 2, 3, 4, 5].map(report), { maxReports: 3, maxBytes: 1 << 20, perDay: 1 });
  assert.equal(r.evicted, 2);
  assert.deepEqual((await store.peek(10)).map((x) => x.report.window), ["2026-11-03", "2026-11-04", "2026-11-05"]);
  const size = (await store.peek(1))[0].bytes;
  const r2 = await store.append([6].map(report), { maxReports: 10, maxBytes: 2 * size, perDay: 1 });
  assert.equal(r2.evicted, 2);
});

test("records made before the schema is known wait in memory, within maxPending", async () => {
  const { t } = client("http://127.0.0.1:9", { schema: "hostile", maxPending: 2 });
  assert.equal(t.record({ flag: true }).pending, true);
  assert.equal(t.record({ flag: false }).pending, true);
  const third = t.record({ flag: true });
  assert.equal(third.pending, false);
  assert.match(third.reason, /maxPending/);
  await t.close(0);
});

test("the Node data folder: files 0600 in a 0700 folder, the outbox holds randomised reports only", async () => {
  const dir = join(tempDir(), "data");
  const s = await server((req, res) => {
    res.writeHead(503, { "Retry-After": "0" });
    res.end();
  });
  try {
    const logger = quietLogger();
    const t = new TelemetryClient({ endpoint: s.url, schema: { ...SCHEMA, attributes: [{ name: "x", type: "numeric", range: [0, 100], mechanism: "laplace" }] },
      maxEpsilon: 2, dataDir: dir, logger, backoffBaseMs: 10 });
    assert.equal(await t.waitForSchema(5000), true);
    t.record({ x: 42.4242421 });
    assert.equal(await t.flush(300), false); // the server says 503: the report waits on disk
    await t.close(0);
    const { readdirSync, readFileSync, statSync } = await import("node:fs");
    const files = readdirSync(dir);
    assert.ok(files.includes("js-outbox-hostile.json"), files.join(", "));
    for (const f of files) {
      assert.equal(statSync(join(dir, f)).mode & 0o777, 0o600, f);
      assert.ok(!readFileSync(join(dir, f), "latin1").includes("42.4242421"), `${f} holds the true value`);
    }
    const outbox = JSON.parse(readFileSync(join(dir, "js-outbox-hostile.json"), "utf8"));
    assert.equal(outbox.outbox.length, 1);
    assert.deepEqual(Object.keys(outbox.outbox[0].report).sort(), ["epsilon", "id", "schema", "values", "version", "window"]);
  } finally {
    await s.close();
  }
});

test("a memoised schema is refused with a clear message where crypto.subtle is missing (no secure context)", async () => {
  const { randomize } = await import("../dist/index.js");
  const memoised = { name: "memo", version: 1, epsilon: 1, epsilon_permanent: 3, attributes: [{ name: "flag", type: "boolean" }] };
  // As on an http:// page that is not localhost: Web Crypto's subtle is absent there.
  Object.defineProperty(globalThis.crypto, "subtle", { value: undefined, configurable: true });
  try {
    await assert.rejects(randomize(memoised, { flag: true }, { deviceSecret: new Uint8Array(32) }), /crypto\.subtle \(HTTPS or localhost\)/);
    assert.throws(() => new TelemetryClient({ endpoint: "http://127.0.0.1:9", schema: memoised, maxEpsilon: 2, store: new MemoryStore() }),
      /crypto\.subtle/);
  } finally {
    delete globalThis.crypto.subtle;
  }
  assert.ok(globalThis.crypto.subtle, "restored");
});

// What the log says when delivery fails: the request (method and URL) and why, the network's cause
// or the status with the server's sentence, escaped. Before, a Node app with its server down logged
// only "TypeError".
test("a failed request is logged with its URL and why: the network's cause, or the status and the server's sentence", async () => {
  const down = `http://127.0.0.1:${await freePort()}`; // nothing listens there
  const { t, logger } = client(down, { schema: "hostile", backoffBaseMs: 5, backoffCapMs: 10 });
  assert.equal(await t.waitForSchema(300), false);
  await t.close(0);
  const line = logger.lines.find((l) => l.includes(`GET ${down}/api/v1/schemas/hostile failed`));
  assert.ok(line, logger.lines.join("\n"));
  assert.match(line, /ECONNREFUSED/);

  const s = await server((req, res) => {
    res.writeHead(503, { "Content-Type": "application/json" });
    res.end(JSON.stringify({ error: "down for\nmaintenance \u001b[31m" }));
  });
  try {
    const busy = client(s.url);
    assert.equal(await busy.t.waitForSchema(2000), true);
    busy.t.record({ flag: true });
    assert.equal(await busy.t.flush(300), false);
    await busy.t.close(0);
    const said = busy.logger.lines.find((l) => l.startsWith(`POST ${s.url}/api/v1/reports answered HTTP 503`));
    assert.ok(said, busy.logger.lines.join("\n"));
    assert.ok(said.includes('"down for\\nmaintenance \\u001b[31m"'), said);
  } finally {
    await s.close();
  }
});

// Offline (navigator.onLine false, as a browser says it), no request is made and no retry spent;
// the `online` event sends what waits at once. Node has no navigator: the test lends one, and a
// fetch that fails while it says offline, as a browser's does.
test("offline, nothing is posted and no backoff is spent; back online, what waits goes out", async () => {
  const s = await server((req, res, body) => ack(res, JSON.parse(body).reports.length));
  const navigator = { onLine: false };
  Object.defineProperty(globalThis, "navigator", { value: navigator, configurable: true, writable: true });
  try {
    await asPage(async (page) => {
      let triedOffline = 0;
      const browserFetch = (url, init) => (navigator.onLine ? fetch(url, init) : (triedOffline++, Promise.reject(new TypeError("Failed to fetch"))));
      const { t, logger } = client(s.url, { lingerMs: 0, backoffBaseMs: 60_000, backoffCapMs: 60_000, fetch: browserFetch });
      assert.equal(await t.waitForSchema(2000), true);
      assert.equal(t.record({ flag: true }).queued, true);
      assert.equal(await t.flush(300), false);
      assert.equal(triedOffline, 0, "requests tried while offline");
      navigator.onLine = true;
      page.dispatchEvent(new Event("online"));
      // A minute's backoff would apply had the offline time been spent on retries.
      assert.equal(await t.flush(5000), true, logger.lines.join("\n"));
      assert.equal(s.requests.length, 1);
      await t.close(0);
    });
  } finally {
    delete globalThis.navigator;
    await s.close();
  }
});

// The pattern js/README.md gives PostHog users: record the visit's summary at pagehide. The page may
// never run a timer again, so the report goes out with keepalive the moment it is stored, not on the
// sender's next turn (a minute's linger here).
test("a record made at pagehide goes out with keepalive as soon as it is stored", async () => {
  const s = await server((req, res, body) => ack(res, JSON.parse(body).reports.length));
  try {
    await asPage(async (page) => {
      const { t, logger } = client(s.url, { lingerMs: 60_000 });
      assert.equal(await t.waitForSchema(2000), true);
      page.addEventListener("pagehide", () => t.record({ flag: true })); // the app's listener
      page.dispatchEvent(new Event("pagehide"));
      for (let i = 0; i < 100 && !s.requests.length; i++) await new Promise((r) => setTimeout(r, 10));
      assert.equal(s.requests.length, 1, logger.lines.join("\n"));
      assert.match(s.requests[0].headers["content-type"], /^text\/plain/, "with keepalive");
      await t.close(0);
    });
  } finally {
    await s.close();
  }
});

// The relay module is not loaded in this process (test/relay-client.test.js loads it): a client given
// a relay keeps its reports and says so once, and never posts them to the aggregator directly.
test("a client with a relay but without the relay module keeps its reports, warns once, never posts around it", async () => {
  const s = await server((req, res) => ack(res));
  try {
    const { t, logger } = client(s.url, { relay: s.url, lingerMs: 0 });
    assert.equal(await t.waitForSchema(2000), true);
    assert.equal(t.record({ flag: true }).queued, true);
    assert.equal(await t.flush(500), false);
    await t.close(0);
    assert.deepEqual(s.requests, []);
    const said = logger.lines.filter((l) => l.includes("relay module is not loaded"));
    assert.deepEqual(said, ['the relay module is not loaded (import "ldp-telemetry/relay", or ldp-telemetry-relay.min.js): reports wait in the outbox']);
  } finally {
    await s.close();
  }
});
