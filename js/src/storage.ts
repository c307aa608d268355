/**
 * Where the client keeps what must outlive a page or a process: the outbox of randomised
 * reports, the ledger, the cached schema and the device's secret. Never a true value.
 *
 * One small interface, three homes: IndexedDB in a browser ({@link openIndexedDb}), files in a
 * data folder under Node ({@link openFiles}), memory elsewhere (with one warning: a reload resets
 * the ledger). Each store's {@link Store.append} is the ledger's check-and-spend and the outbox
 * write in one atomic step, so two tabs or processes cannot both spend a window.
 */

import type { DeviceSecret } from "./hmac.js";
import { spend } from "./ledger.js";
import type { Report } from "./reports.js";

export interface Row {
  seq: number;
  report: Report;
  bytes: number;
}

export interface Limits {
  maxReports: number;
  maxBytes: number;
  perDay: number;
}

export interface Appended {
  /** Reports refused by the ledger on storage (another tab or process spent first), with why. */
  refused: string[];
  /** The oldest reports dropped to keep the outbox within its limits. */
  evicted: number;
}

export interface Store {
  readonly kind: "indexeddb" | "files" | "memory";
  /** The device's secret, made on first use (32 random bytes; a non-extractable key in a browser). */
  deviceSecret(): Promise<DeviceSecret>;
  /** The schema last served: its JSON text (Node and the ES module: floats keep their spelling)
   * or, in the <script> bundle, the object JSON.parse made of it. */
  cachedSchema(name: string): Promise<unknown>;
  cacheSchema(name: string, derived: unknown): Promise<void>;
  /** The ledger of `schema`: [window, ε] for every window spent. */
  ledger(schema: string): Promise<[string, number][]>;
  /** For each report: spend its window in the ledger if the rules allow, and add it to the outbox. */
  append(reports: Report[], limits: Limits): Promise<Appended>;
  /** The oldest rows, oldest first. */
  peek(limit: number): Promise<Row[]>;
  remove(seqs: number[]): Promise<void>;
  count(): Promise<number>;
  close(): Promise<void>;
}

/** The state a file or memory store keeps, and the rules applied to it (IndexedDB keeps the same
 * in object stores). */
export interface State {
  schemas: Record<string, unknown>;
  ledger: Record<string, Record<string, number>>; // schema -> window -> ε
  outbox: Row[];
  next: number;
}

/** A store's members the client never uses, for an app holding a store (the ES module exports the
 * stores): the <script> bundle leaves them out, where no page can reach a store the client made. */
export const forApps = (members: Pick<Store, "kind" | "count" | "close">) => (LDP_FULL ? members : {}) as typeof members;

export function emptyState(): State {
  return { schemas: {}, ledger: {}, outbox: [], next: 1 };
}

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/** `value` has the shape of a {@link State} (what a file store reads back is checked: a damaged
 * ledger must not pass for an empty one). */
export function isState(value: unknown): value is State {
  if (!isRecord(value) || !isRecord(value.schemas) || !isRecord(value.ledger) || !Array.isArray(value.outbox)) return false;
  const ledgerOk = Object.values(value.ledger).every((spent) => isRecord(spent) && Object.values(spent).every(Number.isFinite));
  const rowsOk = value.outbox.every((row) => isRecord(row) && Number.isInteger(row.seq) && isRecord(row.report) && Number.isFinite(row.bytes));
  return ledgerOk && rowsOk && Number.isInteger(value.next);
}

export const UTF8 = new TextEncoder();

/** The bytes of a report's JSON text (what the outbox and batch limits count). */
export const jsonBytes = (report: Report) => UTF8.encode(JSON.stringify(report)).length;

/** The ledger's check-and-spend for each report on `ledger` (schema -> window -> ε, changed in
 * place), as every store applies it; `keep` is handed each report it allows. Returns why the others
 * were refused. */
export function spendEach(ledger: State["ledger"], reports: Report[], perDay: number, keep: (report: Report) => void): string[] {
  const refused: string[] = [];
  for (const report of reports) {
    const why = spend((ledger[report.schema] ??= {}), report.window, report.epsilon, perDay);
    if (why) refused.push(why);
    else keep(report);
  }
  return refused;
}

/** How many of the oldest rows (their `bytes`, oldest first) must go for the outbox to be within its
 * limits: all but the newest that fit. */
export function overflow(rows: { bytes: number }[], limits: Limits): number {
  let n = rows.length;
  for (let bytes = 0; n && rows.length - n < limits.maxReports && (bytes += rows[n - 1].bytes) <= limits.maxBytes; n--);
  return n;
}

/** The ledger check-and-spend and the outbox append, on a state held by one owner at a time. */
export function appendTo(state: State, reports: Report[], limits: Limits): Appended {
  const refused = spendEach(state.ledger, reports, limits.perDay, (report) => state.outbox.push({ seq: state.next++, report, bytes: jsonBytes(report) }));
  const evicted = overflow(state.outbox, limits);
  state.outbox.splice(0, evicted);
  return { refused, evicted };
}

/** The store of last resort: nothing outlives the page or process. `new MemoryStore()` (a closure:
 * shorter in the browser bundle than a class's members). */
export const MemoryStore = function (): Store {
  const state = emptyState();
  let secret: Uint8Array | undefined;
  return {
    ...forApps({ kind: "memory", count: async () => state.outbox.length, close: async () => {} }),
    deviceSecret: async () => (secret ??= globalThis.crypto.getRandomValues(new Uint8Array(32))),
    cachedSchema: async (name) => state.schemas[name],
    async cacheSchema(name, derived) {
      state.schemas[name] = derived;
    },
    ledger: async (schema) => Object.entries(state.ledger[schema] ?? {}),
    append: async (reports, limits) => appendTo(state, reports, limits),
    peek: async (limit) => state.outbox.slice(0, limit),
    async remove(seqs) {
      const gone = new Set(seqs);
      state.outbox = state.outbox.filter((r) => !gone.has(r.seq));
    },
  };
} as unknown as new () => Store;
