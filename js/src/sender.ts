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
const TEXT_PLAIN = "text/plain;charset=UTF-8";

type Timer = ReturnType<typeof setTimeout>;

function unref(t: Timer): Timer {
  // A Node process is not kept alive by retries alone: flush() and close() wait when asked.
  (t as { unref?: () => void }).unref?.();
  return t;
}

export class Sender {
  private fresh: Report[] = []; // made, not yet in storage
  private mirror: Row[] = []; // the oldest stored rows, as last read (what a closing page can send at once)
  private acked = new Set<string>(); // ids the server acknowledged (a keepalive send of a fresh report)
  private inflight = new Set<string>();
  private keepaliveBytes = 0;
  private attempt = 0;
  private deliverDue = 0;
  private schemaDue = 0;
  private schemaAttempt = 0;
  private batchLimit: number;
  private timer?: Timer;
  private running?: Promise<void>;
  private again = false;
  private stored = 0; // rows in storage, as last counted
  private counted = false; // storage was counted at least once (until then nothing is known to be settled)
  private waiters: (() => void)[] = [];
  busy = 0; // work outside the queue the client is doing (pending records, memoised encodings)
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
    return this.counted && this.busy === 0 && this.fresh.length === 0 && this.stored === 0 && !this.running;
  }

  /** Run a turn after `ms` (or sooner if one is already due). */
  wake(ms = 0): void {
    if (this.stopped && ms > 0) ms = 0;
    if (this.running) {
      this.again = true;
      return;
    }
    if (this.timer) clearTimeout(this.timer);
    this.timer = unref(setTimeout(() => this.turn(), ms));
  }

  /** Resolves when settled, or false after `ms`. */
  async waitSettled(ms: number): Promise<boolean> {
    const deadline = Date.now() + ms;
    this.wake();
    while (!this.settled) {
      const left = deadline - Date.now();
      if (left <= 0) return false;
      // This timer is not unref'd: a Node process waits for flush() as asked.
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, Math.min(left, 1000));
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
    return true;
  }

  private notify(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w();
  }

  private turn(): void {
    this.timer = undefined;
    this.running = this.step().catch((e) => {
      // A bug here must never reach the app; reports wait in storage.
      this.s.logger.error(shown((e as Error)?.message ?? e));
      this.deliverDue = Date.now() + this.backoff(0);
    }).finally(() => {
      this.running = undefined;
      const next = this.again ? 0 : this.nextDue();
      this.again = false;
      if (next !== Infinity) this.wake(Math.max(0, next - Date.now()));
      this.notify();
    });
  }

  private nextDue(): number {
    const schema = this.stopped && !this.busy ? Infinity : this.schemaDue;
    return Math.min(schema, this.stored > 0 ? this.deliverDue : Infinity, this.busy ? Date.now() + 1000 : Infinity);
  }

  private async step(): Promise<void> {
    const store = await this.store;
    this.beforeTurn();
    await this.persist(store);
    if (Date.now() >= this.schemaDue && !(this.stopped && !this.busy)) await this.refreshSchema(store);
    this.beforeTurn();
    await this.persist(store);
    if (this.stored > 0 && Date.now() >= this.deliverDue) await this.deliver(store);
  }

  private async persist(store: Store): Promise<void> {
    if (this.fresh.length) {
      const reports = this.fresh;
      this.fresh = [];
      try {
        const appended = await store.append(reports, { maxReports: this.s.maxOutbox, maxBytes: this.s.maxOutboxBytes, perDay: this.s.maxEpsilonPerDay });
        if (appended.refused.length) {
          this.s.logger.warn(`dropped ${appended.refused.length} report(s): ${appended.refused[0]}`);
          this.ledger.learn(reports[0].schema, await store.ledger(reports[0].schema));
        }
        if (appended.evicted) this.s.logger.warn(`outbox full: dropped ${appended.evicted} report(s)`);
      } catch (e) {
        this.fresh = reports.concat(this.fresh).slice(-this.s.maxOutbox); // e.g. storage full: keep them, retry
        throw e;
      }
    }
    this.mirror = await store.peek(this.s.maxBatch);
    this.stored = await store.count();
    this.counted = true;
  }

  private async refreshSchema(store: Store): Promise<void> {
    if (await this.source.refresh(this.s.endpoint, this.s.fetch, this.s.requestTimeoutMs, store)) {
      this.schemaAttempt = 0;
      this.schemaDue = Date.now() + this.s.schemaRefreshMs;
    } else {
      this.schemaDue = Date.now() + backoffDelay(this.schemaAttempt++, this.s.backoffBaseMs, this.s.backoffCapMs);
    }
  }

  /** The oldest rows as one batch within the count, bytes and windows bounds. */
  private batch(rows: Row[], maxBytes: number): Row[] {
    const out: Row[] = [];
    const windows = new Set<string>();
    let bytes = 16;
    for (const row of rows) {
      if (out.length >= this.batchLimit || this.inflight.has(row.report.id)) break;
      if (bytes + row.bytes + 1 > maxBytes && out.length) break;
      if (!windows.has(row.report.window) && windows.size >= MAX_BATCH_WINDOWS) break;
      if (bytes + row.bytes + 1 > maxBytes) {
        // One report over the bound on its own (a smaller limit than when it was made): it cannot go.
        out.push(row);
        break;
      }
      windows.add(row.report.window);
      out.push(row);
      bytes += row.bytes + 1;
    }
    return out;
  }

  private async deliver(store: Store): Promise<void> {
    const done = this.mirror.filter((r) => this.acked.has(r.report.id));
    if (done.length) await store.remove(done.map((r) => r.seq));
    const rows = this.batch(this.mirror.filter((r) => !this.acked.has(r.report.id)), this.s.maxBatchBytes);
    if (!rows.length) return;
    const floor = await this.post(store, rows);
    if (floor === undefined) this.attempt = 0;
    else {
      const delay = this.backoff(floor);
      this.s.logger.warn(`delivery failed (${this.why}); retry in ${delay | 0} ms`);
    }
    this.mirror = await store.peek(this.s.maxBatch);
    this.stored = await store.count();
  }

  private why = "";

  private backoff(floor: number): number {
    const delay = Math.max(floor, backoffDelay(this.attempt++, this.s.backoffBaseMs, this.s.backoffCapMs));
    this.deliverDue = Date.now() + delay;
    return delay;
  }

  /** Post one batch: undefined when it is settled; else the least ms to wait before a retry. */
  private async post(store: Store, rows: Row[]): Promise<number | undefined> {
    const ids = rows.map((r) => r.report.id);
    ids.forEach((id) => this.inflight.add(id));
    let answer: Answer;
    try {
      answer = await request(`${this.s.endpoint}/api/v1/reports`, {
        method: "POST", body: JSON.stringify({ reports: rows.map((r) => r.report) }), contentType: "application/json",
        timeoutMs: this.s.requestTimeoutMs, fetch: this.s.fetch,
      });
    } catch (e) {
      this.why = shown((e as Error)?.name);
      return 0;
    } finally {
      ids.forEach((id) => this.inflight.delete(id));
    }
    return this.answered(store, rows, answer);
  }

  private async answered(store: Store, rows: Row[], answer: Answer): Promise<number | undefined> {
    const { status, body } = answer;
    const seqs = rows.map((r) => r.seq);
    if (status >= 200 && status < 300 && isAcknowledgement(body)) {
      await store.remove(seqs);
      return undefined;
    }
    if (isRetryable(status) || status < 400) {
      // A 2xx without the aggregator's acknowledgement (a captive portal, a proxy) proves nothing either.
      this.why = `HTTP ${status}`;
      return retryAfter(answer.headers) ?? 0;
    }
    const bad = rejected(body, rows.length);
    if (status === 400 && bad.size) {
      await this.drop(store, [...bad.keys()].map((i) => seqs[i]), status, [...bad.values()].join("; "));
      return undefined;
    }
    if ((status === 400 || status === 413) && rows.length > 1) {
      this.batchLimit = Math.max(1, rows.length >> 1);
      return undefined;
    }
    const error = typeof body === "object" && body !== null ? (body as { error?: unknown }).error : "";
    await this.drop(store, seqs, status, shown(error ?? "", 500));
    return undefined;
  }

  private async drop(store: Store, seqs: number[], status: number, why: string): Promise<void> {
    await store.remove(seqs);
    this.s.logger.warn(`HTTP ${status}: dropped ${seqs.length} report(s): ${why}`);
  }

  /** The page is being hidden or closed: send what is queued now, with keepalive. Fresh reports
   * are stored at the same time (an IndexedDB transaction begun now completes), so a page that
   * lives on sends nothing twice: acknowledged ids are removed rather than resent. */
  sendNow(): void {
    const freshRows = this.fresh.map((report) => ({ seq: -1, report, bytes: UTF8.encode(JSON.stringify(report)).length }));
    if (this.fresh.length) this.wake();
    let rows = [...this.mirror.filter((r) => !this.acked.has(r.report.id)), ...freshRows];
    while (rows.length) {
      const batch = this.batch(rows, KEEPALIVE_BUDGET - this.keepaliveBytes);
      if (!batch.length) break;
      rows = rows.slice(batch.length);
      const body = JSON.stringify({ reports: batch.map((r) => r.report) });
      const size = UTF8.encode(body).length;
      if (size > KEEPALIVE_BUDGET - this.keepaliveBytes) break; // the page's quota is spent: the rest waits in storage
      this.keepaliveBytes += size;
      batch.forEach((r) => this.inflight.add(r.report.id));
      const send = (keepalive: boolean) => request(`${this.s.endpoint}/api/v1/reports`, {
        method: "POST", body, contentType: TEXT_PLAIN, timeoutMs: this.s.requestTimeoutMs, fetch: this.s.fetch, keepalive,
      });
      // A browser refuses a keepalive request over its quota with a TypeError: a plain fetch may still finish.
      send(true).catch(() => send(false)).then(async (answer) => {
        if (answer.status >= 200 && answer.status < 300 && isAcknowledgement(answer.body)) {
          batch.forEach((r) => this.acked.add(r.report.id));
          const store = await this.store;
          await store.remove(batch.filter((r) => r.seq >= 0).map((r) => r.seq));
          this.wake();
        }
      }).catch(() => undefined).finally(() => {
        this.keepaliveBytes -= size;
        batch.forEach((r) => this.inflight.delete(r.report.id));
      });
    }
  }
}

function isAcknowledgement(body: unknown): boolean {
  const b = body as Record<string, unknown> | null;
  return typeof b === "object" && b !== null && Number.isInteger(b.accepted) && Number.isInteger(b.duplicates);
}

/** The batch positions a 400 names in details[].index, with the server's reason (escaped). */
function rejected(body: unknown, size: number): Map<number, string> {
  const found = new Map<number, string>();
  const details = typeof body === "object" && body !== null ? (body as { details?: unknown }).details : undefined;
  for (const d of Array.isArray(details) ? details : []) {
    const index = typeof d === "object" && d !== null ? (d as { index?: unknown }).index : undefined;
    if (typeof index === "number" && Number.isInteger(index) && index >= 0 && index < size) {
      found.set(index, `[${index}] ${shown((d as { field?: unknown }).field ?? "", 80)}: ${shown((d as { message?: unknown }).message ?? "", 200)}`);
    }
  }
  return found;
}
