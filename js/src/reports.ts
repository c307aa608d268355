/**
 * From a record of true values to a randomised report, as shared/reports.py does it: validate
 * the record ({@link RecordError} names the attribute, never the value: it may be a true answer),
 * then draw the id, the `sample` split and each attribute's coins in the vectors' order.
 */

import { DEVICE_SECRET_BYTES, hmacKey, hmacStream, isCryptoKey, StreamBytes, StreamExhausted, type DeviceSecret } from "./hmac.js";
import type { ShareMechanism } from "./mechanisms.js";
import { pyJson } from "./pyjson.js";
import { randbelow, SYSTEM, type RandomSource } from "./random.js";
import { attributeDict, bucket, isNumber, parseSchema, type Attribute, type Schema } from "./schema.js";
import { windowOf, windowStart } from "./windows.js";

export interface Report {
  id: string;
  schema: string;
  version: number;
  window: string;
  epsilon: number;
  values: Record<string, unknown>;
}

/** A record does not fit its schema. `field` names the attribute (the app's key), `record` when
 * the record is no object, `window` or `deviceSecret` for those arguments of randomize(). */
export class RecordError extends Error {
  constructor(readonly field: string, message: string) {
    super(message);
    this.name = "RecordError";
  }
}

// Domain separation of the permanent responses' HMAC messages: a new derivation is a new tag.
export const PERMANENT_TAG = "ldp-telemetry/permanent-response/v1";
// A number in a record beyond this cannot be a meaningful measurement; smaller ones are clipped.
const MAX_RECORD_NUMBER = 1e300;

/** The true values as the encoders take them: a boolean, a category or bucket index, a number. */
export type Truth = Record<string, boolean | number>;

function typeName(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  return typeof v;
}

export function validateRecord(schema: Schema, record: unknown): Truth {
  if (typeof record !== "object" || record === null || Array.isArray(record)) {
    throw new RecordError("record", `a record must be an object of attribute values, got ${typeName(record)}`);
  }
  const keys = Object.keys(record);
  if (keys.length !== schema.byName.size || keys.some((k) => !schema.byName.has(k))) {
    const unknown = keys.filter((k) => !schema.byName.has(k)).sort();
    if (unknown.length) {
      throw new RecordError(unknown[0].slice(0, 80), `unknown attribute(s) for schema ${schema.name}: ${unknown.join(", ").slice(0, 300)}`);
    }
    const missing = [...schema.byName.keys()].filter((n) => !Object.prototype.hasOwnProperty.call(record, n));
    throw new RecordError(missing[0], `missing attribute(s) for schema ${schema.name}: ${missing.join(", ")}`);
  }
  const values = record as Record<string, unknown>;
  const truth: Truth = {};
  for (const a of schema.attributes) {
    const value = values[a.name];
    if (a.type === "boolean") {
      if (typeof value !== "boolean") throw new RecordError(a.name, `${a.name} must be true or false, got a ${typeName(value)}`);
      truth[a.name] = value;
    } else if (a.type === "numeric" || a.type === "histogram") {
      if (!isNumber(value) || Math.abs(value) > MAX_RECORD_NUMBER) {
        throw new RecordError(a.name, `${a.name} must be a finite number (not a boolean), got a ${typeName(value)} or a number out of bounds`);
      }
      truth[a.name] = a.type === "numeric" ? value : bucket(a.edges, value);
    } else {
      if (typeof value !== "string") throw new RecordError(a.name, `${a.name} must be a category name (a string), got a ${typeName(value)}`);
      const index = a.indexOf.get(value);
      if (index === undefined) {
        throw new RecordError(a.name, `${a.name} must be one of the schema's categories (${a.categories.slice(0, 8).join(", ")}${a.categories.length > 8 ? ", ..." : ""}); the value given is not`);
      }
      truth[a.name] = index;
    }
  }
  return truth;
}

const B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/** A fresh id (24 bytes of `source`, base64url: 32 characters) that makes retries idempotent. */
export function newReportId(source: RandomSource = SYSTEM): string {
  const b = source.take(24);
  let out = "";
  for (let i = 0; i < 24; i += 3) {
    const n = (b[i] << 16) | (b[i + 1] << 8) | b[i + 2];
    out += B64URL[n >> 18] + B64URL[(n >> 12) & 63] + B64URL[(n >> 6) & 63] + B64URL[n & 63];
  }
  return out;
}

/** Memoisation's HMAC message for `a`'s permanent response to `truth`: compact JSON (sorted
 * keys, ASCII) of the tag, the schema's name, the derived attribute and the true value, exactly
 * as Python's json.dumps writes it. */
export function permanentMessage(schema: Schema, a: Attribute, truth: boolean | number): string {
  return pyJson([PERMANENT_TAG, schema.name, attributeDict(a, true), truth]);
}

export function checkDeviceSecret(schema: Schema, secret: unknown): void {
  if (schema.epsilonPermanent === undefined) return;
  const ok = isCryptoKey(secret) || (secret instanceof Uint8Array && secret.length === DEVICE_SECRET_BYTES);
  if (!ok) {
    throw new RecordError("deviceSecret", `schema ${schema.name} is memoised (epsilon_permanent): randomize() needs the device's secret, deviceSecret: <${DEVICE_SECRET_BYTES} bytes or an HMAC CryptoKey>`);
  }
}

const UTF8 = new TextEncoder();

/** The permanent coins of each memoised attribute: HMAC streams long enough for its encoder
 * (8 bytes a coin; GRR's rejections may need more, then the stream is made longer). */
export class PermanentCoins {
  private readonly streams = new Map<string, Uint8Array>();
  constructor(private readonly key: CryptoKey, private readonly schema: Schema, private readonly truth: Truth) {}

  static async make(schema: Schema, truth: Truth, secret: DeviceSecret): Promise<PermanentCoins> {
    const coins = new PermanentCoins(await hmacKey(secret), schema, truth);
    await Promise.all(schema.attributes.filter((a) => a.memo).map((a) => coins.extend(a, 8 * a.categories.length + 64)));
    return coins;
  }

  async extend(a: Attribute, bytes: number): Promise<void> {
    const message = UTF8.encode(permanentMessage(this.schema, a, this.truth[a.name]));
    this.streams.set(a.name, await hmacStream(this.key, message, Math.ceil(bytes / 32)));
  }

  source(a: Attribute): StreamBytes {
    return new StreamBytes(this.streams.get(a.name)!);
  }

  size(a: Attribute): number {
    return this.streams.get(a.name)!.length;
  }
}

/** The report of `truth` in `window`. Coins, in order: the id (24 bytes), the `sample` index,
 * then each carried attribute's. Synchronous once the permanent coins are computed. */
export function encodeReport(schema: Schema, truth: Truth, window: string, source: RandomSource = SYSTEM,
  permanent?: PermanentCoins): Report {
  const id = newReportId(source);
  let carried = schema.attributes;
  if (schema.split === "sample") carried = [carried[randbelow(carried.length, source)]];
  const values: Record<string, unknown> = {};
  for (const a of carried) {
    values[a.name] = a.mech.encode(a, truth[a.name], source, a.memo ? permanent!.source(a) : undefined);
  }
  return { id, schema: schema.name, version: schema.version, window, epsilon: schema.epsilon, values };
}

/** Encodes with permanent coins, making a memoised attribute's HMAC stream longer when its
 * encoder ran out (GRR's rejection sampling has no fixed length). The fresh coins are replayed
 * from the start, so a retry draws exactly what one pass with a long enough stream would. */
export async function encodeWithPermanent(schema: Schema, truth: Truth, window: string, source: RandomSource,
  secret: DeviceSecret | undefined): Promise<Report> {
  if (schema.epsilonPermanent === undefined) return encodeReport(schema, truth, window, source);
  const coins = await PermanentCoins.make(schema, truth, secret!);
  const replay = new Replay(source);
  for (;;) {
    try {
      return encodeReport(schema, truth, window, replay, coins);
    } catch (e) {
      if (!(e instanceof StreamExhausted)) throw e;
      await Promise.all(schema.attributes.filter((a) => a.memo).map((a) => coins.extend(a, 2 * coins.size(a))));
      replay.rewind();
    }
  }
}

/** Remembers the bytes taken so that an encoding can be run again with the same fresh coins. */
class Replay implements RandomSource {
  private taken: Uint8Array[] = [];
  private at = 0;
  constructor(private readonly source: RandomSource) {}
  take(n: number): Uint8Array {
    if (this.at < this.taken.length) return this.taken[this.at++];
    const bytes = this.source.take(n).slice();
    this.taken.push(bytes);
    this.at++;
    return bytes;
  }
  rewind(): void {
    this.at = 0;
  }
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
  checkDeviceSecret(s, options.deviceSecret);
  const truth = validateRecord(s, record);
  const window = resolveWindow(s, options.window);
  return encodeWithPermanent(s, truth, window, options.source ?? SYSTEM, options.deviceSecret);
}

export function resolveWindow(schema: Schema, window: string | Date | undefined): string {
  if (window === undefined || window instanceof Date) return windowOf(window ?? Date.now(), schema.window);
  try {
    windowStart(window, schema.window);
  } catch (e) {
    throw new RecordError("window", (e as Error).message);
  }
  return window;
}

/** The most characters one report's JSON text can take: a greedy server could otherwise make
 * every report huge (as max_report_bytes in Python). */
export function maxReportBytes(schema: Schema): number {
  const skeleton = JSON.stringify({ id: "x".repeat(64), schema: schema.name, version: schema.version, window: "0000-00-00T00",
    epsilon: schema.epsilon, values: {} }).length + 16;
  const widths = schema.attributes.map((a) => pyJson(a.name).length + 4 + a.mech.wireBytes(a));
  return skeleton + (schema.split === "sample" ? Math.max(...widths) : widths.reduce((x, y) => x + y, 0));
}
