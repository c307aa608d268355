// The relay module in a real browser (headless Chromium, Debian's /usr/bin/chromium): a page on
// another origin loads ldp-telemetry.min.js and ldp-telemetry-relay.min.js and records with the
// `relay` option. First against a stand-in relay (a Node server answering CORS as the relay does),
// which opens what arrives: one padded request encapsulated with the browser's own Web Crypto
// X25519, posted as text/plain (no preflight), while the stand-in aggregator gets the key fetch
// and nothing else. Then end to end, through a real `ldp-telemetry relay` to a real aggregator: a
// first visit's report waits at the relay for a second to fill its batch; the next visit records
// and is closed at once, its report sent with keepalive under the keys kept from the first; the
// aggregator counts both as relayed. The route waits its minute between the aggregator's key fetch
// and the first report, so each test takes a minute.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { createServer } from "node:http";
import { join } from "node:path";
import { byteServer as server, counts, freePort, haveRelay, publish, RELAY_TOKEN, startRelay, startServer, tempDir } from "./helpers.js";
import { bhttpFields, decapsulate, keyPair } from "./ohttp-receiver.js";

const CHROMIUM = "/usr/bin/chromium";
const ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"];
const DIST = new URL("../dist/", import.meta.url);
const SCHEMA = { name: "js-relayed", version: 1, epsilon: 2, window: "day", split: "equal", description: "",
  attributes: [{ name: "dark_mode", type: "boolean", epsilon: 2.0, mechanism: "rr", p: 0.8807970779778824, q: 0.11920292202211755 }] };

let playwright;
try {
  playwright = await import("playwright-core");
} catch {
  playwright = undefined;
}
const why = !existsSync(CHROMIUM) ? `${CHROMIUM} is absent (apt-get install chromium)` : !playwright ? "no playwright-core (npm ci)" : false;

const CORS = { "Access-Control-Allow-Origin": "*", "Access-Control-Expose-Headers": "Retry-After" };

/** A site on localhost (another origin than the servers on 127.0.0.1; a secure context) whose page
 * loads both <script> files and records once with the relay. `/app.html` then waits until the
 * report is delivered; `/closing.html` only until it is stored and its request sealed (its sender
 * lingers a minute), for the test to close the page; `?hoursAgo=1` records as if an hour ago (the page's clock set back). */
async function appSite(endpoint, relayUrl, schema) {
  const site = createServer((req, res) => {
    const file = { "/ldp-telemetry.min.js": "ldp-telemetry.min.js", "/ldp-telemetry-relay.min.js": "ldp-telemetry-relay.min.js" }[req.url];
    if (file) return res.writeHead(200, { "Content-Type": "text/javascript" }).end(readFileSync(new URL(file, DIST)));
    res.writeHead(200, { "Content-Type": "text/html" }).end(`<!doctype html><meta charset="utf-8">
<script>
  const hoursAgo = Number(new URLSearchParams(location.search).get("hoursAgo") ?? 0);
  const realNow = Date.now;
  Date.now = () => realNow() - hoursAgo * 3600000;
  // Web Crypto's AES-GCM encryptions, counted: the last step of sealing a request.
  window.encrypted = 0;
  const encrypt = crypto.subtle.encrypt.bind(crypto.subtle);
  crypto.subtle.encrypt = async (...args) => {
    const out = await encrypt(...args);
    window.encrypted++;
    return out;
  };
</script>
<script src="/ldp-telemetry.min.js"></script><script src="/ldp-telemetry-relay.min.js"></script>
<script>
  const closing = location.pathname === "/closing.html";
  window.result = (async () => {
    const t = new LdpTelemetry.TelemetryClient({ endpoint: ${JSON.stringify(endpoint)}, relay: ${JSON.stringify(relayUrl)},
      schema: ${JSON.stringify(schema)}, maxEpsilon: 4, lingerMs: closing ? 60000 : 0 });
    if (!(await t.waitForSchema(15000))) return { error: "no schema" };
    const r = t.record({ dark_mode: true });
    if (!closing) return { queued: r.queued, reason: r.reason, delivered: await t.flush(90000) };
    // Until the report is in IndexedDB (milliseconds): a closing page sends only what is stored.
    const db = await new Promise((ok) => { const q = indexedDB.open("ldp-telemetry"); q.onsuccess = () => ok(q.result); });
    const stored = () => new Promise((ok) => { const q = db.transaction("outbox").objectStore("outbox").count(); q.onsuccess = () => ok(q.result); });
    for (let i = 0; i < 500 && !(await stored()); i++) await new Promise((ok) => setTimeout(ok, 2));
    db.close();
    // And until its request is sealed ahead (a closing page cannot wait for Web Crypto): what follows
    // the encryption are microtasks, done before the next timer.
    for (let i = 0; i < 1000 && !window.encrypted; i++) await new Promise((ok) => setTimeout(ok, 10));
    await new Promise((ok) => setTimeout(ok, 0));
    return { queued: r.queued, reason: r.reason, sealed: window.encrypted === 1 };
  })().catch((e) => ({ error: String(e) }));
</script>`);
  });
  await new Promise((r) => site.listen(0, "127.0.0.1", r));
  return { site, origin: `http://localhost:${site.address().port}` };
}

/** Opens `url` in a fresh tab of `context`, checks its result is `expected`, and closes the tab
 * (as a user closes it: pagehide). */
async function recordInPage(context, url, expected) {
  const tab = await context.newPage();
  const said = [];
  tab.on("pageerror", (e) => said.push(String(e)));
  tab.on("console", (m) => said.push(m.text()));
  await tab.goto(url);
  const result = await tab.evaluate(() => window.result);
  assert.deepEqual(result, expected, `${JSON.stringify(result)}\n${said.join("\n")}`);
  await tab.close({ runBeforeUnload: true });
}

// Both tests wait out the route's minute: side by side, they take one minute, not two.
describe("the relay module in Chromium", { concurrency: true }, () => {
  test("browser: a page on another origin sends its report through the relay, encrypted by Chromium's Web Crypto, without a preflight", { skip: why }, async () => {
    const keys = keyPair(3);
    const serveKeys = (res) => res.writeHead(200, { ...CORS, "Content-Type": "application/ohttp-keys" }).end(keys.body);
    const aggregator = await server((req, res) => (req.url === "/api/v1/ohttp-keys" ? serveKeys(res) : res.writeHead(500, CORS).end()));
    const relay = await server((req, res) => {
      if (req.method === "OPTIONS") return res.writeHead(204, { ...CORS, "Access-Control-Allow-Methods": "POST, OPTIONS", "Access-Control-Allow-Headers": "Content-Type" }).end();
      if (req.url === "/ohttp-keys") return serveKeys(res);
      if (req.url === `/api/v1/schemas/${SCHEMA.name}`) return res.writeHead(200, { ...CORS, "Content-Type": "application/json" }).end(JSON.stringify(SCHEMA));
      if (req.url === "/relay" && req.method === "POST") return res.writeHead(202, CORS).end();
      res.writeHead(404, CORS).end();
    });
    const { site, origin } = await appSite(aggregator.url, relay.url, SCHEMA.name);
    const browser = await playwright.chromium.launch({ executablePath: CHROMIUM, args: ARGS });
    try {
      await recordInPage(browser, `${origin}/app.html`, { queued: true, reason: "queued", delivered: true });

      assert.deepEqual(aggregator.requests.map((r) => `${r.method} ${r.url}`), ["GET /api/v1/ohttp-keys"]);
      assert.equal(aggregator.requests[0].headers.origin, origin);
      assert.deepEqual(relay.requests.map((r) => `${r.method} ${r.url}`), [`GET /api/v1/schemas/${SCHEMA.name}`, "GET /ohttp-keys", "POST /relay"]);
      const post = relay.requests[2];
      assert.equal(post.headers["content-type"], "text/plain", "a CORS-safelisted type: no preflight (no OPTIONS above)");
      assert.equal(post.headers.cookie, undefined);
      assert.equal(post.headers.referer, undefined);
      assert.equal(post.body.length, 55 + 1024);
      assert.ok(post.at - aggregator.requests[0].at >= 60_000, "a minute between the aggregator's key fetch and the report");
      const message = bhttpFields(decapsulate(post.body, keys));
      assert.equal(message.path, "/api/v1/reports");
      assert.equal(message.content.reports.length, 1);
      assert.equal(message.content.reports[0].schema, SCHEMA.name);
      assert.equal(typeof message.content.reports[0].values.dark_mode, "boolean");
    } finally {
      await browser.close();
      await new Promise((r) => site.close(r));
      await aggregator.close();
      await relay.close();
    }
  });

  test("browser e2e: through a real relay (--min-batch 2) to a real aggregator; a page's next visit records and is closed at once", { skip: why || (!haveRelay() && "no `ldp-telemetry relay` in .venv (make install)") }, async () => {
    const dir = tempDir();
    const aggregator = await startServer({ db: join(dir, "aggregator.db"), port: await freePort(), env: { LDP_RELAY_TOKENS: RELAY_TOKEN } });
    const schema = "js-relayed-hourly";
    let relay;
    let site;
    const browser = await playwright.chromium.launch({ executablePath: CHROMIUM, args: ARGS });
    try {
      await publish(aggregator.url, { name: schema, version: 1, epsilon: 2, window: "hour", attributes: [{ name: "dark_mode", type: "boolean" }] });
      relay = await startRelay({ db: join(dir, "relay.db"), port: await freePort(), aggregator: aggregator.url, flags: ["--min-batch", "2"] });
      let origin;
      ({ site, origin } = await appSite(aggregator.url, relay.url, schema));
      const context = await browser.newContext(); // one browser storage for both visits
      // The first visit (an hour ago, by the page's clock): the keys are fetched, and a minute later
      // its report goes to the relay, which holds it: the batch is not full.
      await recordInPage(context, `${origin}/app.html?hoursAgo=1`, { queued: true, reason: "queued", delivered: true });
      assert.deepEqual(await counts(aggregator.url, schema), {}, "nothing before the batch fills");
      // The next visit: the keys are kept in IndexedDB, so its report leaves the closing page at once.
      await recordInPage(context, `${origin}/closing.html`, { queued: true, reason: "queued", sealed: true });
      // Two reports, one in each visit's hour (read from the counts: the visits may straddle an hour's end).
      let n = {};
      for (let i = 0; i < 100 && n["all dark_mode"] !== 2; i++) {
        await new Promise((r) => setTimeout(r, 200));
        n = await counts(aggregator.url, schema);
      }
      const windows = Object.keys(n).filter((key) => !key.startsWith("all "));
      assert.equal(n["all dark_mode"], 2, JSON.stringify(n));
      assert.equal(windows.length, 2, JSON.stringify(n));
      for (const w of windows) assert.equal(n[w], 1, JSON.stringify(n));
      const rows = (await (await fetch(`${aggregator.url}/api/v1/estimates?schema=${schema}`)).json()).estimates;
      assert.ok(rows.length && rows.every((row) => row.relayed === 1 && row.crowd !== null), JSON.stringify(rows));
    } finally {
      await browser.close();
      if (site) await new Promise((r) => site.close(r));
      await relay?.stop();
      await aggregator.stop();
    }
  });
});
