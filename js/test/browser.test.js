// In a real browser (headless Chromium through playwright-core, Debian's /usr/bin/chromium): a page
// served from another origin loads the <script> bundle, records, and is closed at once; its
// report, sent on pagehide with fetch keepalive (text/plain, no preflight), is counted by a real
// aggregator. The page's sender is told to linger a minute, so the closing path delivers (a plain
// fetch a turn already running may have begun dies with the page: the closing path sends it again).
// The page closes as soon as its report is stored, a few milliseconds after record().
// Then IndexedDB is read back whole: randomised reports, ledger, schema, a non-extractable key; no true value.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { createServer } from "node:http";
import { join } from "node:path";
import { windowOf } from "../dist/index.js";
import { counts, freePort, haveServer, publish, startServer, tempDir } from "./helpers.js";

const CHROMIUM = "/usr/bin/chromium";
const ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"];
const BUNDLE = new URL("../dist/ldp-telemetry.min.js", import.meta.url);
const SCHEMA = { name: "js-browser", version: 1, epsilon: 2, window: "day",
  attributes: [{ name: "dark_mode", type: "boolean" }, { name: "os", type: "categorical", categories: ["linux", "macos", "windows", "other"] }] };

let playwright;
try {
  playwright = await import("playwright-core");
} catch {
  playwright = undefined;
}
const why = !existsSync(CHROMIUM) ? `${CHROMIUM} is absent (apt-get install chromium)` : !playwright ? "no playwright-core (npm ci)"
  : !haveServer() ? "no .venv (make install)" : false;

/** A site on 127.0.0.1 whose every page loads the <script> bundle. */
async function bundleSite() {
  const site = createServer((req, res) => {
    const js = req.url === "/ldp-telemetry.min.js";
    res.writeHead(200, { "Content-Type": js ? "text/javascript" : "text/html" });
    res.end(js ? readFileSync(BUNDLE) : '<!doctype html><meta charset="utf-8"><script src="/ldp-telemetry.min.js"></script>');
  });
  await new Promise((r) => site.listen(0, "127.0.0.1", r));
  return site;
}

function page(endpoint) {
  return `<!doctype html><meta charset="utf-8"><title>app</title><script src="/ldp-telemetry.min.js"></script>
<script>
  window.result = (async () => {
    const t = new LdpTelemetry.TelemetryClient({ endpoint: ${JSON.stringify(endpoint)}, schema: "js-browser", maxEpsilon: 4,
      lingerMs: 60000 });
    if (!(await t.waitForSchema(15000))) return { error: "no schema" };
    const r = t.record({ dark_mode: true, os: "linux" });
    // Until the report is in IndexedDB (milliseconds): only a report whose window the store's
    // check-and-spend has taken leaves a closing page (another tab may have spent that window).
    const db = await new Promise((ok) => { const q = indexedDB.open("ldp-telemetry"); q.onsuccess = () => ok(q.result); });
    const stored = () => new Promise((ok) => { const q = db.transaction("outbox").objectStore("outbox").count(); q.onsuccess = () => ok(q.result); });
    for (let i = 0; i < 500 && !(await stored()); i++) await new Promise((ok) => setTimeout(ok, 2));
    db.close();
    return { queued: r.queued, reason: r.reason, window: r.window };
  })().catch((e) => ({ error: String(e) }));
</script>`;
}

test("browser: a page on another origin records, is closed at once, and its report is counted", { skip: why }, async () => {
  const dir = tempDir();
  const port = await freePort();
  const aggregator = await startServer({ db: join(dir, "x.db"), port });
  const site = createServer((req, res) => {
    if (req.url === "/ldp-telemetry.min.js") {
      res.writeHead(200, { "Content-Type": "text/javascript" });
      res.end(readFileSync(BUNDLE));
    } else {
      res.writeHead(200, { "Content-Type": "text/html" });
      res.end(page(aggregator.url));
    }
  });
  await new Promise((r) => site.listen(0, "127.0.0.1", r));
  const origin = `http://localhost:${site.address().port}`; // another origin than 127.0.0.1:<port>
  const browser = await playwright.chromium.launch({ executablePath: CHROMIUM, args: ARGS });
  try {
    await publish(aggregator.url, SCHEMA);
    const context = await browser.newContext();
    const tab = await context.newPage();
    const errors = [];
    tab.on("pageerror", (e) => errors.push(String(e)));
    const traffic = []; // for the failure message: what the page sent and what came back
    tab.on("requestfinished", async (r) => traffic.push(`${r.method()} ${r.url()} ${(await r.response())?.status()}`));
    tab.on("requestfailed", (r) => traffic.push(`${r.method()} ${r.url()} failed: ${r.failure()?.errorText}`));
    await tab.goto(`${origin}/app.html`);
    const result = await tab.evaluate(() => window.result);
    assert.equal(result.queued, true, JSON.stringify(result) + errors.join("\n"));
    await tab.close({ runBeforeUnload: true });

    const key = `${windowOf(Date.now(), "day")} dark_mode`;
    let n;
    for (let i = 0; i < 100 && !n?.[key]; i++) {
      await new Promise((r) => setTimeout(r, 100));
      n = await counts(aggregator.url, SCHEMA.name);
    }
    assert.equal(n[key], 1, `${JSON.stringify(n)}\n${traffic.join("\n")}`);

    // IndexedDB holds randomised reports, the ledger, the schema and a non-extractable key, never
    // a true value: a record made against a server that is down stays in the outbox, and every
    // store of the database is read back.
    const other = await context.newPage();
    await other.goto(`${origin}/app.html`);
    const dump = await other.evaluate(async ({ dead, truth }) => {
      const t = new LdpTelemetry.TelemetryClient({ endpoint: dead, maxEpsilon: 4, lingerMs: 0, logger: { warn() {}, error() {}, info() {} },
        schema: { name: "idb-check", version: 1, epsilon: 1, attributes: [{ name: "minutes", type: "numeric", range: [0, 120], mechanism: "pm" }] } });
      await t.waitForSchema(5000);
      const r = t.record({ minutes: truth });
      const db = await new Promise((ok, no) => { const q = indexedDB.open("ldp-telemetry"); q.onsuccess = () => ok(q.result); q.onerror = no; });
      const read = async () => {
        const out = {};
        for (const name of db.objectStoreNames) {
          const store = db.transaction(name).objectStore(name);
          out[name] = await new Promise((ok) => { const q = store.getAll(); q.onsuccess = () => ok(q.result.map((v) => v instanceof CryptoKey ? { extractable: v.extractable } : v)); });
        }
        return out;
      };
      // Until the sender has stored the report (it cannot deliver it: the server is down).
      let out = await read();
      for (let i = 0; i < 200 && !out.outbox.some((row) => row.report.schema === "idb-check"); i++) {
        await new Promise((ok) => setTimeout(ok, 50));
        out = await read();
      }
      return { queued: r.queued, out };
    }, { dead: "http://127.0.0.1:9", truth: 87.654321 });
    assert.equal(dump.queued, true);
    assert.equal(dump.out.outbox.filter((row) => row.report.schema === "idb-check").length, 1, JSON.stringify(dump));
    assert.deepEqual(dump.out.secret, [{ extractable: false }]);
    assert.ok(!JSON.stringify(dump.out).includes("87.654321"), "IndexedDB holds a true value");
    await context.close();
  } finally {
    await browser.close();
    await new Promise((r) => site.close(r));
    await aggregator.stop();
  }
});

// On a page that is no secure context (http:// on a name other than localhost: app.test, mapped to
// 127.0.0.1 by Chromium's resolver) there is no crypto.subtle. A memoised schema is refused there;
// any other records and is delivered, with IndexedDB as its store.
test("browser: a page that is no secure context records a schema that is not memoised", { skip: why }, async () => {
  const dir = tempDir();
  const port = await freePort();
  const aggregator = await startServer({ db: join(dir, "x.db"), port });
  const site = await bundleSite();
  const browser = await playwright.chromium.launch({ executablePath: CHROMIUM, args: [...ARGS, "--host-resolver-rules=MAP app.test 127.0.0.1"] });
  try {
    await publish(aggregator.url, SCHEMA);
    const tab = await browser.newPage();
    await tab.goto(`http://app.test:${site.address().port}/`);
    const out = await tab.evaluate(async (endpoint) => {
      const t = new LdpTelemetry.TelemetryClient({ endpoint, schema: "js-browser", maxEpsilon: 4, lingerMs: 0 });
      const ready = await t.waitForSchema(15000);
      const r = t.record({ dark_mode: true, os: "linux" });
      return { secure: isSecureContext, subtle: !!crypto.subtle, ready, queued: r.queued, reason: r.reason, delivered: await t.flush(15000) };
    }, aggregator.url);
    assert.deepEqual(out, { secure: false, subtle: false, ready: true, queued: true, reason: "queued", delivered: true });
    const n = await counts(aggregator.url, SCHEMA.name);
    assert.equal(n[`${windowOf(Date.now(), "day")} dark_mode`], 1);
  } finally {
    await browser.close();
    await new Promise((r) => site.close(r));
    await aggregator.stop();
  }
});

// The <script> bundle is the ES module's own program: every report case of the vectors runs in the
// page too, memoised ones included, and every invalid record. The page reads the vectors' text with
// the bundle's parseJson, as the client reads a served schema: a histogram edge written 100.0 is
// written so in the HMAC message, as Python and Node write it (the case memoised-float-edges).
test("browser: the <script> bundle passes every report vector in the page", { skip: !existsSync(CHROMIUM) ? `${CHROMIUM} is absent` : !playwright && "no playwright-core (npm ci)" }, async () => {
  const text = readFileSync(new URL("../../tests/vectors/randomness.json", import.meta.url), "utf8");
  const site = await bundleSite();
  const browser = await playwright.chromium.launch({ executablePath: CHROMIUM, args: ARGS });
  try {
    const tab = await browser.newPage();
    await tab.goto(`http://localhost:${site.address().port}/`); // localhost: a secure context (crypto.subtle)
    const out = await tab.evaluate(async (text) => {
      const v = JSON.parse(text);
      // The schemas as the client reads a served one (parseJson): an edge written 100.0 stays a float.
      const schemas = new Map(LdpTelemetry.parseJson(text).schemas.map((s) => [s.name, s]));
      const hex = (s) => Uint8Array.from(s.match(/../g) ?? [], (h) => parseInt(h, 16));
      const secret = (c) => (c.device_secret === null ? undefined : hex(c.device_secret));
      const wrong = [];
      for (const c of v.reports) {
        const data = hex(c.random_bytes);
        let used = 0;
        const source = { take: (n) => { if (used + n > data.length) throw new Error("ran out"); return data.subarray(used, (used += n)); } };
        try {
          const r = await LdpTelemetry.randomize(schemas.get(c.schema), c.record, { window: c.window, deviceSecret: secret(c), source });
          if (JSON.stringify(r) !== JSON.stringify(c.report) || used !== data.length) wrong.push(`${c.name}: ${JSON.stringify(r)}`);
        } catch (e) {
          wrong.push(`${c.name}: ${e}`);
        }
      }
      for (const c of v.invalid_records) {
        const field = c.field === "device_secret" ? "deviceSecret" : c.field;
        const e = await LdpTelemetry.randomize(schemas.get(c.schema), c.record, { window: c.window, deviceSecret: secret(c),
          source: { take: () => { throw new Error("no coins"); } } }).then(() => undefined, (e) => e);
        if (!(e instanceof LdpTelemetry.RecordError && e.field === field)) wrong.push(`${c.name}: ${e}`);
      }
      return { wrong, n: v.reports.length + v.invalid_records.length };
    }, text);
    assert.deepEqual(out.wrong, []);
    assert.ok(out.n > 20);
  } finally {
    await browser.close();
    await new Promise((r) => site.close(r));
  }
});

// The bundle makes every check the ES module makes: in the page, every valid schema parses and every
// invalid one is refused for the vectors' reason (read as the client reads a served schema, with
// parseJson: a level written 2.0 is a float, and refused).
test("browser: the <script> bundle's parseSchema makes every check of the vectors", { skip: !existsSync(CHROMIUM) ? `${CHROMIUM} is absent` : !playwright && "no playwright-core (npm ci)" }, async () => {
  const vectors = (name) => readFileSync(new URL(`../../tests/vectors/${name}`, import.meta.url), "utf8");
  const valid = vectors("schemas.json");
  const invalid = vectors("invalid_schemas.json");
  const fields = JSON.parse(invalid).map((c) => c.field);
  const browser = await playwright.chromium.launch({ executablePath: CHROMIUM, args: ARGS });
  try {
    const tab = await browser.newPage();
    await tab.addScriptTag({ content: readFileSync(BUNDLE, "utf8") });
    const out = await tab.evaluate(([validText, invalidText]) => {
      const [valid, invalid] = [validText, invalidText].map(LdpTelemetry.parseJson);
      const field = (schema) => {
        try {
          LdpTelemetry.parseSchema(schema);
          return null;
        } catch (e) {
          return e instanceof LdpTelemetry.SchemaError ? e.field : String(e);
        }
      };
      return { valid: valid.flatMap((c) => [field(c.schema), field(c.derived)]), invalid: invalid.map((c) => field(c.schema)) };
    }, [valid, invalid]);
    assert.deepEqual(out.valid.filter((f) => f !== null), []);
    assert.deepEqual(out.invalid, fields);
    assert.ok(fields.length >= 40);
  } finally {
    await browser.close();
  }
});

// The IndexedDB ledger is read by key range: a record's check-and-spend reads the rows of its own day,
// not the ledger's whole history (an hourly schema spends 8,760 windows a year, and every report
// made used to read them all).
test("browser: a record reads the ledger of its day only, not every window ever spent", { skip: !existsSync(CHROMIUM) ? `${CHROMIUM} is absent` : !playwright && "no playwright-core (npm ci)" }, async () => {
  const site = await bundleSite();
  const browser = await playwright.chromium.launch({ executablePath: CHROMIUM, args: ARGS });
  try {
    const tab = await browser.newPage();
    await tab.goto(`http://localhost:${site.address().port}/`);
    const out = await tab.evaluate(async () => {
      const schema = { name: "js-range", version: 1, epsilon: 1, window: "hour", attributes: [{ name: "flag", type: "boolean" }] };
      const done = (q) => new Promise((ok, no) => { q.onsuccess = q.oncomplete = () => ok(q.result); q.onerror = () => no(q.error); });
      // A year of hours already spent (the client's own database layout, made here first).
      const open = indexedDB.open("ldp-telemetry", 1);
      open.onupgradeneeded = () => {
        for (const name of ["secret", "schemas", "ledger", "outbox"]) open.result.createObjectStore(name, { autoIncrement: name === "outbox" });
      };
      const db = await done(open);
      const tx = db.transaction("ledger", "readwrite");
      const start = Date.now() - 400 * 86_400_000;
      for (let h = 0; h < 8760; h++) tx.objectStore("ledger").put(1, [schema.name, new Date(start + h * 3_600_000).toISOString().slice(0, 13)]);
      await done(tx);
      // Rows the ledger store hands out, from here on.
      let rows = 0;
      for (const method of ["getAll", "getAllKeys"]) {
        const original = IDBObjectStore.prototype[method];
        IDBObjectStore.prototype[method] = function (...args) {
          const q = original.apply(this, args);
          if (this.name === "ledger") q.addEventListener("success", () => (rows += q.result.length));
          return q;
        };
      }
      const t = new LdpTelemetry.TelemetryClient({ endpoint: "http://127.0.0.1:9", schema, maxEpsilon: 4, maxEpsilonPerDay: 24, lingerMs: 60000,
        logger: { warn() {}, error() {} } });
      if (!(await t.waitForSchema(10000))) return { error: "no schema" };
      const atOpen = rows; // the ledger learnt once per start
      const r = t.record({ flag: true });
      const stored = () => done(db.transaction("outbox").objectStore("outbox").count());
      for (let i = 0; i < 500 && !(await stored()); i++) await new Promise((ok) => setTimeout(ok, 2));
      return { queued: r.queued, atOpen, perRecord: rows - atOpen, stored: await stored() };
    });
    assert.equal(out.queued, true, JSON.stringify(out));
    assert.equal(out.stored, 1, JSON.stringify(out));
    assert.ok(out.perRecord <= 2 * 24, `the append read ${out.perRecord} ledger rows`);
  } finally {
    await browser.close();
    await new Promise((r) => site.close(r));
  }
});
