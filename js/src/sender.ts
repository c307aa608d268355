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
 * When a page is hidden or closed, what is stored (its window spent by the store's check-and-spend,
 * so never a second report of a window another tab spent) goes out with fetch keepalive (a text/plain
 * body: no preflight), each batch under 60 KiB less what is in flight (the page's 64 KiB keepalive
 * quota), a plain fetch as fallback; a batch stays in storage until an answer is read.
 */

import { request, shown, type Answer } from "./http.js";
import type { Ledger } from "./ledger.js";
import type { Report } from "./reports.js";
import { isRetryable, retryAfter } from "./retry.js";
import type { SchemaSource } from "./schema-source.js";
import type { Settings } from "./options.js";
import type { Row, Store } from "./storage.js";

const MAX_BATCH_WINDOWS = 32; // the server refuses a batch naming more
export const KEEPALIVE_BUDGET = 60 * 1024;

/** What the client sees of its sender. */
export interface Sender {
  /** Work the client does outside the sender (pending records, memoised encodings). */
  busy: number;
  stopped: boolean;
  put(report: Report): void;
  /** Run a turn after `ms` (at once when stopping). */
  wake(ms?: number): void;
  /** True once settled, false after `ms` (its sleeps keep a Node process alive, as asked). */
  waitSettled(ms: number): Promise<boolean>;
  /** The page is being hidden or closed: send what is queued now, with keepalive. */
  sendNow(): void;
}

/** The sender, as a closure: its state is local variables (shorter in the browser bundle than members). */
export function sender(s: Settings, source: SchemaSource, ledger: Ledger, storeP: Promise<Store>, beforeTurn: () => void): Sender {
  let fresh: Report[] = []; // made, not yet in storage as last read
  // The oldest stored rows, as last read: what a closing page sends. Only stored reports, whose
  // window the store's check-and-spend has taken: another tab may have spent it since this one's
  // ledger was read, so a fresh report waits for that check (milliseconds) or for the next visit.
  let mirror: Row[] = [];
  const acked = new Set<string>(); // ids acknowledged while their rows may still be stored
  // Ids in a closing page's requests. A turn's plain fetch is not counted: the page cancels it if it
  // closes, and the next batch is made only once the turn has its answer.
  const inflight = new Set<string>();
  let keepaliveLeft = KEEPALIVE_BUDGET; // of the page's keepalive quota, less what is in flight
  let attempt = 0;
  let deliverDue = 0;
  let lingerUntil = 0; // a new batch waits lingerMs for company (stored at once all the same)
  let persisting: Promise<unknown> = Promise.resolve(); // the last store of fresh reports begun
  let schemaDue = source.fetched ? 0 : Infinity;
  let schemaAttempt = 0;
  let batchLimit = s.maxBatch;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let running = false;
  let wakeAt = Infinity; // when a wake() during a turn asked for the next one
  let stored = -1; // rows in the mirror (0: none stored) as last read; -1 before the first read
  const log = s.logger;
  // Full jitter (retry.ts). Math.random is fine here: the wait is no secret (the coins never use it).
  const delay = (attempt: number) => Math.random() * Math.min(s.backoffCapMs, s.backoffBaseMs * 2 ** Math.min(attempt, 60));
  const dropped = (n: number, why: string) => log.warn(`dropped ${n} report(s): ${why}`);

  const self: Sender = {
    busy: 0,
    stopped: false,
    put(report) {
      if (!fresh.length && stored < 1) lingerUntil = Date.now() + s.lingerMs;
      fresh.push(report);
      // Stored now, even while a turn waits on the network (a closing page sends only what is
      // stored); then a turn when the batch is due (a failure: the turn retries and says why).
      persisted().then(() => wake(Math.max(deliverDue, lingerUntil) - Date.now()));
    },
    wake,
    async waitSettled(ms) {
      const deadline = Date.now() + ms;
      lingerUntil = 0;
      wake();
      while (self.busy || fresh.length || stored || running) {
        if (Date.now() >= deadline) return false;
        await new Promise((r) => setTimeout(r, Math.min(20, deadline - Date.now())));
      }
      return true;
    },
    // A page that lives on sends nothing twice: acknowledged ids are removed rather than resent.
    // Reports in a plain fetch go again with keepalive: a closing page cancels that fetch.
    sendNow() {
      const going = mirror.filter(({ report: { id } }) => !(acked.has(id) || inflight.has(id)));
      for (;;) {
        const [part, size] = batch(going, keepaliveLeft);
        if (!part.length || size > keepaliveLeft) return; // the quota is spent: the rest waits in storage
        going.splice(0, part.length);
        keepaliveLeft -= size;
        part.forEach((r) => inflight.add(r.report.id));
        const done = () => {
          keepaliveLeft += size;
          part.forEach((r) => inflight.delete(r.report.id));
        };
        send(part, true).then(done, done); // a store that fails to remove: the rows are sent again (ids dedupe)
      }
    },
  };

  function wake(ms = 0): void {
    if (running) {
      wakeAt = Math.min(wakeAt, Date.now() + ms);
      return;
    }
    clearTimeout(timer);
    timer = setTimeout(turn, ms); // stopped too: a failing store or server is retried after backoff, never in a loop
    // A Node process is not kept alive by retries alone: flush() and close() wait when asked.
    if (LDP_FULL) (timer as { unref?: () => void }).unref?.();
  }

  async function turn(): Promise<void> {
    running = true;
    try {
      const store = await storeP;
      beforeTurn();
      await persisted();
      // The schema when due, unless stopped with nothing left to encode (as when the next turn is).
      if (Date.now() >= (self.stopped && !self.busy ? Infinity : schemaDue)) {
        const answered = await source.refresh(s.endpoint, s.fetch, s.requestTimeoutMs, store);
        schemaDue = Date.now() + (answered ? s.schemaRefreshMs : delay(schemaAttempt++));
        if (answered) schemaAttempt = 0;
        beforeTurn(); // pending records, randomised now, are stored by put()
      }
      if (Date.now() >= (stored > 0 ? Math.max(deliverDue, lingerUntil) : Infinity)) { // when due, if anything is stored
        // Rows a closing page had acknowledged whose removal failed go first.
        await settle(mirror.filter((r) => acked.has(r.report.id)));
        const [rows] = batch(mirror.filter((r) => !acked.has(r.report.id)), s.maxBatchBytes);
        if (rows.length) await send(rows, false);
        await persisted();
      }
    } catch (e) {
      failed(e);
    }
    running = false;
    // Due: delivery when anything is stored, or a retry of storing what is fresh.
    const next = Math.min(wakeAt, self.stopped && !self.busy ? Infinity : schemaDue, stored > 0 || fresh.length ? Math.max(deliverDue, lingerUntil) : Infinity,
      self.busy ? Date.now() + 1000 : Infinity);
    wakeAt = Infinity;
    if (next < Infinity) wake(next - Date.now()); // one past due: setTimeout takes a negative delay as 0
  }

  /** A bug or a broken store must never reach the app: said, and retried after backoff (reports wait). */
  function failed(e: unknown): void {
    log.error(shown((e as Error)?.message ?? e));
    deliverDue = Date.now() + delay(attempt++);
  }

  /** persist(), one after another (record() and turns both store). */
  function persisted(): Promise<unknown> {
    return (persisting = persisting.then(persist));
  }

  async function persist(): Promise<void> {
    const store = await storeP;
    const reports = fresh.slice();
    let appended = 0;
    try {
      if (reports.length) {
        const { refused, evicted } = await store.append(reports, { maxReports: s.maxOutbox, maxBytes: s.maxOutboxBytes, perDay: s.maxEpsilonPerDay });
        appended = reports.length;
        if (refused.length) {
          // Another tab or process spent first: learn what it spent.
          dropped(refused.length, refused[0]);
          ledger.learn(reports[0].schema, await store.ledger(reports[0].schema));
        }
        if (evicted) dropped(evicted, "outbox full");
      }
      mirror = await store.peek(s.maxBatch);
      stored = mirror.length;
    } catch (e) {
      failed(e);
    }
    // Kept unless appended (if the append failed, e.g. storage full: retried), within the outbox's bound.
    fresh = fresh.slice(appended || -s.maxOutbox);
  }

  /** The oldest rows as one batch within the count, bytes and windows bounds (at least one row),
   * stopping at one in a keepalive request; and its size. */
  function batch(rows: Row[], maxBytes: number): [Row[], number] {
    const out: Row[] = [];
    const windows = new Set<string>();
    let bytes = 16;
    for (const row of rows) {
      if (out.length >= batchLimit || inflight.has(row.report.id) || (out.length && bytes + row.bytes > maxBytes)) break;
      windows.add(row.report.window);
      if (windows.size > MAX_BATCH_WINDOWS) break;
      out.push(row);
      bytes += row.bytes + 1;
    }
    return [out, bytes];
  }

  /** Rows settled: never sent again, and gone from storage. */
  async function settle(rows: Row[]): Promise<void> {
    rows.forEach((r) => acked.add(r.report.id));
    if (rows.length) await (await storeP).remove(rows.map((r) => r.seq));
  }

  /** Post one batch and act on the answer. `keepalive`: the page is closing (text/plain, no
   * preflight; a plain fetch if the quota says no; a failure simply leaves the batch in storage). */
  async function send(rows: Row[], keepalive: boolean): Promise<void> {
    const body = JSON.stringify({ reports: rows.map((r) => r.report) });
    // `k` unset: keepalive false, fetch's default.
    const post = (k?: boolean) => request(`${s.endpoint}/api/v1/reports`, {
      method: "POST", body, headers: { "Content-Type": keepalive ? "text/plain;charset=UTF-8" : "application/json" },
      timeoutMs: s.requestTimeoutMs, fetch: s.fetch, keepalive: k,
    });
    /** The next try after full-jitter backoff, never sooner than `floor` ms (the server's Retry-After). */
    const retry = (why: string, floor = 0) => {
      if (keepalive) return;
      const wait = Math.max(floor, delay(attempt++));
      deliverDue = Date.now() + wait;
      log.warn(`delivery failed (${why}); retry in ${wait | 0} ms`);
    };
    let answer: Answer;
    try {
      // fetch() starts here, synchronously: a closing page's request is on its way before this returns.
      answer = await (keepalive ? post(true).catch(() => post()) : post());
    } catch (e) {
      return retry(shown((e as Error)?.name));
    }
    const { status, body: b } = answer as { status: number; body: any };
    // Anything but the aggregator's acknowledgement (a 2xx from a captive portal or a proxy proves nothing).
    if (!(status >= 200 && status < 300 && Number.isInteger(b?.accepted) && Number.isInteger(b?.duplicates))) {
      if (isRetryable(status)) return retry(`HTTP ${status}`, retryAfter(answer.headers));
      // A 400 naming details[].index: those reports, with the server's reasons (escaped).
      const bad = new Map<Row, string>();
      for (const d of Array.isArray(b?.details) ? b.details : []) {
        const i = d?.index;
        if (Number.isInteger(i) && rows[i]) bad.set(rows[i], `[${i}] ${shown(d.field ?? "", 80)}: ${shown(d.message ?? "", 200)}`);
      }
      if ((status === 400 || status === 413) && !bad.size && rows.length > 1) {
        batchLimit = rows.length >> 1; // the batch may be what is too big: halved, sent again
        rows = [];
      } else {
        rows = bad.size ? [...bad.keys()] : rows;
        dropped(rows.length, `HTTP ${status}: ${bad.size ? [...bad.values()].join("; ") : shown(b?.error ?? "", 500)}`);
      }
    }
    attempt = 0; // the server answered
    await settle(rows);
  }

  return self;
}
