/**
 * Where the client keeps what must outlive a page or a process: the outbox of randomised
 * reports, the ledger, the cached schema and the device's secret. Never a true value.
 *
 * One small interface, three homes: IndexedDB in a browser (store-idb.ts), files in a data folder
 * under Node (store-files.ts), memory elsewhere (with one warning: a reload resets
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
  /** The JSON text of the schema last served (read back with parseJson, so floats keep their
   * spelling), or undefined when none was cached. (The relay module keeps its keys here too, under
   * a name no schema can have: src/relay/route.ts.) */
  cachedSchema(name: string): Promise<unknown>;
  cacheSchema(name: string, text: string): Promise<void>;
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
  schemas: Record<string, string>; // name -> JSON text
  ledger: Record<string, Record<string, number>>; // schema -> window -> ε
  outbox: Row[];
  next: number;
}

export function emptyState(): State {
  return { schemas: {}, ledger: {}, outbox: [], next: 1 };
}

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/** The state in `text`, or undefined when it is damaged (not JSON, or not a state's shape). */
export function parseState(text: string): State | undefined {
  try {
    const state: unknown = JSON.parse(text);
    return isState(state) ? state : undefined;
  } catch {
    return undefined;
  }
}

/** `value` has the shape of a {@link State} (what a file store reads back is checked: a damaged
 * ledger must not pass for an empty one). */
export function isState(value: unknown): value is State {
  if (!isRecord(value) || !isRecord(value.schemas) || !isRecord(value.ledger) || !Array.isArray(value.outbox)) return false;
  const schemasOk = Object.values(value.schemas).every((text) => typeof text === "string");
  const ledgerOk = Object.values(value.ledger).every((spent) => isRecord(spent) && Object.values(spent).every(Number.isFinite));
  const rowsOk = value.outbox.every((row) => isRecord(row) && Number.isInteger(row.seq) && isRecord(row.report) && Number.isFinite(row.bytes));
  return schemasOk && ledgerOk && rowsOk && Number.isInteger(value.next);
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

/** The store of last resort: nothing outlives the page or process. */
export class MemoryStore implements Store {
  readonly kind = "memory";
  private state = emptyState();
  private secret: Uint8Array | undefined;

  async deviceSecret(): Promise<DeviceSecret> {
    return (this.secret ??= globalThis.crypto.getRandomValues(new Uint8Array(32)));
  }
  async cachedSchema(name: string): Promise<unknown> {
    return this.state.schemas[name];
  }
  async cacheSchema(name: string, text: string): Promise<void> {
    this.state.schemas[name] = text;
  }
  async ledger(schema: string): Promise<[string, number][]> {
    return Object.entries(this.state.ledger[schema] ?? {});
  }
  async append(reports: Report[], limits: Limits): Promise<Appended> {
    return appendTo(this.state, reports, limits);
  }
  async peek(limit: number): Promise<Row[]> {
    return this.state.outbox.slice(0, limit);
  }
  async remove(seqs: number[]): Promise<void> {
    const gone = new Set(seqs);
    this.state.outbox = this.state.outbox.filter((r) => !gone.has(r.seq));
  }
  async count(): Promise<number> {
    return this.state.outbox.length;
  }
  async close(): Promise<void> {}
}
