/**
 * A report exactly as DESIGN.md "Wire format" specifies it, checked as shared/reports.py's
 * validate_report does: for apps that carry reports themselves, and for the vectors' reports.
 */

import { isNumber, MAX_EPSILON, MAX_VERSION, type Schema } from "./schema.js";
import { num } from "./pyjson.js";
import { windowStart } from "./windows.js";

export const REPORT_FIELDS = ["id", "schema", "version", "window", "epsilon", "values"];
const ID_RE = /^[A-Za-z0-9_-]{16,64}$/;
const EPSILON_TOLERANCE = 1e-9;

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
    const why = a.mech.check(a, (values as Record<string, unknown>)[key]);
    if (why) throw new ReportError(`values.${key}`, why);
  }
}
