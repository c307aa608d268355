/**
 * The browser store: IndexedDB database `ldp-telemetry`. The device secret is an HMAC-SHA256
 * CryptoKey made non-extractable (no script, ours included, can read its bytes back); the
 * ledger's check-and-spend and the outbox write are one readwrite transaction over both stores,
 * and IndexedDB runs transactions with overlapping stores one at a time, so two tabs cannot both
 * spend a window. Browsers may clear all of it (private windows, Safari's 7-day rule, partitioned
 * storage): the ledger and the device then start afresh, which privacyStatement() says.
 */

import type { DeviceSecret } from "./hmac.js";
import { spend } from "./ledger.js";
import type { Report } from "./reports.js";
import { UTF8, type Appended, type Limits, type Row, type Store } from "./storage.js";
import { dayOf } from "./windows.js";

const DB = "ldp-telemetry";
const SECRET = "secret";
const SCHEMAS = "schemas";
const LEDGER = "ledger"; // key [schema, window] -> ε
const OUTBOX = "outbox"; // key seq (auto) -> {report, bytes}

function done<T>(request: IDBRequest<T>): Promise<T> {
  return new Promise((resolve, reject) => {
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => reject(request.error);
  });
}

function finished(tx: IDBTransaction): Promise<void> {
  return new Promise((resolve, reject) => {
    tx.oncomplete = () => resolve();
    tx.onerror = tx.onabort = () => reject(tx.error ?? new Error("IndexedDB transaction aborted"));
  });
}

export function hasIndexedDb(): boolean {
  return typeof indexedDB !== "undefined" && typeof IDBKeyRange !== "undefined";
}

export class IndexedDbStore implements Store {
  readonly kind = "indexeddb";
  private constructor(private readonly db: IDBDatabase) {}

  static async open(): Promise<IndexedDbStore> {
    const request = indexedDB.open(DB, 1);
    request.onupgradeneeded = () => {
      const db = request.result;
      db.createObjectStore(SECRET);
      db.createObjectStore(SCHEMAS);
      db.createObjectStore(LEDGER);
      db.createObjectStore(OUTBOX, { autoIncrement: true });
    };
    return new IndexedDbStore(await done(request));
  }

  async deviceSecret(): Promise<DeviceSecret> {
    const read = () => done(this.db.transaction(SECRET).objectStore(SECRET).get("device")) as Promise<CryptoKey | undefined>;
    const existing = await read();
    if (existing) return existing;
    // Made outside a transaction (Web Crypto is asynchronous), then added only if no other tab
    // added one meanwhile: add() fails on an existing key, and every tab then reads the winner.
    const key = await crypto.subtle.generateKey({ name: "HMAC", hash: "SHA-256", length: 256 }, false, ["sign"]);
    const tx = this.db.transaction(SECRET, "readwrite");
    tx.objectStore(SECRET).add(key, "device");
    await finished(tx).catch(() => undefined);
    return (await read())!;
  }

  async cachedSchema(name: string): Promise<unknown> {
    return done(this.db.transaction(SCHEMAS).objectStore(SCHEMAS).get(name));
  }

  async cacheSchema(name: string, derived: unknown): Promise<void> {
    const tx = this.db.transaction(SCHEMAS, "readwrite");
    tx.objectStore(SCHEMAS).put(derived, name);
    await finished(tx);
  }

  async ledger(schema: string): Promise<[string, number][]> {
    const store = this.db.transaction(LEDGER).objectStore(LEDGER);
    const range = IDBKeyRange.bound([schema, ""], [schema, "\uffff"]);
    const [keys, values] = await Promise.all([done(store.getAllKeys(range)), done(store.getAll(range))]);
    return keys.map((k, i) => [(k as [string, string])[1], values[i] as number]);
  }

  append(reports: Report[], limits: Limits): Promise<Appended> {
    // One transaction, driven by callbacks only: awaiting anything else inside would let it commit early.
    const tx = this.db.transaction([LEDGER, OUTBOX], "readwrite");
    const ledger = tx.objectStore(LEDGER);
    const outbox = tx.objectStore(OUTBOX);
    const out: Appended = { refused: [], evicted: 0 };
    const spentByDay = new Map<string, Record<string, number>>();
    let i = 0;
    const next = (): void => {
      if (i === reports.length) return evict();
      const report = reports[i++];
      const day = dayOf(report.window);
      const key = `${report.schema}\u0000${day}`;
      const known = spentByDay.get(key);
      const decide = (spent: Record<string, number>) => {
        spentByDay.set(key, spent);
        const why = spend(spent, report.window, report.epsilon, limits.perDay);
        if (why) out.refused.push(why);
        else {
          ledger.put(report.epsilon, [report.schema, report.window]);
          outbox.add({ report, bytes: UTF8.encode(JSON.stringify(report)).length });
        }
        next();
      };
      if (known) return decide(known);
      // Hour windows sort after their day ("2026-11-21T05" > "2026-11-21") and before "2026-11-21U".
      const range = IDBKeyRange.bound([report.schema, day], [report.schema, `${day}U`]);
      const keys = ledger.getAllKeys(range);
      const values = ledger.getAll(range);
      values.onsuccess = () => decide(Object.fromEntries((keys.result as [string, string][]).map((k, j) => [k[1], values.result[j] as number])));
    };
    const evict = (): void => {
      const cursor = outbox.openCursor();
      const rows: { key: IDBValidKey; bytes: number }[] = [];
      cursor.onsuccess = () => {
        const c = cursor.result;
        if (c) {
          rows.push({ key: c.key, bytes: (c.value as { bytes: number }).bytes });
          return c.continue();
        }
        let bytes = rows.reduce((a, r) => a + r.bytes, 0);
        let count = rows.length;
        for (const r of rows) {
          if (count <= limits.maxReports && bytes <= limits.maxBytes) break;
          outbox.delete(r.key);
          count--;
          bytes -= r.bytes;
          out.evicted++;
        }
      };
    };
    next();
    return finished(tx).then(() => out);
  }

  async peek(limit: number): Promise<Row[]> {
    const store = this.db.transaction(OUTBOX).objectStore(OUTBOX);
    const [keys, values] = await Promise.all([done(store.getAllKeys(null, limit)), done(store.getAll(null, limit))]);
    return keys.map((k, i) => ({ seq: k as number, ...(values[i] as { report: Report; bytes: number }) }));
  }

  async remove(seqs: number[]): Promise<void> {
    const tx = this.db.transaction(OUTBOX, "readwrite");
    const store = tx.objectStore(OUTBOX);
    for (const seq of seqs) store.delete(seq);
    await finished(tx);
  }

  async count(): Promise<number> {
    return done(this.db.transaction(OUTBOX).objectStore(OUTBOX).count());
  }

  async close(): Promise<void> {
    this.db.close();
  }
}
