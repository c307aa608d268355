/**
 * The client's settings, declared once (as client/options.py, in camelCase, times in ms): name,
 * default, what it must be. A bad or unknown option is a TypeError at construction that names the
 * option, what it expected and what it got.
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
  /** A relay's base URL: each report goes through it alone, encrypted to the aggregator (needs the
   * relay module: `import "ldp-telemetry/relay"`, or ldp-telemetry-relay.min.js). */
  relay?: string;
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
  /** Where warnings go (default console); every server text in them is escaped. A logger that
   * throws is contained: the client goes on. */
  logger?: Logger;
}

/** The settings as the client uses them: every default filled in, the logger contained. */
export interface Settings {
  endpoint: string;
  relay?: string;
  schema: string | object;
  maxEpsilon: number;
  maxEpsilonPerDay: number;
  dataDir?: string;
  store?: Store;
  maxPending: number;
  pendingTimeoutMs: number;
  maxOutbox: number;
  maxOutboxBytes: number;
  maxBatch: number;
  maxBatchBytes: number;
  maxReportBytes: number;
  backoffBaseMs: number;
  backoffCapMs: number;
  requestTimeoutMs: number;
  schemaRefreshMs: number;
  lingerMs: number;
  closeTimeoutMs: number;
  fetch: Fetch;
  logger: Required<Logger>;
}

/** The longest delay a timer takes: above it Node's and browsers' setTimeout fire at once. */
export const MAX_DELAY_MS = 2 ** 31 - 1;

type Kind = "epsilon" | "count" | "count or 0" | "ms";

/** What a value of each kind must be, as an error message says it. */
const EXPECTED: Record<Kind, string> = {
  epsilon: "a finite number above 0",
  count: "an integer of at least 1",
  "count or 0": "an integer of at least 0",
  ms: `a number of milliseconds from 0 to ${MAX_DELAY_MS}`,
};

const IS: Record<Kind, (v: number) => boolean> = {
  epsilon: (v) => Number.isFinite(v) && v > 0,
  count: (v) => Number.isSafeInteger(v) && v >= 1,
  "count or 0": (v) => Number.isSafeInteger(v) && v >= 0,
  ms: (v) => Number.isFinite(v) && v >= 0 && v <= MAX_DELAY_MS,
};

/** Every numeric setting: its kind and default (maxEpsilon has none; maxEpsilonPerDay's is maxEpsilon). */
const NUMBERS: Record<string, [Kind, number?]> = {
  maxEpsilon: ["epsilon"],
  maxEpsilonPerDay: ["epsilon"],
  maxPending: ["count or 0", 100],
  pendingTimeoutMs: ["ms", 600_000],
  maxOutbox: ["count", 10_000],
  maxOutboxBytes: ["count", 16 << 20],
  maxBatch: ["count", 1000],
  maxBatchBytes: ["count", 512 << 10],
  maxReportBytes: ["count", 32 << 10],
  backoffBaseMs: ["ms", 1000],
  backoffCapMs: ["ms", 300_000],
  requestTimeoutMs: ["ms", 10_000],
  schemaRefreshMs: ["ms", 3_600_000],
  lingerMs: ["ms", 50],
  closeTimeoutMs: ["ms", 5000],
};
const OTHERS = ["endpoint", "relay", "schema", "dataDir", "store", "fetch", "logger"];

/** `value` as an error message shows it: short, and quoted when it is text. */
function described(value: unknown): string {
  const text = typeof value === "string" ? JSON.stringify(value) : typeof value === "function" ? "a function" : String(value);
  return text.length > 80 ? `${text.slice(0, 80)}...` : text;
}

/** The TypeError of a bad option. */
export function badOption(name: string, expected: string, got: unknown): TypeError {
  return new TypeError(`option ${name} must be ${expected}, got ${described(got)}`);
}

/** `value`, if it is a delay a timer can take: for the timeouts of flush(), close(), waitForSchema(). */
export function checkedDelay(name: string, value: unknown): number {
  if (!(typeof value === "number" && IS.ms(value))) throw badOption(name, EXPECTED.ms, value);
  return value;
}

/** The app's logger, contained: a logger that throws must not break the client, nor reach the
 * app as an unhandled rejection (its error is dropped: there is nowhere left to say it). */
function contained(logger: Logger): Required<Logger> {
  const safe = (method: ((message: string) => void) | undefined) => (message: string) => {
    try {
      method?.call(logger, message);
    } catch {
      // the logger failed: nothing more to do
    }
  };
  return { warn: safe(logger.warn), error: safe(logger.error), info: safe(logger.info) };
}

function isHttpUrl(value: unknown): boolean {
  if (typeof value !== "string") return false;
  try {
    return ["http:", "https:"].includes(new URL(value).protocol);
  } catch {
    return false;
  }
}

/** A base URL without its trailing slashes. */
const baseUrl = (url: unknown) => (url as string).replace(/\/+$/, "");

/** The settings: the defaults overridden by what is given, each checked. */
export function settings(options: ClientOptions): Settings {
  if (!isObject(options)) throw badOption("object", "an object of options", options);
  const o = options as unknown as Record<string, unknown>;
  const unknown = Object.keys(o).find((name) => !(name in NUMBERS) && !OTHERS.includes(name));
  if (unknown !== undefined) throw new TypeError(`unknown option ${described(unknown)} (the options are ${[...OTHERS, ...Object.keys(NUMBERS)].join(", ")})`);
  if (!isHttpUrl(o.endpoint)) throw badOption("endpoint", "the aggregator's http:// or https:// URL", o.endpoint);
  if (o.relay !== undefined && !isHttpUrl(o.relay)) throw badOption("relay", "a relay's http:// or https:// URL", o.relay);
  if (!(typeof o.schema === "string" ? NAME_RE.test(o.schema) : isObject(o.schema))) {
    throw badOption("schema", `a schema name (${NAME_RE}) or a schema object`, o.schema);
  }
  const numbers: Record<string, number> = {};
  for (const [name, [kind, fallback]] of Object.entries(NUMBERS)) {
    const value = o[name] ?? (name === "maxEpsilonPerDay" ? o.maxEpsilon : fallback);
    if (!(typeof value === "number" && IS[kind](value))) throw badOption(name, EXPECTED[kind], value);
    numbers[name] = value;
  }
  if (numbers.maxReportBytes > numbers.maxBatchBytes) {
    throw badOption("maxReportBytes", `at most maxBatchBytes (${numbers.maxBatchBytes})`, numbers.maxReportBytes);
  }
  const fetch = o.fetch ?? globalThis.fetch?.bind(globalThis);
  if (typeof fetch !== "function") throw badOption("fetch", "a fetch function (this platform has none)", fetch);
  const logger = o.logger ?? console;
  if (!(isObject(logger) && typeof logger.warn === "function" && typeof logger.error === "function")) {
    throw badOption("logger", "an object with warn() and error() (and info(), optional)", logger);
  }
  const dataDir = o.dataDir;
  if (dataDir !== undefined && !(typeof dataDir === "string" && dataDir && !dataDir.includes("\0"))) {
    throw badOption("dataDir", "a folder's path (text without NUL)", dataDir);
  }
  const store = o.store;
  if (store !== undefined && !(isObject(store) && typeof store.append === "function")) {
    throw badOption("store", "a Store (MemoryStore, FileStore, IndexedDbStore or one of their kind)", store);
  }
  return {
    ...numbers, endpoint: baseUrl(o.endpoint), relay: o.relay && baseUrl(o.relay), schema: o.schema, dataDir, store, fetch,
    logger: contained(logger as unknown as Logger),
  } as Settings;
}
