// `record()`'s cost in Node (the data-folder store) and in headless Chromium (IndexedDB, the
// <script> bundle), for `make bench` (bench/run.py, step js-record), beside the Python client's.
//
//   node scripts/bench-record.mjs '{"schema": {...}, "record": {...}, "calls": 20000, "rounds": 3}'
//
// prints one JSON line: {node: {queued, suppressed}, chromium: {queued, suppressed} | {skipped}}.
// bench/run.py passes the schema and record its Python figure uses (hour windows). Each round is
// a fresh client (in Node in a fresh process, in Chromium in a fresh page) whose schema is known
// and store open (waitForSchema); then `calls` records, each in a new hour ("queued": validate,
// claim the window, randomise, queue) and then as many in one hour ("suppressed": refused by the
// ledger). The client reads the time from Date.now(), which is set to that hour just before each
// call and put back after it, outside the timed span. The calls run back to back, so the sender
// (which stores and sends between turns of the event loop) is not in the figures: they are what
// record() itself costs the app. Figures: the median over rounds of each round's median and p99, in µs.
//
// Chromium gives pages a coarse clock (100 µs; 5 µs when cross-origin isolated, as the page here
// is served), too coarse for one call: there every `block` consecutive calls are timed together
// and each block's mean is one sample (its p99 is so of block means: a single slow call is
// averaged with its block's). Node times every call alone, as the Python figure does.
import { execFileSync } from "node:child_process";
import { createServer } from "node:http";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const CHROMIUM = "/usr/bin/chromium";
const ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"];
const BUNDLE = new URL("../dist/ldp-telemetry.min.js", import.meta.url);
const HOUR = 3_600_000;
const START = Date.UTC(2026, 0, 1);

const input = JSON.parse(process.argv[2] ?? "{}");
const { schema, record, calls = 20_000, rounds = 3, block = 100 } = input;
if (!schema || !record) throw new Error("usage: node scripts/bench-record.mjs '{\"schema\": {...}, \"record\": {...}}'");

/** One round in this realm: `make` builds a client, `now` reads the clock. Runs in Node and, as
 * its source text, in the page (so both time the same loop). */
async function round({ schema, record, calls, block, start, hour }, make, now) {
  const quiet = { warn() {}, error() {}, info() {} };
  const client = make({ endpoint: "http://127.0.0.1:9", schema, maxEpsilon: 10, maxEpsilonPerDay: 24 * 10,
    maxOutbox: 10 * calls, logger: quiet });
  if (!(await client.waitForSchema(10_000))) throw new Error("no schema");
  const realNow = Date.now;
  const out = {};
  for (const [label, advance] of [["queued", true], ["suppressed", false]]) {
    const samples = [];
    let moment = start;
    const clock = () => moment;
    for (let i = 0; i < calls; i += block) {
      let spent = 0;
      for (let j = 0; j < block; j++) {
        if (advance) moment += hour;
        Date.now = clock;
        const t0 = now();
        const r = client.record(record);
        const t1 = now();
        Date.now = realNow;
        if (r.queued !== advance) throw new Error(`${label}: ${r.reason}`);
        if (block === 1) samples.push(t1 - t0);
        else spent += t1 - t0;
      }
      if (block > 1) samples.push(spent / block);
    }
    samples.sort((a, b) => a - b);
    out[label] = { median_us: samples[samples.length >> 1], p99_us: samples[Math.floor(samples.length * 0.99)], samples: samples.length };
    start = moment; // the suppressed round's hour was spent by the last queued call
  }
  // The client is left as it is: its process or page ends next, before its sender stores the
  // burst (tens of thousands of windows at once, which no device makes).
  return out;
}

/** The median over rounds of each figure, rounded to 0.01 µs. */
function medians(runs) {
  const out = {};
  for (const label of Object.keys(runs[0])) {
    out[label] = {};
    for (const figure of Object.keys(runs[0][label])) {
      const values = runs.map((r) => r[label][figure]).sort((a, b) => a - b);
      out[label][figure] = Math.round(values[values.length >> 1] * 100) / 100;
    }
  }
  return out;
}

/** One Node round in this process: a fresh data folder, then exit at once (the sender would go on
 * storing the burst in the background, and into the next round's figures). */
async function nodeRound(i) {
  const { TelemetryClient } = await import("../dist/index.js");
  const dataDir = mkdtempSync(join(tmpdir(), "ldp-bench-js-"));
  try {
    // performance.now() is in ms with sub-µs resolution in Node.
    return await round({ schema, record, calls, block: 1, start: START + i * calls * 2 * HOUR, hour: HOUR },
      (o) => new TelemetryClient({ ...o, dataDir }), () => performance.now() * 1000);
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/** Each round in a fresh Node process (scripts/bench-record.mjs with `round`). */
function inNode() {
  const runs = [];
  for (let i = 0; i < rounds; i++) {
    const out = execFileSync(process.execPath, [fileURLToPath(import.meta.url), JSON.stringify({ ...input, round: i })], { encoding: "utf8" });
    runs.push(JSON.parse(out));
  }
  return { ...medians(runs), store: "files" };
}

async function inChromium() {
  let playwright;
  try {
    playwright = await import("playwright-core");
  } catch {
    return { skipped: "no playwright-core (npm ci)" };
  }
  if (!existsSync(CHROMIUM)) return { skipped: `${CHROMIUM} is absent` };
  // Cross-origin isolated (COOP + COEP): the page's clock is 5 µs rather than 100 µs.
  const headers = { "Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp" };
  const site = createServer((req, res) => {
    const js = req.url === "/ldp-telemetry.min.js";
    res.writeHead(200, { ...headers, "Content-Type": js ? "text/javascript" : "text/html" });
    res.end(js ? readFileSync(BUNDLE) : '<!doctype html><meta charset="utf-8"><script src="/ldp-telemetry.min.js"></script>');
  });
  await new Promise((r) => site.listen(0, "127.0.0.1", r));
  const browser = await playwright.chromium.launch({ executablePath: CHROMIUM, args: ARGS });
  try {
    const runs = [];
    let isolated;
    for (let i = 0; i < rounds; i++) {
      const tab = await browser.newPage(); // a fresh page: a fresh client, its IndexedDB cleared below
      await tab.goto(`http://localhost:${site.address().port}/`);
      const got = await tab.evaluate(async ([source, args]) => {
        await new Promise((ok) => { const q = indexedDB.deleteDatabase("ldp-telemetry"); q.onsuccess = q.onerror = ok; });
        const round = (0, eval)(`(${source})`);
        const out = await round(args, (o) => new LdpTelemetry.TelemetryClient(o), () => performance.now() * 1000);
        return { out, isolated: self.crossOriginIsolated, indexedDB: typeof indexedDB };
      }, [round.toString(), { schema, record, calls, block, start: START + i * calls * 2 * HOUR, hour: HOUR }]);
      runs.push(got.out);
      isolated = got.isolated;
      await tab.close();
    }
    return { ...medians(runs), store: "indexeddb", block, cross_origin_isolated: isolated };
  } finally {
    await browser.close();
    await new Promise((r) => site.close(r));
  }
}

if (input.round !== undefined) {
  console.log(JSON.stringify(await nodeRound(input.round)));
  process.exit(0);
}
console.log(JSON.stringify({ node: inNode(), chromium: await inChromium(), calls, rounds }));
