/**
 * The schema the client records under, and the guardrails that refuse a greedy or huge one (as
 * client/schemas.py). Given in code it is checked at construction; given by name it is fetched in
 * the background and cached in the store (the client offers it again when it opens the store), so
 * the client works when the server is down at start-up. The client trusts no server: a schema over
 * the app's maxEpsilon, or whose reports could be over maxReportBytes, is refused, whoever sent it.
 */

import { subtle } from "./hmac.js";
import { request, shown, type Fetch } from "./http.js";
import type { Logger } from "./options.js";
import { maxReportBytes, validateRecord, type Truth } from "./reports.js";
import { isRetryable } from "./retry.js";
import { isObject, parseSchema, type Schema } from "./schema.js";
import type { Store } from "./storage.js";

export interface SchemaSource {
  readonly name: string;
  readonly fetched: boolean;
  current?: Schema;
  refusal?: string;
  /** The schema `values` fit and their true values: the current one, else the previous version
   * (the server published attributes this app does not send yet). Throws the current one's RecordError. */
  fitting(values: unknown): [Schema, Truth];
  /** Use `definition` if it is a valid schema of the right name within the budget. */
  offer(definition: unknown): boolean;
  /** Fetch the latest version. True when the server answered (come back in schemaRefreshMs),
   * false to retry soon (network error, retryable status, 404: it may be published soon). */
  refresh(endpoint: string, fetch: Fetch, timeoutMs: number, store: Store): Promise<boolean>;
}

export function schemaSource(spec: string | object, maxEpsilon: number, maxReport: number, log: Logger): SchemaSource {
  let previous: Schema | undefined; // the version in use before current: records may still fit it
  const fetched = typeof spec === "string"; // a name, checked with the other settings
  // Given in code, the schema names itself (parseSchema checks that name).
  const name = fetched ? spec : (spec as { name: string }).name;
  const self: SchemaSource = {
    name,
    fetched,
    fitting(values) {
      let complaint; // the current schema's, if neither fits
      for (const schema of [self.current!, previous]) {
        try {
          if (schema) return [schema, validateRecord(schema, values)];
        } catch (e) {
          complaint ??= e;
        }
      }
      throw complaint;
    },
    offer(definition) {
      let schema: Schema;
      try {
        schema = parseSchema(definition);
        if (schema.epsilon > maxEpsilon) throw new Error(`epsilon ${schema.epsilon} is over maxEpsilon`);
        // Outside a secure context (HTTPS, localhost) there is no HMAC for the permanent responses:
        // the schema is refused at once rather than every record failing later.
        if (schema.epsilonPermanent !== undefined) subtle();
        const size = maxReportBytes(schema);
        if (size > maxReport) throw new Error(`reports of ${size} bytes > maxReportBytes`);
        if (schema.name !== name) throw new Error("another name");
      } catch (e) {
        if (!fetched) throw e; // given in code: the app hears at once, from the constructor
        // The complaint may quote the server's text: escaped, since the app may log it.
        const reason = `schema ${name} refused: ${shown((e as Error).message, 500)}`;
        log.error(reason);
        if (!self.current) self.refusal = reason;
        return false;
      }
      if (self.current && self.current.version !== schema.version) previous = self.current;
      self.current = schema;
      self.refusal = undefined;
      return true;
    },
    async refresh(endpoint, fetch, timeoutMs, store) {
      // The name matches NAME_RE: nothing in it to escape in a URL.
      let answer;
      try {
        answer = await request(`${endpoint}/api/v1/schemas/${name}`, { method: "GET", timeoutMs, fetch });
      } catch (e) {
        log.info?.(shown((e as Error).name)); // a network failure, or the deadline
        return false;
      }
      const { status, body } = answer;
      if (status === 200 && isObject(body)) {
        // Cached as served: it was just checked, and is checked again when read back.
        if (self.offer(body)) await store.cacheSchema(name, LDP_FULL ? answer.text : body);
        return true;
      }
      log.warn(`no schema: HTTP ${status}`);
      // A 200 without a schema object is retried soon, as a retryable status is (isRetryable: any below 400).
      return !isRetryable(status);
    },
  };
  if (!fetched) self.offer(spec);
  return self;
}
