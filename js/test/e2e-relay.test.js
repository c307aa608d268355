// End to end through a real relay under Node: two devices (two JS clients, each its own data
// folder) send their reports through a real `ldp-telemetry relay` (--min-batch 2) to a real
// `ldp-telemetry serve`. Each report goes alone in its own request; the relay forwards them in one
// shuffled batch; the aggregator counts both, as relayed, in a crowd of 2. The clients reach the
// aggregator only through a recording proxy, which sees nothing from them but the key fetch:
// never a report posted around the relay.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer, request as forward } from "node:http";
import { join } from "node:path";
import { TelemetryClient, windowOf } from "../dist/index.js";
import "../dist/relay.js";
import { ADMIN, counts, freePort, haveRelay, publish, quietLogger, RELAY_TOKEN, startRelay, startServer, tempDir } from "./helpers.js";

const SCHEMA = {
  name: "js-relay-e2e", version: 1, epsilon: 2, window: "day",
  attributes: [{ name: "dark_mode", type: "boolean" }, { name: "os", type: "categorical", categories: ["linux", "macos", "windows", "other"] }],
};

/** A proxy to `target` that keeps "METHOD path" of every request. */
async function recordingProxy(target) {
  const seen = [];
  const proxy = createServer((req, res) => {
    seen.push(`${req.method} ${req.url}`);
    const out = forward(`${target}${req.url}`, { method: req.method, headers: req.headers }, (answer) => {
      res.writeHead(answer.statusCode, answer.headers);
      answer.pipe(res);
    });
    out.on("error", () => res.writeHead(502).end());
    req.pipe(out);
  });
  await new Promise((r) => proxy.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${proxy.address().port}`, seen, close: () => new Promise((r) => { proxy.closeAllConnections(); proxy.close(r); }) };
}

/** The value of a metric line `name` on a Prometheus page. */
async function metric(url, name) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(`${name} `));
  return line === undefined ? undefined : Number(line.split(" ")[1]);
}

test("e2e: two devices' reports go through a real relay, one request each, and are counted as one relayed crowd", { skip: !haveRelay() && "no `ldp-telemetry relay` in .venv (make install)" }, async () => {
  const dir = tempDir();
  const aggregator = await startServer({ db: join(dir, "aggregator.db"), port: await freePort(), env: { LDP_RELAY_TOKENS: RELAY_TOKEN } });
  const proxy = await recordingProxy(aggregator.url);
  let relay;
  try {
    await publish(aggregator.url, SCHEMA); // before the relay starts: it copies the schemas when it starts
    relay = await startRelay({ db: join(dir, "relay.db"), port: await freePort(), aggregator: aggregator.url, flags: ["--min-batch", "2"] });
    const devices = ["one", "two"].map((name) => {
      const logger = quietLogger();
      const t = new TelemetryClient({ endpoint: proxy.url, relay: relay.url, schema: SCHEMA.name, maxEpsilon: 4,
        dataDir: join(dir, name), logger, backoffBaseMs: 50, backoffCapMs: 1000, lingerMs: 0 });
      return { t, logger };
    });
    for (const { t, logger } of devices) assert.equal(await t.waitForSchema(10_000), true, logger.lines.join("\n"));
    devices.forEach(({ t }, i) => assert.equal(t.record({ dark_mode: i === 0, os: "linux" }).queued, true));
    // A minute after each fetched the aggregator's keys, each posts its report to the relay.
    const delivered = await Promise.all(devices.map(({ t }) => t.flush(120_000)));
    assert.deepEqual(delivered, [true, true], devices.map(({ logger }) => logger.lines.join("\n")).join("\n---\n"));
    for (const { t } of devices) await t.close();

    assert.equal(await metric(relay.url, "ldp_relay_received_total"), 2, "one request per report");
    const window = windowOf(Date.now(), "day");
    let n = {};
    for (let i = 0; i < 100 && n[`${window} dark_mode`] !== 2; i++) {
      await new Promise((r) => setTimeout(r, 200));
      n = await counts(aggregator.url, SCHEMA.name);
    }
    assert.equal(n[`${window} dark_mode`], 2, JSON.stringify(n));
    const rows = (await (await fetch(`${aggregator.url}/api/v1/estimates?schema=${SCHEMA.name}&attribute=dark_mode`,
      { headers: { Authorization: `Bearer ${ADMIN}` } })).json()).estimates.filter((row) => row.window === window);
    assert.ok(rows.length);
    for (const row of rows) {
      assert.equal(row.relayed, 1, JSON.stringify(row));
      assert.equal(row.crowd, 2, JSON.stringify(row));
    }
    // From the devices the aggregator saw the key fetch only (one: the clients of one process share
    // the keys): nothing around the relay.
    assert.deepEqual(proxy.seen, ["GET /api/v1/ohttp-keys"]);
  } finally {
    await relay?.stop();
    await proxy.close();
    await aggregator.stop();
  }
});
