/**
 * `TelemetryClient`: record true values in an app; only randomised reports ever leave it.
 *
 * record() is the hot path and touches neither the network nor storage: it validates the record,
 * claims its window in the ledger's copy in memory, randomises it at once with the CSPRNG and
 * hands the report to the {@link Sender}. Before the schema (or the store) is known the true
 * record is held in memory only, at most maxPending of them for at most pendingTimeoutMs, and
 * randomised when it arrives. It never throws into the app except a {@link RecordError} for a
 * record that does not fit a known schema.
 */

import { shown } from "./http.js";
import { parseJson } from "./pyjson.js";
import type { DeviceSecret } from "./hmac.js";
import { ledger as newLedger, type DaySpent } from "./ledger.js";
import { checkedDelay, settings, type ClientOptions, type Settings } from "./options.js";
import { encodeWithPermanent, RecordError } from "./reports.js";
import { isObject, type Schema } from "./schema.js";
import { schemaSource } from "./schema-source.js";
import { sender } from "./sender.js";
import { MemoryStore, type Store } from "./storage.js";
import { FileStore } from "./store-files.js";
import { hasIndexedDb, IndexedDbStore } from "./store-idb.js";
import { SYSTEM } from "./random.js";
import { windowOf } from "./windows.js";

export interface RecordResult {
  /** The report was randomised and queued. */
  queued: boolean;
  /** The record waits in memory for its schema (it is randomised, or dropped, when it arrives). */
  pending: boolean;
  /** "queued", or why not (a spent window, the daily cap, a closed client...). */
  reason: string;
  /** The window the report counts in. */
  window?: string;
}

/** A record waiting for its schema: make()'s arguments (the true values, when it was made). */
type Pending = [values: unknown, made: number];

function isNode(): boolean {
  const p = (globalThis as { process?: { versions?: { node?: string } } }).process;
  return typeof p?.versions?.node === "string";
}

/** IndexedDB in a browser, files under Node, else memory (said when the client opens it: a reload resets the ledger). */
async function openStore(s: Settings, schema: string): Promise<Store> {
  if (s.store) return s.store;
  if (hasIndexedDb()) return IndexedDbStore.open();
  if (LDP_FULL && isNode()) return FileStore.open(s.dataDir, schema);
  s.logger.warn("no storage for a ledger: memory only");
  return new MemoryStore();
}

export class TelemetryClient {
  /** The schema records are made under; undefined while none is known (or it was refused). */
  declare readonly schema: Schema | undefined;
  /** Randomise `values` (the true values, one per attribute) and queue the report. Returns at
   * once; throws only a RecordError (naming the attribute, never the value) for a record that
   * does not fit the schema. A second record in a window, or one past the daily cap, is not sent. */
  declare record: (values: Record<string, unknown>) => RecordResult;
  /** Wait up to `timeoutMs` for a schema to record under (and the store to be open); true once
   * there is one. Not needed before record(): records made earlier wait in memory. */
  declare waitForSchema: (timeoutMs: number) => Promise<boolean>;
  /** Wait up to `timeoutMs` (default 10 s) for every record made so far to be delivered (or
   * dropped); true when none is left. Reports left are kept and retried. */
  declare flush: (timeoutMs?: number) => Promise<boolean>;
  /** Deliver what can be within `timeoutMs` (default closeTimeoutMs), then stop. What is left
   * stays in storage for the next start; pending true records are dropped (never stored). */
  declare close: (timeoutMs?: number) => Promise<void>;
  /** The ledger: {schema: {day: {epsilon, maxEpsilonPerDay, windows: {window: ε}}}}. */
  declare privacySpent: () => Record<string, Record<string, DaySpent>>;
  /** What this device's reports under the current schema have cost, in plain words. */
  declare privacyStatement: () => string;

  /** Throws (TypeError or Error) for a bad setting, or a schema given in code that is invalid,
   * greedy or huge; never because of the network or storage. The state lives in this closure
   * (local names minify to one letter; members would not). */
  constructor(options: ClientOptions) {
    const s = settings(options);
    const log = s.logger;
    const source = schemaSource(s.schema, s.maxEpsilon, s.maxReportBytes, log);
    const name = source.name; // every schema it offers has this name (it refuses any other)
    const ledger = newLedger(s.maxEpsilonPerDay);
    let pending: Pending[] = [];
    let secret: DeviceSecret | undefined; // read last: set once the store is open and its ledger read
    let closed = false;
    let failure: string | undefined; // why nothing can be recorded (the store cannot be used)
    // Queued exactly when the reason is "queued"; not queued, pending or refused.
    const result = (reason: string, window?: string, pending = false): RecordResult =>
      ({ queued: reason === "queued", pending, reason, ...(window && { window }) });
    const usable = () => secret && source.current;

    const open = async (): Promise<Store> => {
      try {
        const store = await openStore(s, name);
        // The cached schema, unless one was given in code (checked again: storage is no more trusted than the server).
        // Node and the ES module cache the served text, so that its floats keep their spelling.
        const cached = !source.current && (await store.cachedSchema(name));
        if (cached) source.offer(LDP_FULL && typeof cached === "string" ? parseJson(cached) : cached);
        ledger.learn(name, await store.ledger(name));
        secret = await store.deviceSecret();
        return store;
      } catch (e) {
        // No ledger that outlives the process can be kept: nothing is recorded (a restart could spend a window twice).
        log.error((failure = `no storage for a ledger (${shown((e as Error)?.message ?? e, 200)}): nothing is recorded`));
        return new MemoryStore();
      }
    };

    const make = (values: unknown, made: number): RecordResult => {
      const [schema, truth] = source.fitting(values);
      const window = windowOf(made, schema.window);
      const reason = ledger.claim(name, window, schema.epsilon);
      if (reason) return result(reason, window);
      // A memoised report waits for Web Crypto's HMAC (microseconds), its true values in memory meanwhile;
      // any other is randomised here, at once, and queued a microtask later.
      out.busy++;
      encodeWithPermanent(schema, truth, window, SYSTEM, secret)
        .then(out.put, (e) => {
          ledger.release(name, window);
          log.error(shown((e as Error)?.message ?? e));
        })
        .finally(() => out.busy--);
      return result("queued", window);
    };

    /** Called by the sender each turn, and by close(): randomise pending records once the schema is
     * known; drop expired ones, and all of them once there can be no schema (refused, no storage,
     * or the client stopped before one came). */
    const resolvePending = (): void => {
      const oldest = Date.now() - s.pendingTimeoutMs;
      let expired = 0;
      // Those not kept are done with (their true values gone from here on): one less for the sender to wait for.
      pending = pending.filter(([values, made]) => {
        // (usable() implies neither a refusal nor a failure.)
        if (made <= oldest || source.refusal || failure || out.stopped) expired++;
        else if (!usable()) return true;
        else {
          try {
            const result = make(values, made);
            if (!result.queued) log.info(result.reason);
          } catch (e) {
            log.warn(`dropped a pending record: ${(e as Error).message}`);
          }
        }
        out.busy--;
      });
      if (expired) log.warn(`dropped ${expired} pending record(s): no usable schema`);
    };

    const out = sender(s, source, ledger, open(), resolvePending);
    out.wake();
    // In a page (a document and the global's listeners): pagehide, or the page hidden: it may be closing.
    const page = typeof addEventListener === "function" && (globalThis as { document?: Document }).document;
    // (pagehide comes before the page is hidden.)
    const onHide = (e: Event) => (e.type === "pagehide" || (page as Document).hidden) && out.sendNow();
    if (page) {
      addEventListener("pagehide", onHide);
      page.addEventListener("visibilitychange", onHide);
    }

    Object.defineProperty(this, "schema", { get: () => source.current });
    Object.assign(this, {
      record: (values) => {
        if (closed || failure) return result(failure ?? "the client is closed");
        if (usable()) return make(values, Date.now());
        if (source.refusal) return result(source.refusal);
        if (!isObject(values)) throw new RecordError("record", "must be an object");
        if (source.current) source.fitting(values); // a schema given in code: the app hears now
        if (pending.length >= s.maxPending) return result("maxPending reached");
        // A shallow copy, in memory only: the app may change its object afterwards.
        pending.push([{ ...values }, Date.now()]);
        out.busy++;
        out.wake();
        return result("waiting for the schema", undefined, true);
      },
      waitForSchema: async (timeoutMs) => {
        const deadline = Date.now() + checkedDelay("timeoutMs of waitForSchema()", timeoutMs);
        out.wake();
        while (!usable()) {
          if (source.refusal || failure || Date.now() >= deadline) return false;
          await new Promise((r) => setTimeout(r, Math.min(20, deadline - Date.now())));
        }
        return true;
      },
      flush: async (timeoutMs = 10_000) => out.waitSettled(checkedDelay("timeoutMs of flush()", timeoutMs)),
      close: async (timeoutMs = s.closeTimeoutMs) => {
        checkedDelay("timeoutMs of close()", timeoutMs);
        if (closed) return;
        closed = true;
        if (page) {
          removeEventListener("pagehide", onHide);
          page.removeEventListener("visibilitychange", onHide);
        }
        await out.waitSettled(timeoutMs);
        out.stopped = true;
        resolvePending();
      },
      privacySpent: () => ledger.spent(),
      privacyStatement: () => {
        const schema = source.current;
        if (!schema) return "No schema yet: nothing sent.";
        let windows = 0;
        let spent = 0;
        for (const day of Object.values(ledger.spent()[name] ?? {})) {
          windows += Object.keys(day.windows).length;
          spent += day.epsilon;
        }
        const e = schema.epsilonPermanent;
        // Browsers may clear storage (private windows, Safari's 7-day rule): the ledger and the device start afresh.
        return `A report of ${name} spends epsilon ${schema.epsilon}; this device reported in ${windows} window(s)` +
          (e === undefined ? `: epsilon ${spent} in all, plus ${schema.epsilon} per new window.`
            : `; memoised answers: the server learns at most epsilon ${e} per value it holds, and up to ${e} more per new value.`) +
          (hasIndexedDb() ? " Bounds are per browser storage, not per person." : "");
      },
    } satisfies Omit<TelemetryClient, "schema">);
  }
}
