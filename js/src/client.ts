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
import type { DeviceSecret } from "./hmac.js";
import { Ledger, type DaySpent } from "./ledger.js";
import { settings, type ClientOptions, type Settings } from "./options.js";
import { encodeReport, encodeWithPermanent, RecordError, type Truth } from "./reports.js";
import type { Schema } from "./schema.js";
import { SchemaSource } from "./schema-source.js";
import { sender, type Sender } from "./sender.js";
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

interface Pending {
  values: unknown;
  made: number;
  expires: number;
}

const CLOSED = "the client is closed";
let memoryWarned = false;

function isNode(): boolean {
  const p = (globalThis as { process?: { versions?: { node?: string } } }).process;
  return typeof p?.versions?.node === "string";
}

/** IndexedDB in a browser, files under Node, else memory (said once: a reload resets the ledger). */
async function openStore(s: Settings, schema: string): Promise<Store> {
  if (s.store) return s.store;
  if (hasIndexedDb()) return IndexedDbStore.open();
  if (isNode()) return FileStore.open(s.dataDir, schema);
  if (!memoryWarned) {
    memoryWarned = true;
    s.logger.warn("ldp-telemetry: no IndexedDB or files here: the ledger is in memory only");
  }
  return new MemoryStore();
}

export class TelemetryClient {
  private readonly s: Settings;
  private readonly source: SchemaSource;
  private readonly ledger: Ledger;
  private readonly sender: Sender;
  private pending: Pending[] = [];
  private ready = false; // the store is open and its ledger read
  private secret?: DeviceSecret;
  private closed = false;
  private failure?: string; // why nothing can be recorded (the store cannot be used)
  private readonly onHide?: (e: Event) => void;

  /** Throws (TypeError or Error) for a bad setting, or a schema given in code that is invalid,
   * greedy or huge; never because of the network or storage. */
  constructor(options: ClientOptions) {
    this.s = settings(options);
    this.source = new SchemaSource(this.s.schema, this.s.maxEpsilon, this.s.maxReportBytes, this.s.logger);
    this.ledger = new Ledger(this.s.maxEpsilonPerDay);
    const store = this.open();
    this.sender = sender(this.s, this.source, this.ledger, store, () => this.resolvePending());
    this.sender.wake();
    const w = globalThis as { addEventListener?: typeof addEventListener; document?: Document };
    if (typeof w.addEventListener === "function" && w.document) {
      // pagehide, or the page hidden: it may be closing.
      this.onHide = (e) => (e.type === "pagehide" || w.document!.visibilityState === "hidden") && this.sender.sendNow();
      w.addEventListener("pagehide", this.onHide);
      w.document.addEventListener("visibilitychange", this.onHide);
    }
  }

  private async open(): Promise<Store> {
    try {
      const store = await openStore(this.s, this.source.name);
      this.secret = await store.deviceSecret();
      await this.source.loadCached(store);
      this.ledger.learn(this.source.name, await store.ledger(this.source.name));
      this.ready = true;
      return store;
    } catch (e) {
      // No ledger that outlives the process can be kept: nothing is recorded (a restart could spend a window twice).
      this.s.logger.error((this.failure = `no usable storage for a ledger (${shown((e as Error)?.message ?? e, 200)}): nothing is recorded`));
      return new MemoryStore();
    }
  }

  /** The schema records are made under; undefined while none is known (or it was refused). */
  get schema(): Schema | undefined {
    return this.source.current;
  }

  /** Randomise `values` (the true values, one per attribute) and queue the report. Returns at
   * once; throws only a RecordError (naming the attribute, never the value) for a record that
   * does not fit the schema. A second record in a window, or one past the daily cap, is not sent. */
  record(values: Record<string, unknown>): RecordResult {
    if (this.closed || this.failure) return { queued: false, pending: false, reason: this.failure ?? CLOSED };
    if (!this.ready || !this.source.current) return this.hold(values);
    return this.make(values, Date.now());
  }

  private hold(values: unknown): RecordResult {
    if (this.source.refusal) return { queued: false, pending: false, reason: this.source.refusal };
    if (typeof values !== "object" || values === null || Array.isArray(values)) {
      throw new RecordError("record", "must be an object");
    }
    if (this.source.current) this.source.fitting(values); // a schema given in code: the app hears now
    if (this.pending.length >= this.s.maxPending) {
      return { queued: false, pending: false, reason: "maxPending records already pending" };
    }
    // A shallow copy, in memory only: the app may change its object afterwards.
    this.pending.push({ values: { ...values }, made: Date.now(), expires: Date.now() + this.s.pendingTimeoutMs });
    this.sender.busy++;
    this.sender.wake();
    return { queued: false, pending: true, reason: "pending: waiting in memory for the schema" };
  }

  private make(values: unknown, made: number): RecordResult {
    const [schema, truth] = this.source.fitting(values);
    const window = windowOf(made, schema.window);
    const reason = this.ledger.claim(schema.name, window, schema.epsilon);
    if (reason !== undefined) return { queued: false, pending: false, reason, window };
    if (schema.epsilonPermanent === undefined) this.sender.put(encodeReport(schema, truth, window, SYSTEM));
    else this.encodeLater(schema, truth, window);
    return { queued: true, pending: false, reason: "queued", window };
  }

  /** A memoised report waits for Web Crypto's HMAC (microseconds); its true values stay in memory meanwhile. */
  private encodeLater(schema: Schema, truth: Truth, window: string): void {
    this.sender.busy++;
    encodeWithPermanent(schema, truth, window, SYSTEM, this.secret)
      .then((report) => this.sender.put(report))
      .catch((e) => {
        this.ledger.release(schema.name, window);
        this.s.logger.error(shown((e as Error)?.message ?? e));
      })
      .finally(() => this.sender.busy--);
  }

  /** Called by the sender each turn: randomise pending records once the schema is known, drop expired ones. */
  private resolvePending(): void {
    if (!this.pending.length) return;
    const now = Date.now();
    const kept: Pending[] = [];
    let expired = 0;
    for (const p of this.pending) {
      if (now >= p.expires) expired++;
      else if (this.ready && this.source.current) {
        try {
          const result = this.make(p.values, p.made);
          if (!result.queued) this.s.logger.info?.(result.reason);
        } catch (e) {
          this.s.logger.warn(`dropped a pending record: ${(e as Error).message}`);
        }
      } else if (this.source.refusal || this.failure) expired++;
      else kept.push(p);
    }
    this.sender.busy -= this.pending.length - kept.length;
    this.pending = kept; // the others' true values are gone from here on
    if (expired) this.s.logger.warn(`dropped ${expired} pending record(s): no usable schema`);
  }

  /** Wait up to `timeoutMs` for a schema to record under (and the store to be open); true once
   * there is one. Not needed before record(): records made earlier wait in memory. */
  async waitForSchema(timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (!(this.ready && this.source.current)) {
      if (this.source.refusal || this.failure || Date.now() >= deadline) return false;
      this.sender.wake();
      await new Promise((r) => setTimeout(r, Math.min(50, Math.max(1, deadline - Date.now()))));
    }
    return true;
  }

  /** Wait up to `timeoutMs` for every record made so far to be delivered (or dropped); true
   * when none is left. Reports left are kept and retried. */
  flush(timeoutMs = 10_000): Promise<boolean> {
    return this.sender.waitSettled(timeoutMs);
  }

  /** Deliver what can be within `timeoutMs` (default closeTimeoutMs), then stop. What is left
   * stays in storage for the next start; pending true records are dropped (never stored). */
  async close(timeoutMs = this.s.closeTimeoutMs): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const w = globalThis as { removeEventListener?: typeof removeEventListener; document?: Document };
    if (this.onHide) {
      w.removeEventListener!("pagehide", this.onHide);
      w.document!.removeEventListener("visibilitychange", this.onHide);
    }
    await this.sender.waitSettled(timeoutMs);
    this.sender.stopped = true;
    if (this.pending.length) {
      this.s.logger.warn(`dropped ${this.pending.length} pending record(s): closed`);
      this.sender.busy -= this.pending.length;
      this.pending = [];
    }
  }

  /** The ledger: {schema: {day: {epsilon, maxEpsilonPerDay, windows: {window: ε}}}}. */
  privacySpent(): Record<string, Record<string, DaySpent>> {
    return this.ledger.spent();
  }

  /** What this device's reports under the current schema have cost, in plain words. */
  privacyStatement(): string {
    const schema = this.source.current;
    if (!schema) return "No schema yet: nothing was sent.";
    const days = Object.values(this.privacySpent()[schema.name] ?? {});
    const windows = days.reduce((a, d) => a + Object.keys(d.windows).length, 0);
    const spent = days.reduce((a, d) => a + d.epsilon, 0);
    const e = schema.epsilonPermanent;
    // Browsers may clear storage (private windows, Safari's 7-day rule): the ledger and the device start afresh.
    return `Each report of ${schema.name} spends epsilon ${schema.epsilon}. This device has reported in ${windows} window(s)` +
      (e === undefined ? `: epsilon ${spent} in all, and every further window adds ${schema.epsilon}.`
        : `; its answers are memoised: the server can learn at most epsilon ${e} about any one value it holds, however often it reports it.`) +
      (hasIndexedDb() ? " These bounds hold per browser storage, not per person." : "");
  }
}
