/**
 * The browser store: IndexedDB database `ldp-telemetry`. The device secret is an HMAC-SHA256
 * CryptoKey made non-extractable (no script, ours included, can read its bytes back); the
 * ledger's check-and-spend and the outbox write are one readwrite transaction over both stores,
 * and IndexedDB runs transactions with overlapping stores one at a time, so two tabs cannot both
 * spend a window. The ledger is read by key range: the days a check needs, never its whole history
 * (an hourly schema spends 8,760 windows a year). Browsers may clear all of it (private windows,
 * Safari's 7-day rule, partitioned storage): the ledger and the device then start afresh, which
 * privacyStatement() says.
 */

import type { DeviceSecret } from "./hmac.js";
import type { Report } from "./reports.js";
import { jsonBytes, overflow, spendEach, type Appended, type Limits, type Row, type State, type Store } from "./storage.js";
import { dayOf } from "./windows.js";

const DB = "ldp-telemetry";
const SECRET = "secret";
const SCHEMAS = "schemas";
const LEDGER = "ledger"; // key [schema, window] -> ε
const OUTBOX = "outbox"; // key seq (auto) -> {report, bytes}

/** A request's result, or a transaction's end (no result), as a promise: the one wrapper of IndexedDB's events. */
function done<T>(target: IDBRequest<T> | IDBTransaction): Promise<T> {
  const t = target as IDBRequest<T> & IDBTransaction;
  return new Promise((resolve, reject) => {
    t.onsuccess = t.oncomplete = () => resolve(t.result);
    t.onerror = t.onabort = () => reject(t.error ?? new Error("IndexedDB transaction aborted"));
  });
}

export function hasIndexedDb(): boolean {
  return typeof indexedDB !== "undefined";
}

/** The ledger keys of `schema` whose window starts with `prefix` (a day: the day and its hours;
 * "": every window). Keys are [schema, window]: strings sort before arrays, so [schema, prefix]
 * to [schema, prefix + U+FFFF] holds every window beginning with `prefix`. */
function windowsOf(schema: string, prefix: string): IDBKeyRange {
  return IDBKeyRange.bound([schema, prefix], [schema, `${prefix}\uffff`]);
}

/** Keys and values of `store` within `range` (the oldest `limit`), as [keys, values]. */
function keysAndValues(store: IDBObjectStore, range: IDBKeyRange | null, limit?: number): Promise<[IDBValidKey[], any[]]> {
  return Promise.all([done(store.getAllKeys(range, limit)), done(store.getAll(range, limit))]);
}

export class IndexedDbStore implements Store {
  readonly kind = "indexeddb";

  private constructor(private readonly db: IDBDatabase) {}

  /** The store over database `ldp-telemetry`, made on first use. */
  static async open(): Promise<IndexedDbStore> {
    const request = indexedDB.open(DB, 1);
    request.onupgradeneeded = () => {
      for (const name of [SECRET, SCHEMAS, LEDGER, OUTBOX]) request.result.createObjectStore(name, { autoIncrement: name === OUTBOX });
    };
    return new IndexedDbStore(await done(request));
  }

  async deviceSecret(): Promise<DeviceSecret> {
    const existing = await this.readSecret();
    if (existing) return existing;
    // No crypto.subtle on a page that is no secure context (http://, not localhost): memoised
    // schemas are refused there, so no key is ever used; a throwaway keeps the others recording.
    if (!crypto.subtle) return crypto.getRandomValues(new Uint8Array(32));
    // Made outside a transaction (Web Crypto is asynchronous), then added only if no other tab
    // added one meanwhile: add() fails on an existing key, and every tab then reads the winner.
    const key = await crypto.subtle.generateKey({ name: "HMAC", hash: "SHA-256", length: 256 }, false, ["sign"]);
    await this.write([SECRET], ([store]) => store.add(key, "device")).catch(() => undefined);
    return (await this.readSecret())!;
  }

  cachedSchema(name: string): Promise<unknown> {
    return done(this.reading(SCHEMAS).get(name));
  }

  cacheSchema(name: string, text: string): Promise<void> {
    return this.write([SCHEMAS], ([store]) => store.put(text, name));
  }

  async ledger(schema: string): Promise<[string, number][]> {
    const [keys, values] = await keysAndValues(this.reading(LEDGER), windowsOf(schema, ""));
    return keys.map((key, i) => [(key as string[])[1], values[i]]);
  }

  async append(reports: Report[], limits: Limits): Promise<Appended> {
    let refused: string[] = [];
    let evicted = 0;
    // One transaction, driven only by its own requests (their promises settle while it is
    // active): awaiting anything else inside would let it commit early.
    await this.write([LEDGER, OUTBOX], async ([ledger, outbox]) => {
      try {
        const spent = await IndexedDbStore.daysOf(ledger, reports);
        refused = spendEach(spent, reports, limits.perDay, (report) => {
          ledger.put(report.epsilon, [report.schema, report.window]);
          outbox.add({ report, bytes: jsonBytes(report) });
        });
        const [keys, rows] = await keysAndValues(outbox, null);
        evicted = overflow(rows, limits);
        keys.slice(0, evicted).forEach((k) => outbox.delete(k));
      } catch {
        // All or nothing: an exception in a request's callback aborts its transaction, one in a
        // promise does not. (If it is over already, write() says how it ended.)
        try {
          ledger.transaction.abort();
        } catch {}
      }
    });
    return { refused, evicted };
  }

  async peek(limit: number): Promise<Row[]> {
    const [keys, values] = await keysAndValues(this.reading(OUTBOX), null, limit);
    return keys.map((k, i) => ({ seq: k as number, ...values[i] }));
  }

  remove(seqs: number[]): Promise<void> {
    return this.write([OUTBOX], ([store]) => seqs.forEach((seq) => store.delete(seq)));
  }

  count(): Promise<number> {
    return done(this.reading(OUTBOX).count());
  }

  async close(): Promise<void> {
    this.db.close();
  }

  /** The ledger rows of the days `reports` fall in, as the rules read them: schema -> window -> ε. */
  private static async daysOf(ledger: IDBObjectStore, reports: Report[]): Promise<State["ledger"]> {
    const days = new Map<string, Set<string>>(); // schema -> days
    for (const report of reports) {
      if (!days.has(report.schema)) days.set(report.schema, new Set());
      days.get(report.schema)!.add(dayOf(report.window));
    }
    const spent: State["ledger"] = {};
    for (const [schema, ofSchema] of days) {
      spent[schema] = {};
      for (const day of ofSchema) {
        const [keys, values] = await keysAndValues(ledger, windowsOf(schema, day));
        keys.forEach((key, i) => (spent[schema][(key as string[])[1]] = values[i]));
      }
    }
    return spent;
  }

  private readSecret(): Promise<CryptoKey | undefined> {
    return done(this.reading(SECRET).get("device"));
  }

  private reading(name: string): IDBObjectStore {
    return this.db.transaction(name).objectStore(name);
  }

  /** `change` the object stores `names` in one readwrite transaction; settles when it is over. */
  private write(names: string[], change: (stores: IDBObjectStore[]) => unknown): Promise<void> {
    const tx = this.db.transaction(names, "readwrite");
    change(names.map((name) => tx.objectStore(name)));
    return done<void>(tx);
  }
}
