// The relay module in a real browser (headless Chromium, Debian's /usr/bin/chromium): a page on
// another origin loads ldp-telemetry.min.js and ldp-telemetry-relay.min.js and records with the
// `relay` option. First against a stand-in relay (a Node server answering CORS as the relay does),
// which opens what arrives: one padded request encapsulated with the browser's own Web Crypto
// X25519, posted as text/plain (no preflight), while the stand-in aggregator gets the key fetch
// and nothing else. Then end to end: a real `ldp-telemetry relay` forwards it to a real aggregator,
// which counts it as relayed. The route waits its minute between the aggregator's key fetch and
// the first report, so each test takes a minute.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { createServer } from "node:http";
import { join } from "node:path";
import { windowOf } from "../dist/index.js";
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
 * loads both <script> files, records once with the relay and waits until it is delivered. */
async function appSite(endpoint, relayUrl) {
  const site = createServer((req, res) => {
    const file = { "/ldp-telemetry.min.js": "ldp-telemetry.min.js", "/ldp-telemetry-relay.min.js": "ldp-telemetry-relay.min.js" }[req.url];
    if (file) return res.writeHead(200, { "Content-Type": "text/javascript" }).end(readFileSync(new URL(file, DIST)));
    res.writeHead(200, { "Content-Type": "text/html" }).end(`<!doctype html><meta charset="utf-8">
<script src="/ldp-telemetry.min.js"></script><script src="/ldp-telemetry-relay.min.js"></script>
<script>
  window.result = (async () => {
    const t = new LdpTelemetry.TelemetryClient({ endpoint: ${JSON.stringify(endpoint)}, relay: ${JSON.stringify(relayUrl)},
      schema: ${JSON.stringify(SCHEMA.name)}, maxEpsilon: 4, lingerMs: 0 });
    if (!(await t.waitForSchema(15000))) return { error: "no schema" };
    const r = t.record({ dark_mode: true });
    return { queued: r.queued, reason: r.reason, delivered: await t.flush(90000) };
  })().catch((e) => ({ error: String(e) }));
</script>`);
  });
  await new Promise((r) => site.listen(0, "127.0.0.1", r));
  return { site, origin: `http://localhost:${site.address().port}` };
}

/** Opens the app's page in a fresh tab, checks its report was queued and delivered, closes the tab. */
async function recordInPage(browser, origin) {
  const tab = await browser.newPage();
  const said = [];
  tab.on("pageerror", (e) => said.push(String(e)));
  tab.on("console", (m) => said.push(m.text()));
  await tab.goto(`${origin}/app.html`);
  const result = await tab.evaluate(() => window.result);
  assert.deepEqual(result, { queued: true, reason: "queued", delivered: true }, `${JSON.stringify(result)}\n${said.join("\n")}`);
  await tab.close();
}

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
  const { site, origin } = await appSite(aggregator.url, relay.url);
  const browser = await playwright.chromium.launch({ executablePath: CHROMIUM, args: ARGS });
  try {
    await recordInPage(browser, origin);

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

test("browser e2e: a page on another origin, a real relay (--min-batch 1) and a real aggregator: the report is counted as relayed", { skip: why || (!haveRelay() && "no `ldp-telemetry relay` in .venv (make install)") }, async () => {
  const dir = tempDir();
  const aggregator = await startServer({ db: join(dir, "aggregator.db"), port: await freePort(), env: { LDP_RELAY_TOKENS: RELAY_TOKEN } });
  let relay;
  let site;
  const browser = await playwright.chromium.launch({ executablePath: CHROMIUM, args: ARGS });
  try {
    await publish(aggregator.url, { name: SCHEMA.name, version: 1, epsilon: 2, window: "day", attributes: [{ name: "dark_mode", type: "boolean" }] });
    relay = await startRelay({ db: join(dir, "relay.db"), port: await freePort(), aggregator: aggregator.url, flags: ["--min-batch", "1"] });
    let origin;
    ({ site, origin } = await appSite(aggregator.url, relay.url));
    await recordInPage(browser, origin);
    const key = `${windowOf(Date.now(), "day")} dark_mode`;
    let n = {};
    for (let i = 0; i < 100 && !n[key]; i++) {
      await new Promise((r) => setTimeout(r, 200));
      n = await counts(aggregator.url, SCHEMA.name);
    }
    assert.equal(n[key], 1, JSON.stringify(n));
    const rows = (await (await fetch(`${aggregator.url}/api/v1/estimates?schema=${SCHEMA.name}`)).json()).estimates;
    assert.ok(rows.every((row) => row.relayed === 1), JSON.stringify(rows));
  } finally {
    await browser.close();
    if (site) await new Promise((r) => site.close(r));
    await relay?.stop();
    await aggregator.stop();
  }
});
