/**
 * The schema the client records under, and the guardrails that refuse a greedy or huge one (as
 * client/schemas.py). Given in code it is checked at construction; given by name it is fetched in
 * the background and cached in the store as the served text (the client offers it again when it
 * opens the store), so the client works when the server is down at start-up. The client trusts no
 * server: a schema over the app's maxEpsilon, or whose reports could be over maxReportBytes, is
 * refused, whoever sent it.
 */

import { subtle } from "./hmac.js";
import { answerSaid, request, shown, type Fetch } from "./http.js";
import type { Logger } from "./options.js";
import { parseJson } from "./pyjson.js";
import { maxReportBytes, validateRecord, type Truth } from "./reports.js";
import { isRetryable } from "./retry.js";
import { isObject, parseSchema, type Schema } from "./schema.js";
import type { Store } from "./storage.js";

export class SchemaSource {
  /** The schema's name: every schema it takes has this name (it refuses any other). */
  readonly name: string;
  /** Given by name: fetched from the server (else given in code). */
  readonly fetched: boolean;
  /** The schema records are made under; undefined while none is known (or it was refused). */
  current: Schema | undefined;
  /** Why no schema can be used (the only one offered was refused). */
  refusal: string | undefined;
  /** The version in use before `current`: records may still fit it. */
  private previous: Schema | undefined;

  /** `spec` is a schema name or a schema given in code (then checked at once: a TypeError or
   * SchemaError for the app). */
  constructor(spec: string | object, private readonly maxEpsilon: number, private readonly maxReport: number,
    private readonly log: Required<Logger>) {
    this.fetched = typeof spec === "string";
    this.name = typeof spec === "string" ? spec : (spec as { name: string }).name;
    if (!this.fetched) this.offer(spec, "given in code");
  }

  /** The schema `values` fit and their true values: the current one, else the previous version
   * (the server published attributes this app does not send yet). Throws the current one's RecordError. */
  fitting(values: unknown): [Schema, Truth] {
    try {
      return [this.current!, validateRecord(this.current!, values)];
    } catch (complaint) {
      if (!this.previous) throw complaint;
      try {
        return [this.previous, validateRecord(this.previous, values)];
      } catch {
        throw complaint;
      }
    }
  }

  /** The schema of `version` in use (the current one, or the one before), if known. */
  ofVersion(version: number): Schema | undefined {
    return [this.current, this.previous].find((schema) => schema?.version === version);
  }

  /** Use `definition` (which came `from` there: a log line says it) if it is a valid schema of the
   * right name within the budget; true if taken. */
  offer(definition: unknown, from: string): boolean {
    let schema: Schema;
    try {
      schema = this.checked(definition);
    } catch (e) {
      if (!this.fetched) throw e; // given in code: the app hears at once, from the constructor
      // The complaint may quote the server's text: escaped, since the app may log it.
      const reason = `the schema ${this.name} ${from} was refused: ${shown((e as Error).message, 500)}`;
      this.log.error(reason);
      if (!this.current) this.refusal = reason;
      return false;
    }
    if (this.current && this.current.version !== schema.version) this.previous = this.current;
    this.current = schema;
    this.refusal = undefined;
    return true;
  }

  /** The schema cached in `store`, offered again (see offerText). */
  async offerCached(store: Store): Promise<void> {
    if (!this.current) this.offerText(await store.cachedSchema(this.name), `cached in the ${store.kind} store`);
  }

  /** A cached schema's text, offered again (storage is no more trusted than the server), unless a
   * schema is known already (given in code, or read before). */
  offerText(text: unknown, from: string): void {
    if (this.current || typeof text !== "string") return;
    let definition: unknown;
    try {
      definition = parseJson(text);
    } catch {
      this.log.warn(`the schema ${this.name} ${from} is damaged JSON: ignored`);
      return;
    }
    this.offer(definition, from);
  }

  /** Fetch the latest version (and cache it in `store`). True when the server answered (come back
   * in schemaRefreshMs), false to retry soon (network error, retryable status, 404: it may be
   * published soon). Each failure is logged with the URL and why. */
  async refresh(endpoint: string, fetch: Fetch, timeoutMs: number, store: Store): Promise<boolean> {
    const url = `${endpoint}/api/v1/schemas/${this.name}`; // the name matches NAME_RE: nothing to escape
    let answer;
    try {
      answer = await request(url, { method: "GET", timeoutMs, fetch });
    } catch (e) {
      this.log.warn(`no schema: ${(e as Error).message}`);
      return false;
    }
    if (answer.status === 200 && isObject(answer.body)) {
      if (this.offer(answer.body, `from GET ${url}`)) await store.cacheSchema(this.name, answer.text);
      return true;
    }
    this.log.warn(`no schema: GET ${url} answered ${answerSaid(answer)}`);
    // A 200 without a schema object is retried soon, as a retryable status is (isRetryable: any below 400).
    return !isRetryable(answer.status);
  }

  private checked(definition: unknown): Schema {
    const schema = parseSchema(definition);
    if (schema.epsilon > this.maxEpsilon) throw new Error(`epsilon ${schema.epsilon} is over maxEpsilon ${this.maxEpsilon}`);
    // Outside a secure context (HTTPS, localhost) there is no HMAC for the permanent responses:
    // the schema is refused at once rather than every record failing later.
    if (schema.epsilonPermanent !== undefined) subtle();
    const size = maxReportBytes(schema);
    if (size > this.maxReport) throw new Error(`reports of up to ${size} bytes are over maxReportBytes ${this.maxReport}`);
    if (schema.name !== this.name) throw new Error(`it is named ${schema.name}`);
    return schema;
  }
}
