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
 * When a page is hidden or closed, what is queued goes out with fetch keepalive (a text/plain
 * body: no preflight), each batch under 60 KiB less what is in flight (the page's 64 KiB keepalive
 * quota), a plain fetch as fallback; a batch stays in storage until an answer is read.
 */

import { request, shown, type Answer } from "./http.js";
import type { Ledger } from "./ledger.js";
import type { Report } from "./reports.js";
import { backoffDelay, isRetryable, retryAfter } from "./retry.js";
import type { SchemaSource } from "./schema-source.js";
import type { Settings } from "./options.js";
import { UTF8, type Row, type Store } from "./storage.js";

const MAX_BATCH_WINDOWS = 32; // the server refuses a batch naming more
export const KEEPALIVE_BUDGET = 60 * 1024;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class Sender {
  private fresh: Report[] = []; // made, not yet in storage
  private storing: Report[] = []; // being written to storage now (a closing page must still see them)
  private mirror: Row[] = []; // the oldest stored rows, as last read (what a closing page can send at once)
  private acked = new Set<string>(); // ids acknowledged while their rows may still be stored
  private inflight = new Set<string>();
  private keepaliveBytes = 0;
  private attempt = 0;
  private deliverDue = 0;
  private schemaDue: number;
  private schemaAttempt = 0;
  private batchLimit: number;
  private timer?: ReturnType<typeof setTimeout>;
  private running = false;
  private wakeAt = Infinity; // when a wake() during a turn asked for the next one
  private stored = -1; // rows in storage as last counted; -1 before the first count
  busy = 0; // work the client does outside the sender (pending records, memoised encodings)
  stopped = false;

  constructor(private readonly s: Settings, private readonly source: SchemaSource, private readonly ledger: Ledger,
    private readonly store: Promise<Store>, private readonly beforeTurn: () => void) {
    this.batchLimit = s.maxBatch;
    this.schemaDue = source.fetched ? 0 : Infinity;
  }

  put(report: Report): void {
    this.fresh.push(report);
    this.wake(this.s.lingerMs);
  }

  get settled(): boolean {
    return !this.busy && !this.fresh.length && !this.storing.length && !this.stored && !this.running;
  }

  /** Run a turn after `ms` (at once when stopping). */
  wake(ms = 0): void {
    if (this.running) {
      this.wakeAt = Math.min(this.wakeAt, Date.now() + ms);
      return;
    }
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.turn(), this.stopped ? 0 : ms);
    // A Node process is not kept alive by retries alone: flush() and close() wait when asked.
    (this.timer as { unref?: () => void }).unref?.();
  }

  /** True once settled, false after `ms` (its sleeps keep a Node process alive, as asked). */
  async waitSettled(ms: number): Promise<boolean> {
    const deadline = Date.now() + ms;
    this.wake();
    while (!this.settled) {
      if (Date.now() >= deadline) return false;
      await sleep(Math.min(20, deadline - Date.now()));
    }
    return true;
  }

  private async turn(): Promise<void> {
    this.running = true;
    try {
      const store = await this.store;
      this.beforeTurn();
      await this.persist(store);
      if (Date.now() >= this.schemaDue && !(this.stopped && !this.busy)) {
        const answered = await this.source.refresh(this.s.endpoint, this.s.fetch, this.s.requestTimeoutMs, store);
        this.schemaDue = Date.now() + (answered ? this.s.schemaRefreshMs : this.delay(this.schemaAttempt++));
        if (answered) this.schemaAttempt = 0;
        this.beforeTurn();
        await this.persist(store);
      }
      if (this.stored > 0 && Date.now() >= this.deliverDue) await this.deliver(store);
    } catch (e) {
      // A bug or a broken store must never reach the app; reports wait in storage.
      this.s.logger.error(shown((e as Error)?.message ?? e));
      this.deliverDue = Date.now() + this.delay(this.attempt++);
    }
    this.running = false;
    const schema = this.stopped && !this.busy ? Infinity : this.schemaDue;
    const next = Math.min(this.wakeAt, schema, this.stored > 0 ? this.deliverDue : Infinity, this.busy ? Date.now() + 1000 : Infinity);
    this.wakeAt = Infinity;
    if (next < Infinity) this.wake(Math.max(0, next - Date.now()));
  }

  private delay(attempt: number): number {
    return backoffDelay(attempt, this.s.backoffBaseMs, this.s.backoffCapMs);
  }

  private async persist(store: Store): Promise<void> {
    const reports = (this.storing = this.fresh);
    this.fresh = [];
    if (reports.length) {
      try {
        const { refused, evicted } = await store.append(reports, { maxReports: this.s.maxOutbox, maxBytes: this.s.maxOutboxBytes, perDay: this.s.maxEpsilonPerDay });
        if (refused.length) {
          // Another tab or process spent first: learn what it spent.
          this.s.logger.warn(`dropped ${refused.length} report(s): ${refused[0]}`);
          this.ledger.learn(reports[0].schema, await store.ledger(reports[0].schema));
        }
        if (evicted) this.s.logger.warn(`outbox full: dropped ${evicted} report(s)`);
      } catch (e) {
        this.fresh = reports.concat(this.fresh).slice(-this.s.maxOutbox); // e.g. storage full: kept, retried
        throw e;
      } finally {
        this.storing = [];
      }
    }
    this.mirror = await store.peek(this.s.maxBatch);
    this.stored = await store.count();
  }

  /** The oldest rows as one batch within the count, bytes and windows bounds (at least one row). */
  private batch(rows: Row[], maxBytes: number): Row[] {
    const out: Row[] = [];
    const windows = new Set<string>();
    let bytes = 16;
    for (const row of rows) {
      if (out.length >= this.batchLimit || this.inflight.has(row.report.id) || (out.length && bytes + row.bytes > maxBytes)) break;
      windows.add(row.report.window);
      if (windows.size > MAX_BATCH_WINDOWS) break;
      out.push(row);
      bytes += row.bytes + 1;
    }
    return out;
  }

  private async deliver(store: Store): Promise<void> {
    const done = this.mirror.filter((r) => this.acked.has(r.report.id));
    if (done.length) await store.remove(done.map((r) => r.seq));
    const rows = this.batch(this.mirror.filter((r) => !this.acked.has(r.report.id)), this.s.maxBatchBytes);
    if (rows.length) {
      const floor = await this.send(rows, false);
      if (floor === undefined) this.attempt = 0;
      else {
        const delay = Math.max(floor, this.delay(this.attempt++));
        this.deliverDue = Date.now() + delay;
        this.s.logger.warn(`delivery failed (${this.why}); retry in ${delay | 0} ms`);
      }
    }
    await this.persist(store);
  }

  private why = "";

  /** Post one batch: undefined when it is settled; else the least ms to wait before a retry.
   * `keepalive`: the page is closing (text/plain, no preflight; a plain fetch if the quota says no). */
  private async send(rows: Row[], keepalive: boolean): Promise<number | undefined> {
    const body = JSON.stringify({ reports: rows.map((r) => r.report) });
    const post = (k: boolean) => request(`${this.s.endpoint}/api/v1/reports`, {
      method: "POST", body, contentType: keepalive ? "text/plain;charset=UTF-8" : "application/json",
      timeoutMs: this.s.requestTimeoutMs, fetch: this.s.fetch, keepalive: k,
    });
    const ids = rows.map((r) => r.report.id);
    ids.forEach((id) => this.inflight.add(id));
    let answer: Answer;
    try {
      // fetch() starts here, synchronously: a closing page's request is on its way before this returns.
      answer = await (keepalive ? post(true).catch(() => post(false)) : post(false));
    } catch (e) {
      this.why = shown((e as Error)?.name);
      return 0;
    } finally {
      ids.forEach((id) => this.inflight.delete(id));
    }
    const { status, body: b } = answer as { status: number; body: any };
    const settle = async (done: Row[]) => {
      done.forEach((r) => this.acked.add(r.report.id)); // settled: never sent again
      await (await this.store).remove(done.map((r) => r.seq).filter((seq) => seq >= 0)); // a fresh report has no row yet
    };
    if (status > 199 && status < 300 && Number.isInteger(b?.accepted) && Number.isInteger(b?.duplicates)) {
      await settle(rows);
      return;
    }
    if (isRetryable(status) || status < 400) {
      // A 2xx without the aggregator's acknowledgement (a captive portal, a proxy) proves nothing either.
      this.why = `HTTP ${status}`;
      return retryAfter(answer.headers) ?? 0;
    }
    // A 400 naming details[].index: those reports, with the server's reasons (escaped).
    const bad = new Map<number, string>();
    for (const d of Array.isArray(b?.details) ? b.details : []) {
      const i = d?.index;
      if (Number.isInteger(i) && i >= 0 && i < rows.length) bad.set(i, `[${i}] ${shown(d.field ?? "", 80)}: ${shown(d.message ?? "", 200)}`);
    }
    if ((status === 400 || status === 413) && !bad.size && rows.length > 1) {
      this.batchLimit = Math.max(1, rows.length >> 1);
      return;
    }
    const dropped = bad.size ? [...bad.keys()].map((i) => rows[i]) : rows;
    await settle(dropped);
    this.s.logger.warn(`HTTP ${status}: dropped ${dropped.length} report(s): ${bad.size ? [...bad.values()].join("; ") : shown(b?.error ?? "", 500)}`);
  }

  /** The page is being hidden or closed: send what is queued now, with keepalive. Fresh reports
   * are stored at the same time (an IndexedDB transaction begun now completes), so a page that
   * lives on sends nothing twice: acknowledged ids are removed rather than resent. */
  sendNow(): void {
    const stored = this.mirror.filter((r) => !this.acked.has(r.report.id));
    const known = new Set(stored.map((r) => r.report.id));
    let rows = [...stored, ...[...this.storing, ...this.fresh].filter((r) => !known.has(r.id))
      .map((report) => ({ seq: -1, report, bytes: UTF8.encode(JSON.stringify(report)).length }))];
    if (this.fresh.length) this.wake();
    for (;;) {
      const batch = this.batch(rows, KEEPALIVE_BUDGET - this.keepaliveBytes);
      const size = batch.reduce((a, r) => a + r.bytes + 1, 16);
      if (!batch.length || size > KEEPALIVE_BUDGET - this.keepaliveBytes) return; // the quota is spent: the rest waits in storage
      rows = rows.slice(batch.length);
      this.keepaliveBytes += size;
      this.send(batch, true).finally(() => (this.keepaliveBytes -= size));
    }
  }
}
