// A real aggregator for the tests: `ldp-telemetry serve` from the repository's venv (make install),
// started as a subprocess on a free port with a SQLite file in a temporary folder, polled until
// it answers. Nothing of ours is mocked.
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync } from "node:fs";
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

/** Starts the aggregator; resolves once /healthz answers 200. `stop()` ends it. */
export async function startServer({ db, port, env = {} }) {
  const child = spawn(SERVE, ["serve", "--db", db, "--port", String(port), "--workers", "1"], {
    env: { ...process.env, LDP_ADMIN_TOKEN: ADMIN, LDP_ESTIMATE_INTERVAL: "3600", ...env },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  child.stderr.on("data", (d) => (stderr += d));
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`the aggregator exited: ${stderr}`);
    try {
      const r = await fetch(`${url}/healthz`);
      if (r.ok) break;
    } catch {
      // not up yet
    }
    if (Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`the aggregator did not answer within 60 s: ${stderr}`);
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
