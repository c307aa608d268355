// The client's options (src/options.ts): a bad one says which, what it expected and what it got;
// every time is bounded (above 2^31 - 1 ms a timer fires at once: a busy loop); a logger that
// throws never breaks the client.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryStore, TelemetryClient } from "../dist/index.js";

const SCHEMA = { name: "options", version: 1, epsilon: 1, window: "day", attributes: [{ name: "flag", type: "boolean" }] };
const BASE = { endpoint: "http://127.0.0.1:9", schema: SCHEMA, maxEpsilon: 2, store: new MemoryStore(), logger: { warn() {}, error() {} } };
const TIMES = ["pendingTimeoutMs", "backoffBaseMs", "backoffCapMs", "requestTimeoutMs", "schemaRefreshMs", "lingerMs", "closeTimeoutMs"];

test("every time option is bounded by what a timer can wait, and the error says so", () => {
  for (const name of TIMES) {
    assert.throws(() => new TelemetryClient({ ...BASE, [name]: 2 ** 31 }),
      { name: "TypeError", message: `option ${name} must be a number of milliseconds from 0 to 2147483647, got 2147483648` });
    assert.throws(() => new TelemetryClient({ ...BASE, [name]: -1 }), new RegExp(`option ${name} must be .*, got -1$`));
  }
  assert.ok(new TelemetryClient({ ...BASE, backoffCapMs: 2 ** 31 - 1 }));
});

test("a bad option names what it expected and what it got", () => {
  const cases = [
    [{ endpoint: "ftp://example.org" }, 'option endpoint must be the aggregator\'s http:// or https:// URL, got "ftp://example.org"'],
    [{ endpoint: "telemetry.example.org" }, /option endpoint must be .*, got "telemetry\.example\.org"/],
    [{ relay: "relay.example.org" }, 'option relay must be a relay\'s http:// or https:// URL, got "relay.example.org"'],
    [{ relay: "" }, 'option relay must be a relay\'s http:// or https:// URL, got ""'],
    [{ schema: "App Usage" }, /option schema must be a schema name .* or a schema object, got "App Usage"/],
    [{ maxEpsilon: 0 }, "option maxEpsilon must be a finite number above 0, got 0"],
    [{ maxBatch: 2.5 }, "option maxBatch must be an integer of at least 1, got 2.5"],
    [{ maxPending: "100" }, 'option maxPending must be an integer of at least 0, got "100"'],
    [{ maxReportBytes: 2048, maxBatchBytes: 1024 }, "option maxReportBytes must be at most maxBatchBytes (1024), got 2048"],
    [{ logger: { warn() {} } }, /option logger must be an object with warn\(\) and error\(\)/],
    [{ maxEpsilonPerday: 4 }, /unknown option "maxEpsilonPerday" \(the options are .*maxEpsilonPerDay/],
  ];
  for (const [given, message] of cases) {
    assert.throws(() => new TelemetryClient({ ...BASE, ...given }), (e) => e instanceof TypeError &&
      (typeof message === "string" ? e.message === message : message.test(e.message)), JSON.stringify(given));
  }
});

test("the timeouts of flush(), close() and waitForSchema() are bounded too", async () => {
  const t = new TelemetryClient(BASE);
  await assert.rejects(t.flush(2 ** 31), /timeoutMs of flush\(\) must be a number of milliseconds from 0 to 2147483647, got 2147483648/);
  await assert.rejects(t.waitForSchema(Infinity), /timeoutMs of waitForSchema\(\) must be .*, got Infinity/);
  await assert.rejects(t.close(-5), /timeoutMs of close\(\) must be .*, got -5/);
  await t.close(0);
});

test("a logger that throws is contained: no exception or unhandled rejection reaches the app", async () => {
  const escaped = [];
  const note = (e) => escaped.push(String(e));
  process.on("unhandledRejection", note);
  process.on("uncaughtException", note);
  let calls = 0;
  const throwing = () => {
    calls++;
    throw new Error("the app's logger is broken");
  };
  try {
    // The server is down: every delivery attempt logs.
    const t = new TelemetryClient({ ...BASE, store: new MemoryStore(), logger: { warn: throwing, error: throwing, info: throwing },
      backoffBaseMs: 5, backoffCapMs: 10 });
    assert.equal(await t.waitForSchema(2000), true);
    assert.equal(t.record({ flag: true }).queued, true);
    assert.equal(await t.flush(300), false);
    await t.close(0);
    await new Promise((r) => setTimeout(r, 50));
  } finally {
    process.off("unhandledRejection", note);
    process.off("uncaughtException", note);
  }
  assert.ok(calls > 0, "the logger was called");
  assert.deepEqual(escaped, []);
});
