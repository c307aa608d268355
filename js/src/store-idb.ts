/**
 * The browser store: IndexedDB database `ldp-telemetry`. The device secret is an HMAC-SHA256
 * CryptoKey made non-extractable (no script, ours included, can read its bytes back); the
 * ledger's check-and-spend and the outbox write are one readwrite transaction over both stores,
 * and IndexedDB runs transactions with overlapping stores one at a time, so two tabs cannot both
 * spend a window. Browsers may clear all of it (private windows, Safari's 7-day rule, partitioned
 * storage): the ledger and the device then start afresh, which privacyStatement() says.
 */

import type { DeviceSecret } from "./hmac.js";
import type { Report } from "./reports.js";
import { jsonBytes, overflow, spendEach, type Appended, type Store } from "./storage.js";

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

/** `IndexedDbStore.open()`: the store over database `ldp-telemetry` (a closure over the open database). */
export const IndexedDbStore = {
  async open(): Promise<Store> {
    const request = indexedDB.open(DB, 1);
    request.onupgradeneeded = () => {
      for (const name of [SECRET, SCHEMAS, LEDGER]) request.result.createObjectStore(name);
      request.result.createObjectStore(OUTBOX, { autoIncrement: true });
    };
    const db = await done(request);
    /** One object store, in a transaction of its own unless `tx` is given. */
    const os = (name: string, mode: IDBTransactionMode = "readonly", tx = db.transaction(name, mode)) => tx.objectStore(name);
    /** A read of both keys and values of `store` (in `range`, at most `limit`), as [keys, values]. */
    const both = (store: IDBObjectStore, range: IDBKeyRange | null, limit?: number) =>
      Promise.all([done(store.getAllKeys(range, limit)), done(store.getAll(range, limit))]);
    const readSecret = () => done(os(SECRET).get("device")) as Promise<CryptoKey | undefined>;
    return {
      kind: "indexeddb",
      async deviceSecret() {
        const existing = await readSecret();
        if (existing) return existing;
        // Made outside a transaction (Web Crypto is asynchronous), then added only if no other tab
        // added one meanwhile: add() fails on an existing key, and every tab then reads the winner.
        const key = await crypto.subtle.generateKey({ name: "HMAC", hash: "SHA-256", length: 256 }, false, ["sign"]);
        const store = os(SECRET, "readwrite");
        store.add(key, "device");
        await finished(store.transaction).catch(() => undefined);
        return (await readSecret())!;
      },
      cachedSchema: (name) => done(os(SCHEMAS).get(name)),
      cacheSchema(name, derived) {
        const store = os(SCHEMAS, "readwrite");
        store.put(derived, name);
        return finished(store.transaction);
      },
      async ledger(schema) {
        const [keys, values] = await both(os(LEDGER), IDBKeyRange.bound([schema, ""], [schema, "\uffff"]));
        return keys.map((k, i) => [(k as string[])[1], values[i] as number]);
      },
      append(reports, limits) {
        // One transaction, driven only by its own requests (their promises settle while it is
        // active): awaiting anything else inside would let it commit early. The ledger is read
        // whole (a row per window spent), then the rules run on it, as in every store (storage.ts).
        const tx = db.transaction([LEDGER, OUTBOX], "readwrite");
        const ledger = os(LEDGER, undefined, tx);
        const outbox = os(OUTBOX, undefined, tx);
        const out: Appended = { refused: [], evicted: 0 };
        both(ledger, null).then(([keys, values]) => {
          const spent: Record<string, Record<string, number>> = {};
          for (const [i, [schema, window]] of (keys as string[][]).entries()) (spent[schema] ??= {})[window] = values[i] as number;
          out.refused = spendEach(spent, reports, limits.perDay, (report) => {
            ledger.put(report.epsilon, [report.schema, report.window]);
            outbox.add({ report, bytes: jsonBytes(report) });
          });
          return both(outbox, null);
        }).then(([keys, rows]) => {
          out.evicted = overflow(rows, limits);
          keys.slice(0, out.evicted).forEach((k) => outbox.delete(k));
        }).catch(() => {
          // All or nothing: an exception in a request's callback aborts its transaction, one in a
          // promise does not. (If it is over already, finished() says how it ended.)
          try {
            tx.abort();
          } catch {}
        });
        return finished(tx).then(() => out);
      },
      async peek(limit) {
        const [keys, values] = await both(os(OUTBOX), null, limit);
        return keys.map((k, i) => ({ seq: k as number, ...values[i] }));
      },
      remove(seqs) {
        const store = os(OUTBOX, "readwrite");
        for (const seq of seqs) store.delete(seq);
        return finished(store.transaction);
      },
      count: () => done(os(OUTBOX).count()),
      async close() {
        db.close();
      },
    };
  },
};
