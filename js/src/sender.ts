/**
 * The sender: the only link between record() and storage and the network (as client/sender.py,
 * on the event loop instead of a thread). Each turn it stores new reports (the ledger's
 * check-and-spend on storage), fetches the schema when due, and posts the oldest reports as one
 * batch bounded in count, bytes and windows:
 *
 * - 2xx with the aggregator's {accepted, duplicates}: removed (ids make a resend harmless);
 * - network error, 5xx, 408, 429, 401/403/404/405: retried after full-jitter backoff, Retry-After a floor;
 * - 400 naming details[].index: those reports dropped, the rest sent again; 400/413 otherwise: the
 *   batch halved; any other answer: the batch dropped with a warning (server text escaped).
 *
 * While the platform says it is offline (a browser's navigator.onLine) it neither posts nor spends
 * retries; back online, what waits goes out at once.
 *
 * When a page is hidden or closed, what is stored (its window spent by the store's check-and-spend,
 * so never a second report of a window another tab spent) goes out with fetch keepalive (a text/plain
 * body: no preflight), each batch under 60 KiB less what is in flight (the page's 64 KiB keepalive
 * quota), a plain fetch as fallback; a batch stays in storage until an answer is read.
 *
 * With a relay (the `relay` option), each report goes alone, by the relay module's route
 * (src/relay-hook.ts, src/relay/route.ts), which says what becomes of it; the schema comes from the
 * relay. Nothing is posted to the aggregator: without the module, reports wait. The route seals
 * ahead what a closing page would send, each time the outbox is read (not awaited).
 */

import { answerSaid, KEEPALIVE_BUDGET, request, shown, type Answer } from "./http.js";
import type { Ledger } from "./ledger.js";
import type { Settings } from "./options.js";
import type { Report } from "./reports.js";
import { relayModule, type RelayRoute } from "./relay-hook.js";
import { backoff, isRetryable, retryAfter } from "./retry.js";
import { parseSchema } from "./schema.js";
import type { SchemaSource } from "./schema-source.js";
import type { Row, Store } from "./storage.js";

const MAX_BATCH_WINDOWS = 32; // the server refuses a batch naming more
const BATCH_OVERHEAD_BYTES = 16; // `{"reports":[` and `]}`, with room
// While records wait in memory (for the schema, or for an HMAC), turns come at least this often.
const PENDING_TURN_MS = 1000;

/** What the sender needs of the client that owns it. */
export interface Owner {
  /** Records the client holds outside the sender (pending ones, memoised encodings under way). */
  waiting(): number;
  /** Called at the start of each turn: randomise pending records once a schema is usable. */
  beforeTurn(): void;
  /** The sender's state changed (for the client's waiters). */
  changed(): void;
}

/** False only where the platform says it is offline (a browser's navigator.onLine; Node never says). */
function isOffline(): boolean {
  return (globalThis as { navigator?: { onLine?: boolean } }).navigator?.onLine === false;
}

export class Sender {
  /** Set by close(): no schema refresh once nothing is left to encode. */
  stopped = false;
  /** The page is hidden or closing: what is stored from now on goes out at once, with keepalive. */
  private hidden = false;
  private fresh: Report[] = []; // made, not yet in storage as last read
  // The oldest stored rows, as last read: what a closing page sends. Only stored reports, whose
  // window the store's check-and-spend has taken: another tab may have spent it since this one's
  // ledger was read, so a fresh report waits for that check (milliseconds) or for the next visit.
  private mirror: Row[] = [];
  private stored = -1; // rows in the mirror (0: none stored) as last read; -1 before the first read
  private readonly acked = new Set<string>(); // ids acknowledged while their rows may still be stored
  // Ids in a closing page's requests. A turn's plain fetch is not counted: the page cancels it if it
  // closes, and the next batch is made only once the turn has its answer.
  private readonly inflight = new Set<string>();
  private keepaliveLeft = KEEPALIVE_BUDGET; // of the page's keepalive quota, less what is in flight
  private attempt = 0; // failed deliveries in a row
  private deliverDue = 0;
  private lingerUntil = 0; // a new batch waits lingerMs for company (stored at once all the same)
  private persisting: Promise<void> = Promise.resolve(); // the last store of fresh reports begun
  private sealing: Promise<void> = Promise.resolve(); // the relay route's last sealing ahead begun
  private schemaDue: number;
  private schemaAttempt = 0; // failed schema fetches in a row
  private batchLimit: number;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private timerAt = Infinity; // when the timer runs the next turn
  private running = false;
  private wakeAt = Infinity; // when a wake() during a turn asked for the next one
  private readonly reportsUrl: string;
  private route: RelayRoute | undefined; // with a relay, once its module is loaded
  private routeMissing = false; // the log said the relay module is not loaded

  constructor(private readonly s: Settings, private readonly source: SchemaSource, private readonly ledger: Ledger,
    private readonly store: Promise<Store>, private readonly owner: Owner) {
    this.schemaDue = source.fetched ? 0 : Infinity;
    // Through a relay each report goes alone: two in one request would tell the aggregator they come from one device.
    this.batchLimit = s.relay ? 1 : s.maxBatch;
    if (s.relay) this.relayRoute(); // now: it reads its keys from the store before a closing page needs them
    this.reportsUrl = `${s.endpoint}/api/v1/reports`;
  }

  /** Nothing is left to store or deliver, and no turn runs. */
  get settled(): boolean {
    return !this.owner.waiting() && !this.fresh.length && !this.stored && !this.running;
  }

  /** A report to store at once (even while a turn waits on the network: a closing page sends only
   * what is stored), then to deliver when its batch is due. */
  put(report: Report): void {
    if (!this.fresh.length && this.stored < 1) this.lingerUntil = Date.now() + this.s.lingerMs;
    this.fresh.push(report);
    // (A failure to store: the turn retries and says why.)
    this.persisted().then(() => this.wake(Math.max(this.deliverDue, this.lingerUntil) - Date.now()));
  }

  /** Run a turn within `ms` (a negative delay is 0); a turn due sooner stays as it is. */
  wake(ms = 0): void {
    const at = Date.now() + Math.max(0, ms);
    if (this.running) {
      this.wakeAt = Math.min(this.wakeAt, at);
      return;
    }
    if (this.timerAt <= at) return;
    clearTimeout(this.timer);
    this.timerAt = at;
    // Stopped too: a failing store or server is retried after backoff, never in a loop.
    this.timer = setTimeout(() => {
      this.timerAt = Infinity;
      this.turn();
    }, at - Date.now());
    // Retries alone do not keep a Node process alive: flush() and close() wait when asked.
    (this.timer as { unref?: () => void }).unref?.();
  }

  /** Send what is stored without waiting for a linger (flush(), close()). */
  hurry(): void {
    this.lingerUntil = 0;
    this.wake();
  }

  /** Back online: what waits goes out now, its backoff forgotten. */
  online(): void {
    this.attempt = 0;
    this.deliverDue = 0;
    if (this.schemaAttempt) this.schemaDue = 0;
    this.schemaAttempt = 0;
    this.wake();
  }

  /** The page is hidden or closing (it may never run again): what is stored goes out now, and what
   * is recorded meanwhile (at pagehide, say) as soon as it is stored. */
  hide(): void {
    this.hidden = true;
    this.sendNow();
  }

  /** The page is shown again: back to batches on the sender's turns. */
  show(): void {
    this.hidden = false;
  }

  /** Send what is stored now, with keepalive. A page that lives on sends nothing twice:
   * acknowledged ids are removed rather than resent. Reports in a plain fetch go again with
   * keepalive: a closing page cancels that fetch. */
  private sendNow(): void {
    if (isOffline()) return; // they wait in storage for the next visit
    const going = this.unsent();
    for (;;) {
      const [part, jsonSize] = this.batch(going, this.keepaliveLeft);
      if (!part.length) return;
      const size = this.s.relay ? this.relayRoute()?.bytes(part[0]) ?? Infinity : jsonSize;
      if (size > this.keepaliveLeft) return; // the quota is spent (or the relay cannot take it now): the rest waits in storage
      going.splice(0, part.length);
      this.keepaliveLeft -= size;
      part.forEach((r) => this.inflight.add(r.report.id));
      const done = () => {
        this.keepaliveLeft += size;
        part.forEach((r) => this.inflight.delete(r.report.id));
      };
      this.send(part, true).then(done, done); // a store that fails to remove: the rows are sent again (ids dedupe)
    }
  }

  /** The stored rows a closing page would send: neither acknowledged nor in its requests. */
  private unsent(): Row[] {
    return this.mirror.filter(({ report: { id } }) => !(this.acked.has(id) || this.inflight.has(id)));
  }

  private async turn(): Promise<void> {
    this.running = true;
    const offline = isOffline(); // then nothing is posted and no retry spent: `online` wakes the sender
    try {
      const store = await this.store;
      this.owner.beforeTurn();
      await this.persisted();
      if (!offline && Date.now() >= this.schemaDueNow()) {
        // With a relay, the schema comes from the relay: the aggregator does not see who asks.
        const answered = await this.source.refresh(this.s.relay ?? this.s.endpoint, this.s.fetch, this.s.requestTimeoutMs, store);
        this.schemaDue = Date.now() + (answered ? this.s.schemaRefreshMs : this.backoff(this.schemaAttempt++));
        if (answered) this.schemaAttempt = 0;
        this.owner.beforeTurn(); // pending records, randomised now, are stored by put()
      }
      if (!offline && Date.now() >= this.deliveryDue()) {
        // Rows a closing page had acknowledged whose removal failed go first.
        await this.settle(this.mirror.filter((r) => this.acked.has(r.report.id)));
        const [rows] = this.batch(this.mirror.filter((r) => !this.acked.has(r.report.id)), this.s.maxBatchBytes);
        if (rows.length) await this.send(rows, false);
        await this.persisted();
      }
    } catch (e) {
      this.failed("a turn of the sender", e);
    }
    this.running = false;
    const next = Math.min(this.wakeAt, offline ? Infinity : Math.min(this.schemaDueNow(), this.deliveryDue(this.fresh.length > 0)),
      this.owner.waiting() ? Date.now() + PENDING_TURN_MS : Infinity);
    this.wakeAt = Infinity;
    if (next < Infinity) this.wake(next - Date.now());
    this.owner.changed();
  }

  /** When the schema is next fetched: never once stopped with nothing left to encode. */
  private schemaDueNow(): number {
    return this.stopped && !this.owner.waiting() ? Infinity : this.schemaDue;
  }

  /** When the next batch is due: never when nothing is stored (or, with `fresh`, waits to be). */
  private deliveryDue(fresh = false): number {
    return this.stored > 0 || fresh ? Math.max(this.deliverDue, this.lingerUntil) : Infinity;
  }

  private backoff(attempt: number): number {
    return backoff(attempt, this.s.backoffBaseMs, this.s.backoffCapMs);
  }

  /** A bug or a broken store must never reach the app: `what` failed is said, and retried after
   * backoff (reports wait). */
  private failed(what: string, e: unknown): void {
    const wait = this.backoff(this.attempt++);
    this.deliverDue = Date.now() + wait;
    this.s.logger.error(`${what} failed: ${shown((e as Error)?.message ?? e)}; retry in ${Math.round(wait)} ms`);
  }

  private dropped(n: number, why: string): void {
    this.s.logger.warn(`dropped ${n} report(s): ${why}`);
  }

  /** persist(), one after another (record() and turns both store). */
  private persisted(): Promise<void> {
    return (this.persisting = this.persisting.then(() => this.persist()));
  }

  private async persist(): Promise<void> {
    const reports = this.fresh.slice();
    let appended = 0;
    const store = await this.store; // never rejected: the client falls back to memory
    try {
      if (reports.length) {
        const { refused, evicted } = await store.append(reports, { maxReports: this.s.maxOutbox, maxBytes: this.s.maxOutboxBytes, perDay: this.s.maxEpsilonPerDay });
        appended = reports.length;
        if (refused.length) {
          // Another tab or process spent first: learn what it spent.
          this.dropped(refused.length, refused[0]);
          this.ledger.learn(reports[0].schema, await store.ledger(reports[0].schema));
        }
        if (evicted) this.dropped(evicted, `the outbox is full (maxOutbox ${this.s.maxOutbox}, maxOutboxBytes ${this.s.maxOutboxBytes}): the oldest went`);
      }
      this.mirror = await store.peek(this.s.maxBatch);
      this.stored = this.mirror.length;
      // Not awaited: records are stored while Web Crypto works (or, in a page that is going, never answers).
      if (this.s.relay) this.sealing = this.sealing.then(() => this.relayRoute()?.seal(this.unsent()));
      if (appended && this.hidden) this.sendNow();
    } catch (e) {
      this.failed(reports.length ? `storing ${reports.length} report(s) in the ${store.kind} store` : `reading the ${store.kind} store's outbox`, e);
    }
    // Kept unless appended (if the append failed, e.g. storage full: retried), within the outbox's bound.
    this.fresh = appended ? this.fresh.slice(appended) : this.fresh.slice(-this.s.maxOutbox);
    this.owner.changed();
  }

  /** The oldest rows as one batch within the count, bytes and windows bounds (at least one row),
   * stopping at one in a keepalive request; and its size. */
  private batch(rows: Row[], maxBytes: number): [Row[], number] {
    const out: Row[] = [];
    const windows = new Set<string>();
    let bytes = BATCH_OVERHEAD_BYTES;
    for (const row of rows) {
      if (out.length >= this.batchLimit || this.inflight.has(row.report.id) || (out.length && bytes + row.bytes > maxBytes)) break;
      windows.add(row.report.window);
      if (windows.size > MAX_BATCH_WINDOWS) break;
      out.push(row);
      bytes += row.bytes + 1; // and a comma
    }
    return [out, bytes];
  }

  /** Rows settled: never sent again, and gone from storage. */
  private async settle(rows: Row[]): Promise<void> {
    rows.forEach((r) => this.acked.add(r.report.id));
    if (rows.length) await (await this.store).remove(rows.map((r) => r.seq));
  }

  /** The next try after full-jitter backoff, never sooner than `floor` ms (the server's
   * Retry-After); offline, no retry is spent: the `online` event wakes the sender. */
  private retry(why: string, floor = 0): void {
    if (isOffline()) {
      this.s.logger.warn(`${why}; offline: the reports wait for the network`);
      return;
    }
    const wait = Math.max(floor, this.backoff(this.attempt++));
    this.deliverDue = Date.now() + wait;
    this.s.logger.warn(`${why}; retry in ${Math.round(wait)} ms`);
  }

  /** Post one batch and act on the answer. `keepalive`: the page is closing (text/plain, no
   * preflight; a plain fetch if the quota says no; a failure simply leaves the batch in storage). */
  private async send(rows: Row[], keepalive: boolean): Promise<void> {
    if (this.s.relay) return this.relayed(rows[0], keepalive);
    const body = JSON.stringify({ reports: rows.map((r) => r.report) });
    const post = (withKeepalive: boolean) => request(this.reportsUrl, {
      method: "POST", body, headers: { "Content-Type": keepalive ? "text/plain;charset=UTF-8" : "application/json" },
      timeoutMs: this.s.requestTimeoutMs, fetch: this.s.fetch, keepalive: withKeepalive,
    });
    let answer: Answer;
    try {
      // fetch() starts here, synchronously: a closing page's request is on its way before this returns.
      answer = await (keepalive ? post(true).catch(() => post(false)) : post(false));
    } catch (e) {
      if (!keepalive) this.retry((e as Error).message);
      return;
    }
    const said = `POST ${this.reportsUrl} answered ${answerSaid(answer)}`;
    const b = answer.body as { accepted?: unknown; duplicates?: unknown; details?: unknown } | undefined;
    // Anything but the aggregator's acknowledgement (a 2xx from a captive portal or a proxy proves nothing).
    const acknowledged = answer.status >= 200 && answer.status < 300 && Number.isInteger(b?.accepted) && Number.isInteger(b?.duplicates);
    if (!acknowledged) {
      if (isRetryable(answer.status)) {
        if (!keepalive) this.retry(said, retryAfter(answer.headers));
        return;
      }
      rows = this.refusedRows(rows, answer, said);
    }
    this.attempt = 0; // the server answered
    await this.settle(rows);
  }

  /** The relay module's route for this client, once the module is loaded (src/relay-hook.ts). */
  private relayRoute(): RelayRoute | undefined {
    return (this.route ??= relayModule()?.({ settings: this.s, store: this.store, schemaOf: (report) => this.source.ofVersion(report.version), parseSchema }));
  }

  /** Send one report through the relay and act on the route's verdict. Without the relay module the
   * report waits (said once), checked again after the longest backoff: never posted around the relay. */
  private async relayed(row: Row, keepalive: boolean): Promise<void> {
    const route = this.relayRoute();
    const verdict = route ? await route.send(row, keepalive) : { after: this.s.backoffCapMs };
    if (!route && !this.routeMissing) {
      this.routeMissing = true;
      this.s.logger.warn(`the relay module is not loaded (import "ldp-telemetry/relay", or ldp-telemetry-relay.min.js): reports wait in the outbox`);
    }
    if (verdict.settled) {
      this.attempt = 0;
      return this.settle([row]);
    }
    if (keepalive) return;
    if (verdict.retry) this.retry(verdict.retry, verdict.after);
    else this.deliverDue = Date.now() + (verdict.after ?? 0);
  }

  /** The rows a final refusal settles (dropped with a warning): those a 400 names in details[].index,
   * with the server's reasons (escaped); none when a 400 or 413 names none and the batch can be
   * halved (it may be what is too big: its rows are sent again in smaller batches); else all. */
  private refusedRows(rows: Row[], answer: Answer, said: string): Row[] {
    const details = (answer.body as { details?: unknown } | undefined)?.details;
    const named = new Map<Row, string>();
    for (const d of Array.isArray(details) ? details : []) {
      const i = d?.index;
      if (Number.isInteger(i) && rows[i]) named.set(rows[i], `[${i}] ${shown(d.field ?? "", 80)}: ${shown(d.message ?? "", 200)}`);
    }
    if ((answer.status === 400 || answer.status === 413) && !named.size && rows.length > 1) {
      this.batchLimit = Math.floor(rows.length / 2);
      return [];
    }
    if (!named.size) {
      this.dropped(rows.length, said);
      return rows;
    }
    this.dropped(named.size, `${said}: ${[...named.values()].join("; ")}`);
    return [...named.keys()];
  }
}
