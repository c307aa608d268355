// A real aggregator for the tests: `ldp-telemetry serve` from the repository's venv (make install),
// started as a subprocess on a free port with a SQLite file in a temporary folder, polled until
// it answers. Nothing of ours is mocked.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync } from "node:fs";
import { createServer as createHttpServer } from "node:http";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

export const REPO = fileURLToPath(new URL("../../", import.meta.url));
export const SERVE = join(REPO, ".venv/bin/ldp-telemetry");
export const ADMIN = "test-admin-token";

export function tempDir(prefix = "ldp-js-") {
  return mkdtempSync(join(tmpdir(), prefix));
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
    s.on("error", reject);
  });
}

export function haveServer() {
  return existsSync(SERVE);
}

/** A relay's token: give the aggregator `env: {LDP_RELAY_TOKENS: RELAY_TOKEN}` (at least 16 characters). */
export const RELAY_TOKEN = "test-relay-token-0123456789";

/** The venv's `ldp-telemetry` has the `relay` command (DESIGN.md "Relay"). */
export function haveRelay() {
  return haveServer() && spawnSync(SERVE, ["relay", "--help"], { stdio: "ignore" }).status === 0;
}

/** Starts the aggregator; resolves once /healthz answers 200. `stop()` ends it. */
export async function startServer({ db, port, env = {} }) {
  return started("the aggregator", ["serve", "--db", db, "--port", String(port), "--workers", "1"],
    { LDP_ADMIN_TOKEN: ADMIN, LDP_ESTIMATE_INTERVAL: "3600", ...env }, port);
}

/** Starts `ldp-telemetry relay` in front of `aggregator` with `flags` (--min-batch ...); resolves once
 * /healthz answers 200 and it serves the aggregator's keys. `stop()` ends it. */
export async function startRelay({ db, port, aggregator, flags = [] }) {
  const relay = await started("the relay", ["relay", "--aggregator", aggregator, "--db", db, "--port", String(port), ...flags],
    { LDP_RELAY_TOKEN: RELAY_TOKEN }, port);
  const deadline = Date.now() + 30_000;
  while ((await fetch(`${relay.url}/ohttp-keys`)).status !== 200) {
    if (Date.now() > deadline) throw new Error("the relay did not serve the aggregator's keys within 30 s");
    await new Promise((r) => setTimeout(r, 100));
  }
  return relay;
}

/** `ldp-telemetry <args>` with `env`, once its /healthz on `port` answers 200. */
async function started(what, args, env, port) {
  const child = spawn(SERVE, args, { env: { ...process.env, ...env }, stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (d) => (stderr += d));
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${what} exited: ${stderr}`);
    try {
      const r = await fetch(`${url}/healthz`);
      if (r.ok) break;
    } catch {
      // not up yet
    }
    if (Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`${what} did not answer within 60 s: ${stderr}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    url,
    stop: () => new Promise((resolve) => {
      if (child.exitCode !== null) return resolve();
      child.once("exit", () => resolve());
      child.kill("SIGTERM");
    }),
  };
}

export async function publish(url, schema) {
  const r = await fetch(`${url}/api/v1/schemas`, {
    method: "POST", body: JSON.stringify(schema),
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${ADMIN}` },
  });
  if (r.status !== 201 && r.status !== 200) throw new Error(`publishing answered ${r.status}: ${await r.text()}`);
  return r.json();
}

/** The `n` of every (window, attribute) of a schema's estimates, after a refresh. */
export async function counts(url, schema) {
  const refresh = await fetch(`${url}/api/v1/estimates/refresh`, { method: "POST", headers: { Authorization: `Bearer ${ADMIN}`, "Content-Type": "application/json" }, body: "{}" });
  if (!refresh.ok) throw new Error(`refresh answered ${refresh.status}: ${await refresh.text()}`);
  const r = await fetch(`${url}/api/v1/estimates?schema=${schema}`);
  const body = await r.json();
  const out = {};
  for (const row of body.estimates ?? []) out[`${row.window} ${row.attribute}`] = row.n;
  return out;
}

/** A logger that keeps what the client says, for tests to read (and to keep the output quiet). */
export function quietLogger() {
  const lines = [];
  return { lines, warn: (m) => lines.push(m), error: (m) => lines.push(m), info: (m) => lines.push(m) };
}

/** A stand-in server on 127.0.0.1 that keeps every request ({method, url, headers, body as bytes, at})
 * and answers it with `handle(req, res, body)`. */
export async function byteServer(handle) {
  const requests = [];
  const s = createHttpServer((req, res) => {
    const chunks = [];
    req.on("data", (d) => chunks.push(d));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      requests.push({ method: req.method, url: req.url, headers: req.headers, body, at: Date.now() });
      handle(req, res, body);
    });
  });
  await new Promise((r) => s.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${s.address().port}`, requests, close: () => new Promise((r) => { s.closeAllConnections(); s.close(r); }) };
}
