/**
 * The client's settings, declared once (as client/options.py, in camelCase, times in ms): name,
 * default, check. A bad value is a TypeError naming the setting, at construction.
 */

import type { Fetch } from "./http.js";
import type { Store } from "./storage.js";

export interface Logger {
  warn(message: string): void;
  error(message: string): void;
  info?(message: string): void;
}

export interface ClientOptions {
  /** The aggregator's base URL. */
  endpoint: string;
  /** A schema name (fetched in the background, then cached) or a schema given in code. */
  schema: string | object;
  /** The most ε per report this app accepts: a greedier schema is refused. */
  maxEpsilon: number;
  /** The most ε per schema per UTC day (default maxEpsilon). */
  maxEpsilonPerDay?: number;
  /** Node: the data folder (default: the Python client's, `~/.local/share/ldp-telemetry` etc.). */
  dataDir?: string;
  /** Where to keep the outbox, ledger, cached schema and device secret (default: IndexedDB in a
   * browser, files under Node, else memory). */
  store?: Store;
  maxPending?: number;
  pendingTimeoutMs?: number;
  maxOutbox?: number;
  maxOutboxBytes?: number;
  maxBatch?: number;
  maxBatchBytes?: number;
  maxReportBytes?: number;
  backoffBaseMs?: number;
  backoffCapMs?: number;
  requestTimeoutMs?: number;
  schemaRefreshMs?: number;
  lingerMs?: number;
  closeTimeoutMs?: number;
  /** The fetch to use (default globalThis.fetch). */
  fetch?: Fetch;
  /** Where warnings go (default console); every server text in them is escaped. */
  logger?: Logger;
}

export type Settings = Required<Omit<ClientOptions, "dataDir" | "store" | "maxEpsilonPerDay">> &
  Pick<ClientOptions, "dataDir" | "store"> & { maxEpsilonPerDay: number };

const DEFAULTS = {
  maxPending: 100, pendingTimeoutMs: 600_000, maxOutbox: 10_000, maxOutboxBytes: 16 << 20, maxBatch: 1000,
  maxBatchBytes: 512 << 10, maxReportBytes: 32 << 10, backoffBaseMs: 1000, backoffCapMs: 300_000,
  requestTimeoutMs: 10_000, schemaRefreshMs: 3_600_000, lingerMs: 50, closeTimeoutMs: 5000,
};

function check(name: string, ok: boolean, what: string, value: unknown): void {
  if (!ok) throw new TypeError(`${name} must be ${what}`);
}

export function settings(o: ClientOptions): Settings {
  if (typeof o !== "object" || o === null) throw new TypeError("TelemetryClient needs an options object");
  check("endpoint", typeof o.endpoint === "string" && /^https?:\/\//.test(o.endpoint), "an http:// or https:// URL", o.endpoint);
  check("schema", typeof o.schema === "string" || (typeof o.schema === "object" && o.schema !== null), "a schema name or object", o.schema);
  const positive = (v: unknown) => typeof v === "number" && v > 0 && v < Infinity;
  check("maxEpsilon", positive(o.maxEpsilon), "a positive finite number", o.maxEpsilon);
  if (o.maxEpsilonPerDay !== undefined) check("maxEpsilonPerDay", positive(o.maxEpsilonPerDay), "a positive finite number", o.maxEpsilonPerDay);
  const out = { ...DEFAULTS } as Record<string, unknown>;
  for (const [name, fallback] of Object.entries(DEFAULTS)) {
    const v = (o as unknown as Record<string, unknown>)[name];
    if (v === undefined) continue;
    const least = name === "maxPending" || name.endsWith("Ms") ? 0 : 1;
    check(name, typeof v === "number" && Number.isFinite(v) && v >= least && (Number.isInteger(v) || name.endsWith("Ms")),
      `a finite number >= ${least}`, v);
    out[name] = v ?? fallback;
  }
  if ((out.maxReportBytes as number) > (out.maxBatchBytes as number)) {
    throw new TypeError("maxReportBytes must be at most maxBatchBytes");
  }
  const f = o.fetch ?? globalThis.fetch?.bind(globalThis);
  check("fetch", typeof f === "function", "a function", f);
  if (o.dataDir !== undefined) check("dataDir", typeof o.dataDir === "string" && o.dataDir !== "" && !o.dataDir.includes("\0"), "a folder path", o.dataDir);
  return {
    ...(out as typeof DEFAULTS), endpoint: o.endpoint.replace(/\/+$/, ""), schema: o.schema, maxEpsilon: o.maxEpsilon,
    maxEpsilonPerDay: o.maxEpsilonPerDay ?? o.maxEpsilon, dataDir: o.dataDir, store: o.store, fetch: f!,
    logger: o.logger ?? console,
  };
}
