/**
 * A report exactly as DESIGN.md "Wire format" specifies it, checked as shared/reports.py's
 * validate_report does. The client checks what it reads back from its own storage (a damaged or
 * tampered outbox must not send garbage in its name), and the vectors' reports check it.
 */

import { duchiC, GRID, pmConstants, type Encoded } from "./mechanisms.js";
import { isNumber, MAX_EPSILON, MAX_VERSION, type Schema } from "./schema.js";
import { num } from "./pyjson.js";
import { P } from "./strings.js";
import { windowStart } from "./windows.js";

export const REPORT_FIELDS = ["id", "schema", "version", "window", "epsilon", "values"];
const ID_RE = /^[A-Za-z0-9_-]{16,64}$/;
const EPSILON_TOLERANCE = 1e-9;

/** A number wire value within `limit` (another client's rounding may exceed it by a relative 1e-9). */
function number(limit: number) {
  return (_a: Encoded, given: unknown, v = num(given)) => (typeof v === "number" && Math.abs(v) <= limit * (1 + 1e-9) ? undefined : `must be a number from ${-limit} to ${limit}`);
}

/** Why a wire value is invalid, per mechanism (kept out of the mechanisms themselves, so that the
 * browser bundle, which never validates reports, does not carry it). */
const CHECKS: Record<string, (a: Encoded, v: unknown) => string | undefined> = {
  rr: (_a, v) => (typeof v === "boolean" ? undefined : "must be JSON true or false"),
  grr: (a, v) => (typeof v === "string" && a.categories.includes(v) ? undefined : "must be one of the categories"),
  oue: (a, v) => (Array.isArray(v) && v.length === a.categories.length && v.every((b) => b === 0 || b === 1) ? undefined
    : `must be a list of ${a.categories.length} integers, each 0 or 1 (OUE)`),
  duchi: (_a, v) => (v === 0 || v === 1 ? undefined : "must be the JSON integer 0 or 1 (one bit)"),
  pm: (a, v) => number(pmConstants(a.epsilon)[1] + GRID)(a, v),
  hm: (a, v) => number(Math.max(pmConstants(a.epsilon)[1] + GRID, duchiC(a.epsilon)))(a, v),
  // The largest exponential a 53-bit uniform gives is 53 ln 2.
  laplace: (a, v) => number(1 + (2 / a.epsilon) * 53 * Math.LN2 + GRID)(a, v),
  // {"a": a, "b": b, "y": y}, integers, no other key; and "level" (0 to L) on every report of an
  // attribute that discovers strings, on no other.
  olh: (a, v) => {
    const o = (v ?? 0) as Record<string, number>;
    const g = a.params.g;
    const top = a.strings!.discover ? a.strings!.levels!.length : -1;
    const ranges: [string, number, number][] = [["a", 1, P - 1], ["b", 0, P - 1], ["y", 0, g - 1], ...(top < 0 ? [] : [["level", 0, top] as [string, number, number]])];
    return typeof v === "object" && !Array.isArray(v) && Object.keys(o).length === ranges.length &&
      ranges.every(([k, low, high]) => Number.isInteger(o[k]) && o[k] >= low && o[k] <= high)
      ? undefined : `must be {"a": 1 to ${P - 1}, "b": 0 to ${P - 1}, "y": 0 to ${g - 1}${top < 0 ? "" : `, "level": 0 to ${top}`}} (integers) with no other key`;
  },
};

export class ReportError extends Error {
  constructor(readonly field: string, message: string) {
    super(`${field}: ${message}`);
    this.name = "ReportError";
  }
}

export type SchemaLookup = (name: string, version: number) => Schema | undefined;

export function validateReport(obj: unknown, schemas: Schema | SchemaLookup): void {
  if (typeof obj !== "object" || obj === null || Array.isArray(obj)) throw new ReportError("report", "must be a JSON object");
  const r = obj as Record<string, unknown>;
  const keys = Object.keys(r);
  const unknown = keys.filter((k) => !REPORT_FIELDS.includes(k)).sort();
  if (unknown.length) throw new ReportError(unknown[0].slice(0, 80) || '""', `unknown field (a report has only ${REPORT_FIELDS.join(", ")})`);
  const missing = REPORT_FIELDS.find((f) => !keys.includes(f));
  if (missing) throw new ReportError(missing, "is required");
  if (typeof r.id !== "string" || !ID_RE.test(r.id)) throw new ReportError("id", "must be 16 to 64 url-safe characters");
  if (typeof r.schema !== "string") throw new ReportError("schema", "must be a schema name (a string)");
  const version = r.version;
  if (!(typeof version === "number" && Number.isInteger(version) && version >= 1 && version <= MAX_VERSION)) {
    throw new ReportError("version", `must be an integer from 1 to ${MAX_VERSION}`);
  }
  const schema = typeof schemas === "function" ? schemas(r.schema, version) : schemas;
  if (!schema || schema.name !== r.schema || schema.version !== version) {
    throw new ReportError("schema", `no schema ${r.schema.slice(0, 70)} version ${version}`);
  }
  try {
    windowStart(r.window, schema.window);
  } catch (e) {
    throw new ReportError("window", (e as Error).message);
  }
  const epsilon = num(r.epsilon); // a float field: 1.0 is as good as 1
  if (!isNumber(epsilon) || !(epsilon > 0 && epsilon <= MAX_EPSILON) || Math.abs(epsilon - schema.epsilon) > EPSILON_TOLERANCE) {
    throw new ReportError("epsilon", `must equal the schema's total epsilon ${schema.epsilon}`);
  }
  const values = r.values;
  if (typeof values !== "object" || values === null || Array.isArray(values)) {
    throw new ReportError("values", "must be a JSON object of attribute values");
  }
  const carried = Object.keys(values);
  for (const key of carried) {
    if (!schema.byName.has(key)) throw new ReportError(`values.${key}`.slice(0, 80), `unknown attribute for schema ${schema.name}`);
  }
  if (schema.split === "sample") {
    if (carried.length !== 1) throw new ReportError("values", "must carry exactly one attribute under split 'sample'");
  } else if (carried.length !== schema.byName.size) {
    const absent = [...schema.byName.keys()].find((n) => !carried.includes(n));
    throw new ReportError(`values.${absent}`, "is required (the schema's split is 'equal')");
  }
  for (const key of carried) {
    const a = schema.byName.get(key)!;
    const why = CHECKS[a.mechanism](a, (values as Record<string, unknown>)[key]);
    if (why) throw new ReportError(`values.${key}`, why);
  }
}
