// End to end under Node: the JS client against a real `ldp-telemetry serve`. The app starts while
// the server is down (its record waits in memory), the server comes up and the schema is
// published, the report arrives; the app records again and restarts: still exactly one report
// per window, because the ledger in the data folder outlives the process.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { TelemetryClient, windowOf } from "../dist/index.js";
import { counts, freePort, haveServer, publish, quietLogger, startServer, tempDir } from "./helpers.js";

const SCHEMA = {
  name: "js-e2e", version: 1, epsilon: 2, window: "day",
  attributes: [
    { name: "dark_mode", type: "boolean" },
    { name: "os", type: "categorical", categories: ["linux", "macos", "windows", "other"] },
    { name: "minutes", type: "numeric", range: [0, 120], mechanism: "pm" },
  ],
};
// A true value no randomised report can hold: pm's outputs are multiples of 2^-20 on [-C, C].
const TRUE_MINUTES = 87.654321;

function client(endpoint, dataDir, logger) {
  return new TelemetryClient({ endpoint, schema: SCHEMA.name, maxEpsilon: 4, dataDir, logger, backoffBaseMs: 20,
    backoffCapMs: 300, requestTimeoutMs: 5000 });
}

test("e2e: first start with the server down, then up: exactly one report per window arrives", { skip: !haveServer() && "no .venv (make install)" }, async () => {
  const dir = tempDir();
  const dataDir = join(dir, "data");
  const port = await freePort();
  const endpoint = `http://127.0.0.1:${port}`;
  const log = quietLogger();

  const first = client(endpoint, dataDir, log);
  const held = first.record({ dark_mode: true, os: "linux", minutes: TRUE_MINUTES });
  assert.equal(held.queued, false);
  assert.equal(held.pending, true, held.reason);
  // The server is down: nothing can be delivered yet, and the true record is in memory only.
  assert.equal(await first.flush(300), false);

  const server = await startServer({ db: join(dir, "x.db"), port });
  try {
    await publish(server.url, SCHEMA);
    assert.equal(await first.flush(30_000), true, log.lines.join("\n"));
    const again = first.record({ dark_mode: false, os: "macos", minutes: 3 });
    assert.equal(again.queued, false);
    assert.match(again.reason, /already reported in window/);
    await first.close();

    // A restart: a new client on the same data folder knows the window is spent.
    const second = client(endpoint, dataDir, log);
    assert.equal(await second.waitForSchema(10_000), true);
    const third = second.record({ dark_mode: true, os: "other", minutes: 1 });
    assert.equal(third.queued, false, third.reason);
    assert.match(third.reason, /already reported/);
    assert.equal(await second.flush(10_000), true);
    assert.deepEqual(Object.keys(second.privacySpent()[SCHEMA.name]), [windowOf(Date.now(), "day")]);
    assert.match(second.privacyStatement(), /reported in 1 window/);
    await second.close();

    const n = await counts(server.url, SCHEMA.name);
    const window = windowOf(Date.now(), "day");
    assert.equal(n[`${window} dark_mode`], 1, JSON.stringify(n));
    assert.equal(n[`${window} os`], 1);
    assert.equal(n[`${window} minutes`], 1);

    // The data folder holds randomised reports and the ledger, never a true value; files are 0600.
    for (const name of readdirSync(dataDir)) {
      const path = join(dataDir, name);
      assert.equal(statSync(path).mode & 0o777, 0o600, name);
      assert.ok(!readFileSync(path, "latin1").includes(String(TRUE_MINUTES)), `${name} holds a true value`);
    }
    assert.equal(statSync(dataDir).mode & 0o777, 0o700);
  } finally {
    await server.stop();
  }
});

test("e2e: a memoised schema given in code is randomised with the device secret and delivered", { skip: !haveServer() && "no .venv (make install)" }, async () => {
  const dir = tempDir();
  const port = await freePort();
  const server = await startServer({ db: join(dir, "x.db"), port });
  try {
    const derived = await publish(server.url, {
      name: "js-memo", version: 1, epsilon: 1, epsilon_permanent: 4, window: "hour",
      attributes: [{ name: "flag", type: "boolean" }, { name: "size", type: "histogram", edges: [0, 10, 100, 1000] }],
    });
    const log = quietLogger();
    const t = new TelemetryClient({ endpoint: server.url, schema: derived, maxEpsilon: 1, dataDir: join(dir, "data"), logger: log });
    assert.equal(await t.waitForSchema(5000), true);
    const r = t.record({ flag: true, size: 42 });
    assert.equal(r.queued, true, r.reason);
    assert.equal(await t.flush(20_000), true, log.lines.join("\n"));
    await t.close();
    const n = await counts(server.url, "js-memo");
    assert.equal(n[`${windowOf(Date.now(), "hour")} flag`], 1, JSON.stringify(n));
    // The Python client's device-secret file: 32 bytes, owner-only.
    assert.equal(readFileSync(join(dir, "data", "device-secret")).length, 32);
  } finally {
    await server.stop();
  }
});

// `home` discovers strings: its report is of the value (level 0) or of a prefix, by a coin, so its own
// count is 0 or 1; the server validates a report whole, so `flag`'s count says it took the level too.
test("e2e: a string attribute is randomised by the served g and p, delivered and counted; a discovering one is accepted", { skip: !haveServer() && "no .venv (make install)" }, async () => {
  const dir = tempDir();
  const port = await freePort();
  const server = await startServer({ db: join(dir, "x.db"), port });
  const TRUE_URL = "https://example.org/an-unlisted-page"; // the candidates are public (in the cached schema); this is not
  try {
    await publish(server.url, {
      name: "js-strings", version: 1, epsilon: 3, window: "day",
      attributes: [{ name: "page", type: "string", max_length: 40, candidates: ["https://example.org/", "https://example.org/b"] }, { name: "flag", type: "boolean" },
        { name: "home", type: "string", max_length: 12, discover: true, alphabet: "abcdefghijklmnopqrstuvwxyz.-" }],
    });
    const log = quietLogger();
    const dataDir = join(dir, "data");
    const t = new TelemetryClient({ endpoint: server.url, schema: "js-strings", maxEpsilon: 3, dataDir, logger: log });
    assert.equal(await t.waitForSchema(10_000), true, log.lines.join("\n"));
    const r = t.record({ page: `${TRUE_URL}\u200b`, flag: true, home: "example.org" }); // a format character: U+FFFD, never a refusal
    assert.equal(r.queued, true, r.reason);
    assert.equal(await t.flush(20_000), true, log.lines.join("\n"));
    await t.close();
    const n = await counts(server.url, "js-strings");
    assert.equal(n[`${windowOf(Date.now(), "day")} page`], 1, JSON.stringify(n));
    assert.equal(n[`${windowOf(Date.now(), "day")} flag`], 1, `${JSON.stringify(n)}\n${log.lines.join("\n")}`);
    for (const name of readdirSync(dataDir)) {
      assert.ok(!readFileSync(join(dataDir, name), "utf8").includes("an-unlisted-page"), `${name} holds a true value`);
    }
  } finally {
    await server.stop();
  }
});
