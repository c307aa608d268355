/**
 * The schema the client records under, and the guardrails that refuse a greedy or huge one (as
 * client/schemas.py). Given in code it is checked at construction; given by name it is fetched in
 * the background and cached in the store, so the client works when the server is down at
 * start-up. The client trusts no server: a schema over the app's maxEpsilon, or whose reports
 * could be over maxReportBytes, is refused, whoever sent it.
 */

import { subtle } from "./hmac.js";
import { request, shown, type Fetch } from "./http.js";
import type { Logger } from "./options.js";
import { maxReportBytes, validateRecord, type Truth } from "./reports.js";
import { isRetryable } from "./retry.js";
import { NAME_RE, parseSchema, type Schema } from "./schema.js";
import type { Store } from "./storage.js";

export class SchemaSource {
  readonly name: string;
  readonly fetched: boolean;
  current?: Schema;
  previous?: Schema; // the version in use before current: records may still fit it
  refusal?: string;

  constructor(spec: string | object, private readonly maxEpsilon: number, private readonly maxReport: number,
    private readonly log: Logger) {
    if (typeof spec === "string") {
      if (!NAME_RE.test(spec)) throw new TypeError("schema must be a schema name");
      this.name = spec;
      this.fetched = true;
    } else {
      const schema = parseSchema(spec); // given in code: the app hears at once
      this.check(schema);
      this.name = schema.name;
      this.fetched = false;
      this.current = schema;
    }
  }

  private check(schema: Schema): void {
    if (schema.epsilon > this.maxEpsilon) {
      throw new Error(`epsilon ${schema.epsilon} is over maxEpsilon`);
    }
    // Outside a secure context (HTTPS, localhost) there is no HMAC for the permanent responses:
    // the schema is refused at once rather than every record failing later.
    if (schema.epsilonPermanent !== undefined) subtle();
    const size = maxReportBytes(schema);
    if (size > this.maxReport) {
      throw new Error(`reports of ${size} bytes are over maxReportBytes`);
    }
  }

  /** The schema `values` fit and their true values: the current one, else the previous version
   * (the server published attributes this app does not send yet). Throws the current one's RecordError. */
  fitting(values: unknown): [Schema, Truth] {
    const current = this.current!;
    try {
      return [current, validateRecord(current, values)];
    } catch (e) {
      if (this.previous) {
        try {
          return [this.previous, validateRecord(this.previous, values)];
        } catch {
          // the current schema's complaint is the one to give
        }
      }
      throw e;
    }
  }

  /** Use `definition` if it is a valid schema of the right name within the budget. */
  offer(definition: unknown): boolean {
    let schema: Schema;
    try {
      schema = parseSchema(definition);
      if (schema.name !== this.name) throw new Error("another name");
      this.check(schema);
    } catch (e) {
      // The complaint may quote the server's text: escaped, since the app may log it.
      const reason = `schema ${this.name} refused: ${shown((e as Error).message, 500)}`;
      this.log.error(reason);
      if (!this.current) this.refusal = reason;
      return false;
    }
    if (this.current && this.current.version !== schema.version) this.previous = this.current;
    this.current = schema;
    this.refusal = undefined;
    return true;
  }

  async loadCached(store: Store): Promise<void> {
    if (!this.fetched || this.current) return;
    const cached = await store.cachedSchema(this.name);
    if (cached !== undefined) this.offer(cached);
  }

  /** Fetch the latest version. True when the server answered (come back in schemaRefreshMs),
   * false to retry soon (network error, retryable status, 404: it may be published soon). */
  async refresh(endpoint: string, fetch: Fetch, timeoutMs: number, store?: Store): Promise<boolean> {
    let answer;
    try {
      answer = await request(`${endpoint}/api/v1/schemas/${encodeURIComponent(this.name)}`, { method: "GET", timeoutMs, fetch });
    } catch (e) {
      this.log.info?.(shown((e as Error).name));
      return false;
    }
    if (answer.status !== 200) {
      this.log.warn(`schema: HTTP ${answer.status}`);
      return !(isRetryable(answer.status) || answer.status < 400);
    }
    if (typeof answer.body !== "object" || answer.body === null || Array.isArray(answer.body)) {
      this.log.warn("schema: no JSON object");
      return false;
    }
    // Cached as served: it was just checked whole (unknown fields refused), and is checked again when read back.
    if (this.offer(answer.body) && store) await store.cacheSchema(this.name, answer.body);
    return true;
  }
}
