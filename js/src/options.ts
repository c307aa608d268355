/**
 * The client's settings, declared once (as client/options.py, in camelCase, times in ms): name,
 * default, check. A bad value is a TypeError naming the setting, at construction.
 */

import type { Fetch } from "./http.js";
import { isObject, NAME_RE } from "./schema.js";
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
  /** How long a new batch waits for company before it is sent (its reports are stored at once). */
  lingerMs?: number;
  closeTimeoutMs?: number;
  /** The fetch to use (default globalThis.fetch). */
  fetch?: Fetch;
  /** Where warnings go (default console); every server text in them is escaped. */
  logger?: Logger;
}

export type Settings = Required<Omit<ClientOptions, "dataDir" | "store" | "maxEpsilonPerDay">> &
  Pick<ClientOptions, "dataDir" | "store"> & { maxEpsilonPerDay: number };

// Every numeric setting (maxEpsilon has none: 0 is refused; maxEpsilonPerDay's is maxEpsilon).
const DEFAULTS = {
  maxEpsilon: 0, maxEpsilonPerDay: 0, maxPending: 100, pendingTimeoutMs: 600_000, maxOutbox: 10_000,
  maxOutboxBytes: 16 << 20, maxBatch: 1000, maxBatchBytes: 512 << 10, maxReportBytes: 32 << 10, backoffBaseMs: 1000,
  backoffCapMs: 300_000, requestTimeoutMs: 10_000, schemaRefreshMs: 3_600_000, lingerMs: 50, closeTimeoutMs: 5000,
};

/** The settings: the defaults overridden by what is given, each number checked (the defaults too:
 * one loop over DEFAULTS' names). */
export function settings(o: ClientOptions): Settings {
  const bad = (name: string): never => {
    throw new TypeError(`invalid option ${name}`);
  };
  if (!(typeof o?.endpoint === "string" && /^https?:\/\//.test(o.endpoint))) bad("endpoint");
  if (!(typeof o.schema === "string" ? NAME_RE.test(o.schema) : isObject(o.schema))) bad("schema");
  const s = { ...DEFAULTS, maxEpsilonPerDay: o.maxEpsilon, ...o, endpoint: o.endpoint.replace(/\/+$/, ""),
    fetch: o.fetch ?? globalThis.fetch?.bind(globalThis), logger: o.logger ?? console } as Settings;
  for (const name of Object.keys(DEFAULTS)) {
    const v = s[name as keyof Settings] as number; // whatever was given: checked here
    // Counts are integers >= 1 (maxPending may be 0); times and budgets are finite numbers >= 0 (ε > 0).
    if (!(Number.isFinite(v) && (name.endsWith("Ms") ? v >= 0 : name.includes("Epsilon")
      ? v > 0 : Number.isInteger(v) && v >= (name === "maxPending" ? 0 : 1)))) bad(name);
  }
  if (s.maxReportBytes > s.maxBatchBytes) bad("maxReportBytes > maxBatchBytes");
  if (typeof s.fetch !== "function") bad("fetch");
  if (LDP_FULL && o.dataDir !== undefined && !(typeof o.dataDir === "string" && o.dataDir && !o.dataDir.includes("\0"))) bad("dataDir");
  return s;
}
