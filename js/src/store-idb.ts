/**
 * The browser store: IndexedDB database `ldp-telemetry`. The device secret is an HMAC-SHA256
 * CryptoKey made non-extractable (no script, ours included, can read its bytes back); the
 * ledger's check-and-spend and the outbox write are one readwrite transaction over both stores,
 * and IndexedDB runs transactions with overlapping stores one at a time, so two tabs cannot both
 * spend a window. Browsers may clear all of it (private windows, Safari's 7-day rule, partitioned
 * storage): the ledger and the device then start afresh, which privacyStatement() says.
 */

import { forApps, jsonBytes, overflow, spendEach, type State, type Store } from "./storage.js";

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

/** `IndexedDbStore.open()`: the store over database `ldp-telemetry` (a closure over the open database). */
export const IndexedDbStore = {
  async open(): Promise<Store> {
    const request = indexedDB.open(DB, 1);
    request.onupgradeneeded = () => {
      for (const name of [SECRET, SCHEMAS, LEDGER, OUTBOX]) request.result.createObjectStore(name, { autoIncrement: name === OUTBOX });
    };
    const db = await done(request);
    const read = (name: string) => db.transaction(name).objectStore(name);
    /** `change` the object stores `names` in one readwrite transaction; settles when it is over. */
    const write = (names: string[], change: (...stores: IDBObjectStore[]) => unknown) => {
      const tx = db.transaction(names, "readwrite");
      change(...names.map((name) => tx.objectStore(name)));
      return done<void>(tx);
    };
    /** Keys and values of `store` (the oldest `limit`), as [keys, values]. */
    const both = (store: IDBObjectStore, limit?: number) =>
      Promise.all([done(store.getAllKeys(null, limit)), done(store.getAll(null, limit))]);
    /** The whole ledger, as the rules read it: schema -> window -> ε (a row per window spent). */
    const spent = async (store: IDBObjectStore) => {
      const [keys, values] = await both(store);
      const out: State["ledger"] = {};
      (keys as string[][]).forEach(([schema, window], i) => ((out[schema] ??= {})[window] = values[i]));
      return out;
    };
    const readSecret = () => done(read(SECRET).get("device")) as Promise<CryptoKey | undefined>;
    return {
      ...forApps({ kind: "indexeddb", count: () => done(read(OUTBOX).count()), close: async () => db.close() }),
      async deviceSecret() {
        const existing = await readSecret();
        if (existing) return existing;
        // No crypto.subtle on a page that is no secure context (http://, not localhost): memoised
        // schemas are refused there, so no key is ever used; a throwaway keeps the others recording.
        if (!crypto.subtle) return crypto.getRandomValues(new Uint8Array(32));
        // Made outside a transaction (Web Crypto is asynchronous), then added only if no other tab
        // added one meanwhile: add() fails on an existing key, and every tab then reads the winner.
        const key = await crypto.subtle.generateKey({ name: "HMAC", hash: "SHA-256", length: 256 }, false, ["sign"]);
        await write([SECRET], (store) => store.add(key, "device")).catch(() => undefined);
        return (await readSecret())!;
      },
      cachedSchema: (name) => done(read(SCHEMAS).get(name)),
      cacheSchema: (name, derived) => write([SCHEMAS], (store) => store.put(derived, name)),
      ledger: async (schema) => Object.entries((await spent(read(LEDGER)))[schema] ?? {}),
      append(reports, limits) {
        // One transaction, driven only by its own requests (their promises settle while it is
        // active): awaiting anything else inside would let it commit early. The rules run on the
        // ledger read whole, as in every store (storage.ts).
        let refused: string[] = [];
        let evicted = 0;
        return write([LEDGER, OUTBOX], async (ledger, outbox) => {
          try {
            refused = spendEach(await spent(ledger), reports, limits.perDay, (report) => {
              ledger.put(report.epsilon, [report.schema, report.window]);
              outbox.add({ report, bytes: jsonBytes(report) });
            });
            const [keys, rows] = await both(outbox);
            evicted = overflow(rows, limits);
            keys.slice(0, evicted).forEach((k) => outbox.delete(k));
          } catch {
            // All or nothing: an exception in a request's callback aborts its transaction, one in a
            // promise does not. (If it is over already, write() says how it ended.)
            try {
              ledger.transaction.abort();
            } catch {}
          }
        }).then(() => ({ refused, evicted }));
      },
      async peek(limit) {
        const [keys, values] = await both(read(OUTBOX), limit);
        return keys.map((k, i) => ({ seq: k as number, ...values[i] }));
      },
      remove: (seqs) => write([OUTBOX], (store) => seqs.forEach((seq) => store.delete(seq))),
    };
  },
};
