/**
 * How a client's reports go through its relay (DESIGN.md "Relay and amplification", "Client"):
 * each report alone in its own encapsulated request (two in one would tell the aggregator they
 * come from one device), `POST <relay>/relay` with a text/plain body (a browser sends it without a
 * preflight, also from a closing page with keepalive).
 *
 * The keys: fetched from the relay (`GET <relay>/ohttp-keys`) and from the aggregator's own origin
 * (`GET <endpoint>/api/v1/ohttp-keys`), and used only when both serve the same bytes, so that
 * neither alone can read reports or hand one client a key of its own; fetched again when a day
 * old, or when the relay says the key is no longer taken. The aggregator's fetch and the sending of
 * reports are never within a minute of each other, for all the clients of a page or process that
 * use the same relay and aggregator. The first usable configuration is used.
 *
 * A closing page cannot wait for Web Crypto (its answers come after the page is gone), so the
 * requests a closing page would send are sealed ahead, each time the sender reads its outbox, and
 * used once, by the keepalive send; every other send seals anew, so no two tries carry the same
 * ciphertext for the relay to link.
 *
 * A report is validated before it is encapsulated (the aggregator's verdict never comes back). The
 * relay's answers: 202, delivered; 400 with the `ohttp-key` problem type (RFC 9458 §5.3), the keys
 * are fetched again and the report encapsulated again and resent, never dropped; 429, 5xx, 408 (and
 * 401, 403, 404, 405, which say nothing of the report, and anything below 400 but 202: no proof of
 * delivery) retried after backoff and Retry-After, as the core's retry policy says (src/retry.ts);
 * 413 or another 4xx, dropped with a warning. Where Web Crypto has no X25519 (an insecure page, an
 * older browser) reports wait in the outbox, and the log says so once.
 */

import { answerSaid, KEEPALIVE_BUDGET, request, shown, type Answer } from "../http.js";
import type { RelayContext, RelayRoute, Verdict } from "../relay-hook.js";
import { maxReportBytes, type Report } from "../reports.js";
import { isRetryable, retryAfter } from "../retry.js";
import { isObject, type Schema } from "../schema.js";
import type { Row } from "../storage.js";
import { validateReport } from "../validate.js";
import { hasX25519 } from "./hpke.js";
import { bhttpRequest, chooseKeyConfig, encapsulate, KEY_PROBLEM_TYPE, paddedSize, relayRefusal, REQUEST_OVERHEAD, type KeyConfig } from "./ohttp.js";

/** Keys are fetched again when this old. */
export const KEYS_MAX_AGE_MS = 86_400_000;
/** The least time between fetching keys from the aggregator and sending a report, either way. */
export const KEY_GAP_MS = 60_000;

/** The route's times (tests shorten them: `installRelay((c) => new Route(c, {keyGapMs: 50}))`). */
export interface RouteTimes {
  keyGapMs?: number;
  keysMaxAgeMs?: number;
}
const TEXT = new TextEncoder();

/** The keys both parties served, as kept in the store's cache between starts: their bytes (hex),
 * when they were taken, and when the aggregator answered. */
interface KeptKeys {
  keys: string;
  fetched: number;
  asked: number;
}

const hex = (bytes: Uint8Array) => Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
const unhex = (text: string) => Uint8Array.from(text.match(/../g) ?? [], (b) => parseInt(b, 16));

/** What the routes of one relay and aggregator share in a page or process (an app may have a client
 * per schema): the keys, and the times of the minute's rule, which holds for the device, not for
 * one client; and a key fetch under way, which the others wait for rather than fetch again. */
class Shared {
  keys: KeyConfig | undefined;
  keysFetched = -Infinity;
  aggregatorAsked = -Infinity; // when the aggregator last answered (or failed) a key fetch
  lastSent = -Infinity; // when a report was last sent to the relay
  fetching: Promise<string | undefined> | undefined;
}

/** By cache name (the relay's and the aggregator's URLs). */
const SHARED = new Map<string, Shared>();

/** A request sealed ahead, with the keys it was sealed to. */
interface Sealed {
  keys: KeyConfig;
  body: Uint8Array;
}

/** Why `report` fails the aggregator's checks, if it does. */
function problem(report: Report, schema: Schema): string | undefined {
  try {
    validateReport(report, schema);
    return undefined;
  } catch (e) {
    return (e as Error).message;
  }
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((byte, i) => byte === b[i]);
}

export class Route implements RelayRoute {
  private readonly shared: Shared;
  private readonly x25519 = hasX25519();
  private readonly said = new Set<string>(); // what the log was told once
  // Versions fetched from the relay for reports made under them (the client knows two at most).
  private readonly versions = new Map<number, Schema>();
  private readonly relayUrl: string;
  // The store's cache name of the keys: with a space, which no schema name has.
  private readonly cacheName: string;
  private readonly loaded: Promise<void>;
  private readonly keyGapMs: number;
  private readonly keysMaxAgeMs: number;
  // Requests sealed ahead for a closing page, by report id: each used once, by a keepalive send.
  private sealed = new Map<string, Sealed>();

  constructor(private readonly c: RelayContext, { keyGapMs = KEY_GAP_MS, keysMaxAgeMs = KEYS_MAX_AGE_MS }: RouteTimes = {}) {
    this.relayUrl = `${c.settings.relay}/relay`;
    this.keyGapMs = keyGapMs;
    this.keysMaxAgeMs = keysMaxAgeMs;
    this.cacheName = `ohttp-keys ${c.settings.relay} ${c.settings.endpoint}`;
    this.shared = SHARED.get(this.cacheName) ?? new Shared();
    SHARED.set(this.cacheName, this.shared);
    this.loaded = this.load();
  }

  /** The keys kept from an earlier start (a page's earlier visit), so its reports go at once, a
   * closing page's too. Kept keys mean reports may have been sent just now: if they are stale, the
   * next fetch from the aggregator waits its minute as after a send. */
  private async load(): Promise<void> {
    try {
      const text = await (await this.c.store).cachedSchema(this.cacheName);
      if (typeof text !== "string") return;
      const kept = JSON.parse(text) as KeptKeys;
      if (!(kept.fetched <= Date.now() && kept.asked <= Date.now())) return; // a clock set back: fetched again
      const shared = this.shared;
      shared.lastSent = Math.max(shared.lastSent, Date.now());
      shared.aggregatorAsked = Math.max(shared.aggregatorAsked, kept.asked);
      if (kept.fetched <= shared.keysFetched) return; // this page or process has newer ones
      shared.keys = chooseKeyConfig(unhex(kept.keys));
      shared.keysFetched = kept.fetched;
    } catch {
      // Damaged: the keys are fetched again.
    }
  }

  bytes(row: Row): number {
    const schema = this.knownSchema(row);
    const ready = this.fresh() && this.gapLeft() <= 0 && schema !== undefined && !this.refusal(schema);
    return ready ? REQUEST_OVERHEAD + paddedSize(maxReportBytes(schema)) : Infinity;
  }

  async send(row: Row, keepalive: boolean): Promise<Verdict> {
    const s = this.c.settings;
    await this.loaded;
    if (!(await this.x25519)) {
      this.once("warn", "this platform's Web Crypto has no X25519 (an insecure page, or an older browser): reports wait in the outbox; they are never sent around the relay");
      return { after: s.backoffCapMs };
    }
    const schema = this.knownSchema(row) ?? (keepalive ? "" : await this.fetchVersion(row));
    if (typeof schema === "string") return schema ? { retry: schema } : {};
    if (!schema) {
      this.once("error", `the schema ${row.report.schema} version ${row.report.version} is not served any more: its reports are dropped`);
      return { settled: true };
    }
    const refusal = this.refusal(schema);
    if (refusal) {
      this.once("error", `${refusal}: its reports are dropped`);
      return { settled: true };
    }
    // The aggregator's verdict on a report never comes back through the relay: it is judged here.
    const invalid = problem(row.report, schema);
    if (invalid) {
      this.c.settings.logger.warn(`dropped 1 report(s): invalid (${shown(invalid)}), and no relay answer would say so`);
      return { settled: true };
    }
    if (!this.fresh()) {
      if (keepalive) return {}; // a closing page sends only what it can send at once
      const wait = this.shared.lastSent + this.keyGapMs - Date.now();
      if (wait > 0) return { after: wait };
      const failure = await (this.shared.fetching ??= this.fetchKeys().finally(() => (this.shared.fetching = undefined)));
      if (failure) return { retry: failure };
    }
    const wait = this.gapLeft();
    if (wait > 0) return keepalive ? {} : { after: wait };
    // A closing page's request was sealed ahead; any other is sealed now: each try is new ciphertext,
    // so the relay cannot tell a retry (from another network, say) for the same report.
    const sealed = keepalive ? this.sealed.get(row.report.id) : undefined;
    this.sealed.delete(row.report.id);
    const body = sealed?.keys === this.shared.keys ? sealed!.body : await this.sealRequest(row.report, schema, this.shared.keys!);
    const post = (withKeepalive: boolean) => request(this.relayUrl, {
      method: "POST", body: body as BufferSource, headers: { "Content-Type": "text/plain" }, timeoutMs: s.requestTimeoutMs, fetch: s.fetch, keepalive: withKeepalive,
    });
    this.shared.lastSent = Date.now();
    let answer: Answer;
    try {
      answer = await (keepalive ? post(true).catch(() => post(false)) : post(false));
    } catch (e) {
      return { retry: (e as Error).message };
    }
    return this.verdict(answer);
  }

  async seal(rows: Row[]): Promise<void> {
    try {
      await this.loaded;
      const keys = this.shared.keys;
      if (!(await this.x25519) || !keys || !this.fresh()) return;
      const ids = new Set(rows.map((row) => row.report.id));
      for (const id of this.sealed.keys()) if (!ids.has(id)) this.sealed.delete(id); // sent or gone
      let budget = KEEPALIVE_BUDGET;
      for (const row of rows) {
        const schema = this.knownSchema(row);
        if (!schema || this.refusal(schema)) break; // a closing page cannot send it, nor what follows
        if ((budget -= REQUEST_OVERHEAD + paddedSize(maxReportBytes(schema))) < 0) break;
        // An invalid report is dropped by send(), within the same budget.
        if (this.sealed.get(row.report.id)?.keys === keys || problem(row.report, schema)) continue;
        this.sealed.set(row.report.id, { keys, body: await this.sealRequest(row.report, schema, keys) });
      }
    } catch {
      // Web Crypto failed: each report is sealed when it is sent, and a failure said then.
    }
  }

  /** The request that carries `report` alone: its content padded to the schema's size, encapsulated to `keys`. */
  private sealRequest(report: Report, schema: Schema, keys: KeyConfig): Promise<Uint8Array> {
    const content = TEXT.encode(JSON.stringify({ reports: [report] }));
    return encapsulate(keys, bhttpRequest(content, paddedSize(maxReportBytes(schema))));
  }

  /** The schema version `row`'s report was made under, if known here. */
  private knownSchema(row: Row): Schema | undefined {
    return this.c.schemaOf(row.report) ?? this.versions.get(row.report.version);
  }

  /** A version the client no longer knows (reports made before a restart, under the version before),
   * from the relay (`GET <relay>/api/v1/schemas/<name>/<version>`), as the Python client does: to
   * check and pad its reports. Undefined when it is not served; why, when it is to be asked again. */
  private async fetchVersion(row: Row): Promise<Schema | string | undefined> {
    const { schema: name, version } = row.report;
    const url = `${this.c.settings.relay}/api/v1/schemas/${encodeURIComponent(name)}/${version}`;
    let answer: Answer;
    try {
      answer = await request(url, { method: "GET", timeoutMs: this.c.settings.requestTimeoutMs, fetch: this.c.settings.fetch });
    } catch (e) {
      return `no schema for a report: ${(e as Error).message}`;
    }
    if (answer.status === 200 && isObject(answer.body)) {
      try {
        const schema = this.c.parseSchema(answer.body);
        if (schema.name === name && schema.version === version) {
          this.versions.set(version, schema);
          return schema;
        }
      } catch {
        // not that version's schema: asked again below
      }
    }
    // A 404 or another final refusal says it is not served; anything else (a 5xx, a 2xx that is not
    // the schema, from a captive portal, say) is asked again after backoff.
    if (answer.status === 404 || !isRetryable(answer.status)) return undefined;
    return `no schema for a report: GET ${url} answered ${answerSaid(answer)}${answer.status === 200 ? " without that version's schema" : ""}`;
  }

  /** Why reports of `schema` cannot go through a relay, if they cannot. */
  private refusal(schema: Schema): string | undefined {
    return relayRefusal(schema.name, schema.version, maxReportBytes(schema));
  }

  /** The keys are known, agreed and less than a day old. */
  private fresh(): boolean {
    return this.shared.keys !== undefined && Date.now() - this.shared.keysFetched < this.keysMaxAgeMs;
  }

  /** How long until a report may be sent: a minute after the aggregator was last asked for keys. */
  private gapLeft(): number {
    return this.shared.aggregatorAsked + this.keyGapMs - Date.now();
  }

  private once(level: "warn" | "error", message: string): void {
    if (this.said.has(message)) return;
    this.said.add(message);
    this.c.settings.logger[level](message);
  }

  /** The keys from the relay, then from the aggregator, taken when byte-identical; else why not. */
  private async fetchKeys(): Promise<string | undefined> {
    const s = this.c.settings;
    const fromRelay = `${s.relay}/ohttp-keys`;
    const fromAggregator = `${s.endpoint}/api/v1/ohttp-keys`;
    const relayKeys = await this.get(fromRelay);
    if (typeof relayKeys === "string") return relayKeys;
    // The minute runs from the aggregator's answer: whatever the network's delays, the aggregator
    // sees the next report no sooner than a minute after this request.
    const aggregatorKeys = await this.get(fromAggregator).finally(() => (this.shared.aggregatorAsked = Date.now()));
    if (typeof aggregatorKeys === "string") return aggregatorKeys;
    if (!sameBytes(relayKeys, aggregatorKeys)) {
      return `GET ${fromRelay} and GET ${fromAggregator} serve different key configurations: nothing goes through the relay until they agree`;
    }
    try {
      this.shared.keys = chooseKeyConfig(relayKeys);
    } catch (e) {
      return `the keys of GET ${fromRelay} cannot be used: ${(e as Error).message}`;
    }
    this.shared.keysFetched = Date.now();
    const kept: KeptKeys = { keys: hex(relayKeys), fetched: this.shared.keysFetched, asked: this.shared.aggregatorAsked };
    // Not kept (a full disk, say): they are fetched again at the next start.
    await (await this.c.store).cacheSchema(this.cacheName, JSON.stringify(kept)).catch(() => undefined);
    return undefined;
  }

  /** The body of a 200 answer to GET `url`, or why there is none. */
  private async get(url: string): Promise<Uint8Array | string> {
    const s = this.c.settings;
    try {
      const answer = await request(url, { method: "GET", timeoutMs: s.requestTimeoutMs, fetch: s.fetch });
      return answer.status === 200 ? answer.bytes : `no keys for the relay: GET ${url} answered ${answerSaid(answer)}`;
    } catch (e) {
      return `no keys for the relay: ${(e as Error).message}`;
    }
  }

  /** What the relay's answer means for the report. */
  private verdict(answer: Answer): Verdict {
    const said = `POST ${this.relayUrl} answered ${answerSaid(answer)}`;
    const { status } = answer;
    if (status === 202) return { settled: true };
    if (status === 400 && (answer.body as { type?: unknown } | undefined)?.type === KEY_PROBLEM_TYPE) {
      this.shared.keys = undefined;
      return { retry: `${said}: its key is no longer taken; the keys are fetched again and the report resent` };
    }
    if (isRetryable(status)) return { retry: said, after: retryAfter(answer.headers) };
    this.c.settings.logger.warn(`dropped 1 report(s): ${said}`);
    return { settled: true };
  }
}
