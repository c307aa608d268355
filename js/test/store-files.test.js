// The Node file store (src/store-files.ts) on a real data folder: what it writes survives a power
// cut (synced before the rename, the folder after), and a file that reads back damaged never lets
// a window be spent twice.
import { test } from "node:test";
import assert from "node:assert/strict";
import fs, { readdirSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { syncBuiltinESMExports } from "node:module";
import { join } from "node:path";
import { FileStore, TelemetryClient, windowOf } from "../dist/index.js";
import { quietLogger, tempDir } from "./helpers.js";

const DAY = { name: "files-day", version: 1, epsilon: 1, window: "day", attributes: [{ name: "flag", type: "boolean" }] };
const HOUR = { ...DAY, name: "files-hour", window: "hour" };
const report = (schema, window, id) => ({ id: id.repeat(32), schema, version: 1, window, epsilon: 1, values: { flag: true } });
const LIMITS = { maxReports: 100, maxBytes: 1 << 20, perDay: 24 };

/** Runs `body` while Node's fs/promises notes, in order, each sync of a file handle (by the path it
 * was opened with) and each rename; Node's own functions are called through. */
async function watchingDisk(body) {
  const events = [];
  const promises = fs.promises;
  const original = { open: promises.open, rename: promises.rename };
  const probe = await promises.open(join(tempDir(), "probe"), "w");
  const handleType = Object.getPrototypeOf(probe);
  await probe.close();
  const sync = handleType.sync;
  const paths = new WeakMap();
  promises.open = async (path, ...rest) => {
    const handle = await original.open(path, ...rest);
    paths.set(handle, String(path));
    return handle;
  };
  promises.rename = async (from, to) => {
    events.push(["rename", String(from), String(to)]);
    return original.rename(from, to);
  };
  handleType.sync = function () {
    events.push(["sync", paths.get(this)]);
    return sync.call(this);
  };
  syncBuiltinESMExports(); // `import("node:fs/promises")` now sees the watched functions
  try {
    await body(events);
  } finally {
    Object.assign(promises, original);
    handleType.sync = sync;
    syncBuiltinESMExports();
  }
}

test("the file store syncs the new file before it renames it into place, and the folder after", async () => {
  const dir = tempDir();
  await watchingDisk(async (events) => {
    const store = await FileStore.open(dir, DAY.name);
    await store.append([report(DAY.name, "2026-11-21", "a")], LIMITS);
    const file = join(dir, `js-outbox-${DAY.name}.json`);
    const rename = events.findIndex(([kind, , to]) => kind === "rename" && to === file);
    assert.ok(rename > 0, JSON.stringify(events));
    const [, temporary] = events[rename];
    assert.ok(events.slice(0, rename).some(([kind, path]) => kind === "sync" && path === temporary), `no sync of ${temporary} before the rename: ${JSON.stringify(events)}`);
    assert.ok(events.slice(rename).some(([kind, path]) => kind === "sync" && path === dir), `no sync of the folder after the rename: ${JSON.stringify(events)}`);
  });
});

test("a damaged file store counts today as spent: no window of today is reported again", async () => {
  for (const schema of [DAY, HOUR]) {
    const dir = tempDir();
    const file = join(dir, `js-outbox-${schema.name}.json`);
    writeFileSync(file, '{"schemas": {}, "ledger": {"files-', { mode: 0o600 }); // torn mid-write
    const logger = quietLogger();
    const t = new TelemetryClient({ endpoint: "http://127.0.0.1:9", schema, maxEpsilon: 2, dataDir: dir, logger });
    assert.equal(await t.waitForSchema(5000), true);
    const r = t.record({ flag: true });
    assert.equal(r.queued, false, `${schema.window}: a window of today was spent again`);
    assert.match(r.reason, /already reported/);
    const today = windowOf(Date.now(), "day");
    assert.ok(t.privacySpent()[schema.name][today], JSON.stringify(t.privacySpent()));
    assert.ok(readdirSync(dir).some((f) => f.startsWith(`js-outbox-${schema.name}.json.damaged-`)), "the damaged file is kept aside");
    await t.close(0);
  }
});

test("a file store whose ledger has the wrong shape is damaged too, not an empty ledger", async () => {
  const dir = tempDir();
  writeFileSync(join(dir, `js-outbox-${DAY.name}.json`), JSON.stringify({ schemas: {}, ledger: { [DAY.name]: { "2026-11-21": "x" } }, outbox: [], next: 1 }));
  const store = await FileStore.open(dir, DAY.name);
  const spent = await store.ledger(DAY.name);
  assert.deepEqual(spent.map(([window]) => window), [windowOf(Date.now(), "day")]);
  // The state that replaced it is on disk: a second read finds the same.
  assert.deepEqual(await (await FileStore.open(dir, DAY.name)).ledger(DAY.name), spent);
});

// A second start (the schema cached in the data folder by the first) with the server down: a record
// made the moment the client is made is randomised and queued at once, as the Python client does it,
// not held "waiting for the schema".
test("a second start records at once from the schema cached in the data folder", async () => {
  const dir = tempDir();
  const served = { ...DAY, name: "files-cached" };
  const s = createServer((req, res) => {
    res.writeHead(200, { "Content-Type": "application/json" });
    res.end(JSON.stringify(served));
  });
  await new Promise((r) => s.listen(0, "127.0.0.1", r));
  const endpoint = `http://127.0.0.1:${s.address().port}`;
  const first = new TelemetryClient({ endpoint, schema: served.name, maxEpsilon: 2, dataDir: dir, logger: quietLogger() });
  assert.equal(await first.waitForSchema(5000), true);
  await first.close(0);
  await new Promise((r) => s.close(r));

  const logger = quietLogger();
  const second = new TelemetryClient({ endpoint, schema: served.name, maxEpsilon: 2, dataDir: dir, logger });
  const r = second.record({ flag: true });
  assert.deepEqual(r, { queued: true, pending: false, reason: "queued", window: windowOf(Date.now(), "day") }, logger.lines.join("\n"));
  await second.close(500); // the server is down: the report is stored, and waits there
  assert.equal((await (await FileStore.open(dir, served.name)).peek(10)).length, 1, "the report is in the outbox");
});
