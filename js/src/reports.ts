/**
 * From a record of true values to a randomised report, as shared/reports.py does it: validate
 * the record ({@link RecordError} names the attribute, never the value: it may be a true answer),
 * then draw the id, the `sample` split and each attribute's coins in the vectors' order.
 */

import { DEVICE_SECRET_BYTES, hmacKey, hmacStream, isCryptoKey, type DeviceSecret } from "./hmac.js";
import { pyJson, PyFloat } from "./pyjson.js";
import { FixedBytes, randbelow, SYSTEM, type RandomSource } from "./random.js";
import { attributeDict, bucket, fieldError, isNumber, isObject, parseSchema, type Attribute, type Schema } from "./schema.js";
import { UTF8 } from "./storage.js";
import { prepareText } from "./strings.js";
import { startOf, windowOf } from "./windows.js";

export interface Report {
  id: string;
  schema: string;
  version: number;
  window: string;
  epsilon: number;
  values: Record<string, unknown>;
}

/** A record does not fit its schema. `field` names the attribute (the app's key), `record` when
 * the record is no object, `window` or `deviceSecret` for those arguments of randomize(). The
 * message names the field and what it must be, never the value (it may be a true answer). */
export const RecordError = fieldError("RecordError");
export type RecordError = InstanceType<typeof RecordError>;

const HMAC_BLOCK_BYTES = 32; // one HMAC-SHA256
// Domain separation of the permanent responses' HMAC messages: a new derivation is a new tag.
export const PERMANENT_TAG = "ldp-telemetry/permanent-response/v1";
// A number in a record beyond this cannot be a meaningful measurement; smaller ones are clipped.
const MAX_RECORD_NUMBER = 1e300;

/** The true values as the encoders take them: a boolean, a category or bucket index, a number,
 * a prepared string. */
export type Truth = Record<string, boolean | number | string>;

/** What a record's value of each attribute type must be (a RecordError says it). */
const EXPECTED: Record<string, string> = {
  boolean: "a boolean", categorical: "a category", string: "a string", numeric: "a finite number", histogram: "a finite number",
};

/** A number a record may hold (beyond MAX_RECORD_NUMBER it is no measurement; a smaller one is clipped later). */
const isRecordNumber = (value: unknown): value is number => isNumber(value) && Math.abs(value) <= MAX_RECORD_NUMBER;

/** `value` as the encoders of `a` take it, or undefined when it does not fit: a boolean, a
 * category's index, a string as prepared (never refused for what it holds), a number (clipped by
 * its encoder), a histogram bucket's index. */
function truthOf(a: Attribute, value: unknown): boolean | number | string | undefined {
  switch (a.type) {
    case "boolean":
      return typeof value === "boolean" ? value : undefined;
    case "categorical":
      return a.indexOf.get(value as string);
    case "string":
      return typeof value === "string" ? prepareText(value, a.strings!.max_length) : undefined;
    case "numeric":
      return isRecordNumber(value) ? value : undefined;
    case "histogram":
      return isRecordNumber(value) ? bucket(a.edges, value) : undefined;
  }
}

export function validateRecord(schema: Schema, record: unknown): Truth {
  if (!isObject(record)) throw new RecordError("record", "must be an object");
  const unknown = Object.keys(record).sort().find((k) => !schema.byName.has(k));
  if (unknown !== undefined) throw new RecordError(unknown.slice(0, 80), "is not in the schema");
  const missing = schema.attributes.find((a) => !Object.prototype.hasOwnProperty.call(record, a.name));
  if (missing) throw new RecordError(missing.name, "is missing");
  return Object.fromEntries(schema.attributes.map((a) => {
    const truth = truthOf(a, record[a.name]);
    if (truth === undefined) throw new RecordError(a.name, `must be ${EXPECTED[a.type]}`);
    return [a.name, truth];
  }));
}

/** A fresh id (24 bytes of `source`, base64url: 32 characters) that makes retries idempotent. */
export function newReportId(source: RandomSource = SYSTEM): string {
  return btoa(String.fromCharCode(...source.take(24))).replace(/\+/g, "-").replace(/\//g, "_");
}

/** Memoisation's HMAC message for `a`'s permanent response to `truth`: compact JSON (sorted
 * keys, ASCII) of the tag, the schema's name, the derived attribute and the true value, exactly
 * as Python's json.dumps writes it. */
export function permanentMessage(schema: Schema, a: Attribute, truth: boolean | number): string {
  return pyJson([PERMANENT_TAG, schema.name, attributeDict(a, true), truth]);
}

/** The report of `truth` in `window`. Coins, in order: the id (24 bytes), the `sample` index,
 * then each carried attribute's; a memoised attribute's permanent layer reads `permanent[name]`. */
export function encodeReport(schema: Schema, truth: Truth, window: string, source: RandomSource = SYSTEM,
  permanent: Record<string, RandomSource> = {}): Report {
  const all = schema.attributes;
  // A literal's values are computed in order: the id's coins come first, then the sample index.
  return {
    id: newReportId(source), schema: schema.name, version: schema.version, window, epsilon: schema.epsilon,
    values: Object.fromEntries((schema.split === "sample" ? [all[randbelow(all.length, source)]] : all)
      .map((a) => [a.name, a.mech.encode(a, truth[a.name], source, permanent[a.name])])),
  };
}

/** Encodes a report, first deriving the permanent coins of a memoised schema (Web Crypto is
 * asynchronous). An attribute's are its HMAC stream, long enough for a coin per category and 128
 * rejection draws of GRR, ceil((8 per category + 8 + 256) / 32) blocks (each draw succeeds with
 * probability over 1/2, so running out has probability below 2^-64; it would be an error, never
 * a wrap). */
export async function encodeWithPermanent(schema: Schema, truth: Truth, window: string, source: RandomSource,
  secret: DeviceSecret | undefined): Promise<Report> {
  const permanent: Record<string, RandomSource> = {};
  if (schema.epsilonPermanent !== undefined) {
    const key = await hmacKey(secret!);
    for (const a of schema.attributes) {
      const message = UTF8.encode(permanentMessage(schema, a, truth[a.name] as boolean | number)); // never a string
      const blocks = Math.ceil((8 * a.categories.length + 8 + 256) / HMAC_BLOCK_BYTES);
      permanent[a.name] = new FixedBytes(await hmacStream(key, message, blocks), "the HMAC stream");
    }
  }
  return encodeReport(schema, truth, window, source, permanent);
}

export interface RandomizeOptions {
  /** A window name of the schema's kind, or a time in it (default: now, UTC). */
  window?: string | Date;
  /** The device's secret: needed for a memoised schema (32 bytes or an HMAC CryptoKey). */
  deviceSecret?: DeviceSecret;
  /** The coins: the CSPRNG unless a test vector fixes them. */
  source?: RandomSource;
}

/** Randomise a record of true values into a report, on the device. `schema` is the schema as
 * the server serves it (or a parsed one). No ledger: that is TelemetryClient's job. */
export async function randomize(schema: unknown, record: unknown, options: RandomizeOptions = {}): Promise<Report> {
  const s = parseSchema(schema);
  const secret = options.deviceSecret;
  if (s.epsilonPermanent !== undefined && !(isCryptoKey(secret) || (secret instanceof Uint8Array && secret.length === DEVICE_SECRET_BYTES))) {
    throw new RecordError("deviceSecret", "must be 32 bytes or an HMAC CryptoKey");
  }
  const truth = validateRecord(s, record);
  // The window a time (default: now) falls in, or a window's name of the schema's kind.
  let window = options.window;
  if (window === undefined || window instanceof Date) window = windowOf(window ?? Date.now(), s.window);
  else if (isNaN(startOf(window, s.window))) throw new RecordError("window", `must name a UTC ${s.window}`);
  return encodeWithPermanent(s, truth, window, options.source ?? SYSTEM, secret);
}

/** The most characters one report's JSON text can take: a greedy server could otherwise make every
 * report huge. Exactly as max_report_bytes in Python counts them (default separators, the longest
 * id), since a relayed request is padded to a size that follows from it, the same in both clients:
 * the compact text, plus a space after each of the skeleton's 6 colons and 5 commas, plus each
 * attribute's name, ": ", its widest wire value and ", ". */
export function maxReportBytes(schema: Schema): number {
  const skeleton = pyJson({ id: "x".repeat(64), schema: schema.name, version: schema.version, window: "0000-00-00T00",
    epsilon: new PyFloat(schema.epsilon), values: {} }).length + 11;
  const widths = schema.attributes.map((a) => pyJson(a.name).length + 4 + a.mech.wireBytes(a));
  return skeleton + (schema.split === "sample" ? Math.max(...widths) : widths.reduce((x, y) => x + y, 0));
}
