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

import { firstRead, isNode } from "./data-folder.js";
import type { DeviceSecret } from "./hmac.js";
import { shown } from "./http.js";
import { Ledger, type DaySpent } from "./ledger.js";
import { checkedDelay, settings, type ClientOptions, type Settings } from "./options.js";
import { SYSTEM } from "./random.js";
import { encodeWithPermanent, RecordError } from "./reports.js";
import { isObject } from "./schema.js";
import { SchemaSource } from "./schema-source.js";
import { Sender } from "./sender.js";
import { MemoryStore, type Store } from "./storage.js";
import { hasIndexedDb, IndexedDbStore } from "./store-idb.js";
import { Waiters } from "./waiters.js";
import { windowOf } from "./windows.js";

export interface RecordResult {
  /** The report was randomised and queued. */
  queued: boolean;
  /** The record waits in memory for its schema or the store (it is randomised, or dropped, then). */
  pending: boolean;
  /** "queued", or why not (a spent window, the daily cap, a closed client...). */
  reason: string;
  /** The window the report counts in. */
  window?: string;
}

/** A record waiting for its schema: the true values (in memory only), and when it was made. */
interface Pending {
  values: Record<string, unknown>;
  made: number;
}

const FLUSH_TIMEOUT_MS = 10_000;

/** Queued exactly when the reason is "queued"; else not queued, pending or refused. */
function result(reason: string, window?: string, pending = false): RecordResult {
  return { queued: reason === "queued", pending, reason, ...(window && { window }) };
}

export class TelemetryClient {
  private readonly settings: Settings;
  private readonly source: SchemaSource;
  private readonly ledger: Ledger;
  private readonly sender: Sender;
  private readonly waiters = new Waiters();
  private readonly page: PageEvents;
  private pending: Pending[] = [];
  private encoding = 0; // memoised reports waiting for Web Crypto's HMAC (microseconds)
  private secret: DeviceSecret | undefined; // set once the store is open and its ledger read
  private closed = false;
  private failure: string | undefined; // why nothing can be recorded (the store cannot be used)

  /** Throws a TypeError for a bad option, or a SchemaError for a schema given in code that is
   * invalid, greedy or huge; never because of the network or storage. */
  constructor(options: ClientOptions) {
    this.settings = settings(options);
    const s = this.settings;
    this.source = new SchemaSource(s.schema, s.maxEpsilon, s.maxReportBytes, s.logger);
    this.ledger = new Ledger(s.maxEpsilonPerDay);
    if (!s.store && !hasIndexedDb() && isNode()) this.takeFirstRead();
    this.sender = new Sender(s, this.source, this.ledger, this.open(), {
      waiting: () => this.pending.length + this.encoding,
      beforeTurn: () => this.resolvePending(),
      changed: () => this.waiters.changed(),
    });
    this.sender.wake();
    this.page = new PageEvents(this.sender);
  }

  /** The schema records are made under; undefined while none is known (or it was refused). */
  get schema() {
    return this.source.current;
  }

  /** Randomise `values` (the true values, one per attribute) and queue the report. Returns at
   * once; throws only a RecordError (naming the attribute, never the value) for a record that
   * does not fit the schema. A second record in a window, or one past the daily cap, is not sent. */
  record(values: Record<string, unknown>): RecordResult {
    if (this.closed) return result("the client is closed");
    if (this.failure) return result(this.failure);
    if (this.usable) return this.make(values, Date.now());
    if (this.source.refusal) return result(this.source.refusal);
    if (!isObject(values)) throw new RecordError("record", "must be an object");
    if (this.source.current) this.source.fitting(values); // a schema known already: the app hears now
    if (this.pending.length >= this.settings.maxPending) return result(`maxPending (${this.settings.maxPending}) records wait already`);
    // A shallow copy, in memory only: the app may change its object afterwards.
    this.pending.push({ values: { ...values }, made: Date.now() });
    this.sender.wake();
    return result(this.source.current ? "waiting for the store" : "waiting for the schema", undefined, true);
  }

  /** Wait up to `timeoutMs` for a schema to record under (and the store to be open); true once
   * there is one. Not needed before record(): records made earlier wait in memory. */
  async waitForSchema(timeoutMs: number): Promise<boolean> {
    const ms = checkedDelay("timeoutMs of waitForSchema()", timeoutMs);
    this.sender.wake();
    await this.waiters.until(() => this.usable || this.source.refusal !== undefined || this.failure !== undefined, ms);
    return this.usable;
  }

  /** Wait up to `timeoutMs` (default 10 s) for every record made so far to be delivered (or
   * dropped); true when none is left. Reports left are kept and retried. */
  async flush(timeoutMs = FLUSH_TIMEOUT_MS): Promise<boolean> {
    return this.settle(checkedDelay("timeoutMs of flush()", timeoutMs));
  }

  /** Deliver what can be within `timeoutMs` (default closeTimeoutMs), then stop. What is left
   * stays in storage for the next start; pending true records are dropped (never stored). */
  async close(timeoutMs = this.settings.closeTimeoutMs): Promise<void> {
    const ms = checkedDelay("timeoutMs of close()", timeoutMs);
    if (this.closed) return;
    this.closed = true;
    this.page.stop();
    await this.settle(ms);
    this.sender.stopped = true;
    this.resolvePending();
  }

  /** The ledger: {schema: {day: {epsilon, maxEpsilonPerDay, windows: {window: ε}}}}. */
  privacySpent(): Record<string, Record<string, DaySpent>> {
    return this.ledger.spent();
  }

  /** What this device's reports under the current schema have cost, in plain words. */
  privacyStatement(): string {
    const schema = this.source.current;
    if (!schema) return "No schema yet: nothing sent.";
    let windows = 0;
    let spent = 0;
    for (const day of Object.values(this.ledger.spent()[schema.name] ?? {})) {
      windows += Object.keys(day.windows).length;
      spent += day.epsilon;
    }
    const e = schema.epsilonPermanent;
    const bounds = e === undefined ? `: epsilon ${spent} in all, plus ${schema.epsilon} per new window.`
      : `; memoised answers: the server learns at most epsilon ${e} per value it holds, and up to ${e} more per new value.`;
    // Browsers may clear storage (private windows, Safari's 7-day rule): the ledger and the device start afresh.
    const browser = hasIndexedDb() ? " Bounds are per browser storage, not per person." : "";
    return `A report of ${schema.name} spends epsilon ${schema.epsilon}; this device reported in ${windows} window(s)${bounds}${browser}`;
  }

  /** A schema to record under, and the store open. */
  private get usable(): boolean {
    return this.secret !== undefined && this.source.current !== undefined;
  }

  private async settle(timeoutMs: number): Promise<boolean> {
    if (this.sender.settled) return true;
    this.sender.hurry();
    await this.waiters.until(() => this.sender.settled, timeoutMs);
    return this.sender.settled;
  }

  /** A second start under Node: the cached schema, the ledger and the secret read from the data
   * folder now, so records made at once are randomised at once (open() reads them again). */
  private takeFirstRead(): void {
    const first = firstRead(this.settings.dataDir, this.source.name);
    if (!first) return;
    this.source.offerText(first.schema, "cached in the data folder");
    this.ledger.learn(this.source.name, first.ledger);
    this.secret = first.secret;
  }

  /** The store (IndexedDB in a browser, files under Node, else memory), with the cached schema
   * offered and the ledger read. If it cannot be used, nothing is recorded: without a ledger that
   * outlives the process, a restart could spend a window twice. */
  private async open(): Promise<Store> {
    const s = this.settings;
    try {
      const store = s.store ?? (await this.defaultStore());
      await this.source.offerCached(store);
      this.ledger.learn(this.source.name, await store.ledger(this.source.name));
      this.secret = await store.deviceSecret(); // last: record() waits for it
      return store;
    } catch (e) {
      this.failure = `no storage for a ledger (${shown((e as Error)?.message ?? e, 200)}): nothing is recorded`;
      s.logger.error(this.failure);
      return new MemoryStore();
    } finally {
      this.waiters.changed();
    }
  }

  private async defaultStore(): Promise<Store> {
    if (hasIndexedDb()) return IndexedDbStore.open();
    // Loaded under Node only: the <script> bundle, where a page has no file system, leaves it out.
    if (isNode()) return (await import("./store-files.js")).FileStore.open(this.settings.dataDir, this.source.name);
    this.settings.logger.warn("no IndexedDB and no file system: the ledger is kept in memory only (a restart resets it)");
    return new MemoryStore();
  }

  /** The report of `values` made at `made`, if the ledger allows: randomised now (a memoised one
   * once Web Crypto's HMAC is done) and handed to the sender. */
  private make(values: unknown, made: number): RecordResult {
    const [schema, truth] = this.source.fitting(values);
    const window = windowOf(made, schema.window);
    const reason = this.ledger.claim(schema.name, window, schema.epsilon);
    if (reason) return result(reason, window);
    this.encoding++;
    encodeWithPermanent(schema, truth, window, SYSTEM, this.secret)
      .then((report) => this.sender.put(report), (e) => {
        this.ledger.release(schema.name, window);
        this.settings.logger.error(`no report of window ${window}: ${shown((e as Error)?.message ?? e)}`);
      })
      .finally(() => {
        this.encoding--;
        this.waiters.changed();
      });
    return result("queued", window);
  }

  /** Called by the sender each turn, and by close(): randomise pending records once the schema is
   * known; drop expired ones, and all of them once there can be no schema (refused, no storage,
   * or the client stopped before one came). */
  private resolvePending(): void {
    const oldest = Date.now() - this.settings.pendingTimeoutMs;
    const hopeless = this.source.refusal ?? this.failure ?? (this.sender.stopped ? "the client closed first" : undefined);
    let expired = 0;
    this.pending = this.pending.filter(({ values, made }) => {
      if (hopeless || made <= oldest) {
        expired++;
        return false;
      }
      if (!this.usable) return true;
      try {
        const outcome = this.make(values, made);
        if (!outcome.queued) this.settings.logger.info(`a pending record was not sent: ${outcome.reason}`);
      } catch (e) {
        this.settings.logger.warn(`dropped a pending record: ${(e as Error).message}`);
      }
      return false;
    });
    if (expired) {
      const why = hopeless ?? `no usable schema within pendingTimeoutMs (${this.settings.pendingTimeoutMs} ms)`;
      this.settings.logger.warn(`dropped ${expired} pending record(s): ${why}`);
    }
    this.waiters.changed();
  }
}

/** The page's events the sender acts on, where there is a page (or a worker): `pagehide` or the
 * page hidden (it may be closing: send what is stored now, and what is stored next), `pageshow` or
 * the page visible again, `online` (send what waits). */
class PageEvents {
  private readonly target = typeof addEventListener === "function" ? globalThis : undefined;
  private readonly document = (globalThis as { document?: Document }).document;
  private readonly onVisibility: (event: Event) => void;
  private readonly onOnline: () => void;

  constructor(sender: Sender) {
    this.onVisibility = (event) => {
      const hidden = event.type === "pagehide" || (event.type === "visibilitychange" && this.document?.hidden);
      if (hidden) sender.hide();
      else sender.show();
    };
    this.onOnline = () => sender.online();
    this.target?.addEventListener("online", this.onOnline);
    if (this.target && this.document) {
      for (const type of ["pagehide", "pageshow"]) this.target.addEventListener(type, this.onVisibility);
      this.document.addEventListener("visibilitychange", this.onVisibility);
    }
  }

  stop(): void {
    this.target?.removeEventListener("online", this.onOnline);
    for (const type of ["pagehide", "pageshow"]) this.target?.removeEventListener(type, this.onVisibility);
    this.document?.removeEventListener("visibilitychange", this.onVisibility);
  }
}
