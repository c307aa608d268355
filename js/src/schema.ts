/**
 * The schema model: parse, validate and derive a schema exactly as shared/schema.py does, so
 * the client checks what the server serves (a greedy, malformed or inconsistent schema is
 * refused) and randomises with the served `p` and `q`. Every invalid schema is a
 * {@link SchemaError} whose `field` is the path the server's error would name.
 */

import { AUTO, REGISTRY, resolve, type Encoded, type Mechanism, type Memo, type ShareMechanism } from "./mechanisms.js";
import { numberText, PyFloat } from "./pyjson.js";
import type { WindowKind } from "./windows.js";

export const NAME_RE = /^[a-z0-9][a-z0-9_-]{0,63}$/;
export const MAX_EPSILON = 20;
const MAX_EPSILON_PERMANENT = 50;
const MAX_ATTRIBUTES = 64;
const MIN_CATEGORIES = 2;
const MAX_CATEGORIES = 1024;
const MAX_CATEGORY_LENGTH = 64;
const MAX_MAGNITUDE = 1e15;
const MAX_DESCRIPTION_LENGTH = 10_000;
export const MAX_VERSION = 2 ** 31 - 1;
const EPSILON_SUM_TOLERANCE = 1e-9;
// The least ε an attribute may get: below it a report says next to nothing, and duchi's C divides
// by zero once e^ε rounds to 1 (as shared/schema.py's MIN_EPSILON).
const MIN_EPSILON = 1e-4;
// Consecutive range ends or bucket edges differ by at least this of the larger magnitude (and of 1).
const MIN_RELATIVE_WIDTH = 1e-9;
// Parameters a mean mechanism shows besides p and q; one of another mechanism is refused.
const SHOWN = ["C", "z", "C_pm", "alpha", "scale"];
// p and q (and a memoised attribute's layers) given back must match what we derive within this;
// the served values are the ones used, so this client's coins are the server's (a libm may
// differ from Python's in a last digit).
const PARAMETER_TOLERANCE = 1e-9;
const WINDOWS = ["hour", "day"];
const SPLITS = ["equal", "sample"];
const TYPES = ["boolean", "categorical", "numeric", "histogram"];
const SCHEMA_FIELDS = new Set(["name", "version", "epsilon", "epsilon_permanent", "window", "split", "description", "attributes"]);
const ATTRIBUTE_FIELDS = new Set(["name", "type", "categories", "range", "edges", "mechanism", "epsilon", "p", "q",
  "permanent", "instantaneous", ...SHOWN]);

export class SchemaError extends Error {
  constructor(readonly field: string, message: string) {
    super(message);
    this.name = "SchemaError";
  }
}

export interface Attribute extends Encoded {
  readonly name: string;
  readonly type: string;
  readonly epsilon: number;
  readonly mechanism: string;
  readonly mech: Mechanism;
  readonly p: number;
  readonly q: number;
  readonly categories: readonly string[];
  readonly memo?: Memo;
  readonly range?: readonly [number, number];
  readonly edges: readonly number[];
  readonly indexOf: ReadonlyMap<string, number>;
  readonly params: Readonly<Record<string, number>>;
}

export interface Schema {
  readonly name: string;
  readonly version: number;
  readonly epsilon: number;
  readonly window: WindowKind;
  readonly split: "equal" | "sample";
  readonly description: string;
  readonly epsilonPermanent?: number;
  readonly attributes: readonly Attribute[];
  readonly byName: ReadonlyMap<string, Attribute>;
}

type Json = Record<string, unknown>;

function isObject(v: unknown): v is Json {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

export function isNumber(v: unknown): v is number {
  return typeof v === "number" && Number.isFinite(v);
}

/** Python's `obj.get(key, default)`: an explicit null is a value (and refused), not the default. */
function has(obj: object, key: string): boolean {
  return Object.prototype.hasOwnProperty.call(obj, key);
}

function get(obj: Json, key: string, fallback: unknown): unknown {
  return has(obj, key) ? obj[key] : fallback;
}

/** Throws a SchemaError for `field`. Messages are short (they cost bytes in every page that
 * embeds the client) and never quote the bad value back. */
function bad(field: string, what: string): never {
  throw new SchemaError(field, `${field} ${what}`);
}

/** `attribute.to_dict()`: the derived attribute as served. With `py`, the floats are marked so
 * that {@link pyJson} writes them as Python does (memoisation's HMAC message). */
export function attributeDict(a: Attribute, py = false): Json {
  const f = (x: number) => (py ? new PyFloat(x) : x);
  const out: Json = { name: a.name, type: a.type };
  if (a.type === "numeric") out.range = [...a.range!];
  if (a.type === "histogram") out.edges = [...a.edges];
  if (a.categories.length) out.categories = [...a.categories];
  Object.assign(out, { epsilon: f(a.epsilon), mechanism: a.mechanism, p: f(a.p), q: f(a.q) });
  for (const [k, v] of Object.entries(a.params)) out[k] = f(v);
  if (a.memo) {
    const m = a.memo;
    out.permanent = { epsilon: f(m.epsilonPermanent), p: f(m.permanentP), q: f(m.permanentQ) };
    out.instantaneous = { p: f(m.instantP), q: f(m.instantQ) };
  }
  return out;
}

/** The derived schema as the server serves it (JSON-ready). */
export function schemaDict(s: Schema): Json {
  return {
    name: s.name, version: s.version, epsilon: s.epsilon, window: s.window, split: s.split, description: s.description,
    ...(s.epsilonPermanent === undefined ? {} : { epsilon_permanent: s.epsilonPermanent }),
    attributes: s.attributes.map((a) => attributeDict(a)),
  };
}

const PARSED = new WeakSet<object>();

/** Validate a schema (as decoded from JSON) and derive its parameters; a {@link Schema} is
 * returned as it is. Throws {@link SchemaError}. */
export function parseSchema(obj: unknown): Schema {
  if (typeof obj === "object" && obj !== null && PARSED.has(obj)) return obj as Schema;
  if (!isObject(obj)) bad("schema", "must be a JSON object");
  rejectUnknown(obj, SCHEMA_FIELDS, "schema");
  const name = checkName(obj.name, "name");
  const version = obj.version;
  if (!(typeof version === "number" && Number.isInteger(version) && version >= 1 && version <= MAX_VERSION)) {
    bad("version", "must be an integer from 1 to 2^31-1");
  }
  const epsilon = checkEpsilon(obj.epsilon, "epsilon");
  const window = get(obj, "window", "day");
  if (!WINDOWS.includes(window as string)) bad("window", "must be hour or day");
  const split = get(obj, "split", "equal");
  if (!SPLITS.includes(split as string)) bad("split", "must be equal or sample");
  const description = get(obj, "description", "");
  if (typeof description !== "string" || [...description].length > MAX_DESCRIPTION_LENGTH) {
    bad("description", "must be a string of at most 10,000 characters");
  }
  requireText(description, "description");
  const raw = obj.attributes;
  if (!Array.isArray(raw) || raw.length < 1 || raw.length > MAX_ATTRIBUTES) {
    bad("attributes", "must be a list of 1 to 64 attributes");
  }
  const epsilons = splitBudget(raw, epsilon, split as string);
  const permanents = permanentBudget(obj, epsilon, epsilons, split as string);
  const attributes = raw.map((r, i) => attribute(r as Json, epsilons[i], permanents[i], `attributes[${i}]`));
  const byName = new Map<string, Attribute>();
  attributes.forEach((a, i) => {
    if (byName.has(a.name)) bad(`attributes[${i}].name`, "repeats another attribute's name");
    byName.set(a.name, a);
  });
  const schema: Schema = {
    name, version, epsilon, window: window as WindowKind, split: split as "equal" | "sample", description,
    ...(permanents[0] === undefined ? {} : { epsilonPermanent: obj.epsilon_permanent as number }),
    attributes, byName,
  };
  PARSED.add(schema);
  return schema;
}

function permanentBudget(obj: Json, epsilon: number, epsilons: number[], split: string): (number | undefined)[] {
  if (!(has(obj, "epsilon_permanent"))) return epsilons.map(() => undefined);
  const total = obj.epsilon_permanent;
  if (!isNumber(total) || !(epsilon < total && total <= MAX_EPSILON_PERMANENT)) {
    bad("epsilon_permanent", "must be a number above epsilon and at most 50");
  }
  const k = epsilons.length;
  if (split === "sample") {
    // A device may report each attribute in turn: each permanent layer gets ε∞/k, above ε.
    if (!(epsilon < total / k)) {
      bad("epsilon_permanent", "/ the number of attributes must exceed epsilon under split 'sample'");
    }
    return epsilons.map(() => total / k);
  }
  return epsilons.map((e) => (total * e) / epsilon);
}

/** An exactly rounded sum, as Python's math.fsum (Neumaier's compensation suffices for a few terms). */
function fsum(values: number[]): number {
  let sum = 0;
  let c = 0;
  for (const v of values) {
    const t = sum + v;
    c += Math.abs(sum) >= Math.abs(v) ? sum - t + v : v - t + sum;
    sum = t;
  }
  return sum + c;
}

function splitBudget(raw: unknown[], total: number, split: string): number[] {
  raw.forEach((r, i) => {
    if (!isObject(r)) bad(`attributes[${i}]`, "must be a JSON object");
  });
  const given = raw.map((r) => (r as Json).epsilon);
  if (given.every((e) => e === undefined || e === null)) {
    const share = split === "sample" ? total : total / raw.length;
    return raw.map(() => share);
  }
  if (given.some((e) => e === undefined || e === null)) {
    bad("attributes", "must all give epsilon or none");
  }
  const values = given.map((e, i) => checkEpsilon(e, `attributes[${i}].epsilon`));
  if (split === "sample") {
    values.forEach((e, i) => {
      if (Math.abs(e - total) > EPSILON_SUM_TOLERANCE) {
        bad(`attributes[${i}].epsilon`, "must equal the total epsilon under split 'sample'");
      }
    });
  } else if (Math.abs(fsum(values) - total) > EPSILON_SUM_TOLERANCE) {
    bad("attributes", "epsilons must sum to the total epsilon");
  }
  return values;
}

/** A derived number given back agrees with ours: within 1e-9, relative to it when it exceeds 1
 * (C is about 2/ε); a number far from it is refused before any subtraction could overflow. */
function close(given: unknown, derived: number): given is number {
  return isNumber(given) && Math.abs(given) <= 2 * Math.abs(derived) + 1 &&
    Math.abs(given - derived) <= PARAMETER_TOLERANCE * Math.max(1, Math.abs(derived));
}

function attribute(raw: Json, epsilon: number, epsilonPermanent: number | undefined, where: string): Attribute {
  if (raw.type === "string") {
    // DESIGN.md "Strings" (olh) is not implemented on the server side yet; refusing is honest.
    bad(`${where}.type`, "is string (olh), which this version of the JavaScript client cannot randomise yet");
  }
  rejectUnknown(raw, ATTRIBUTE_FIELDS, where);
  const name = checkName(raw.name, `${where}.name`);
  const type = raw.type;
  if (typeof type !== "string" || !TYPES.includes(type)) {
    bad(`${where}.type`, `must be one of ${TYPES.join(", ")}`);
  }
  const allowed: Record<string, string> = { categorical: "categories", numeric: "range", histogram: "edges" };
  for (const own of ["categories", "range", "edges"]) {
    if (has(raw, own) && allowed[type] !== own && !(type === "histogram" && own === "categories")) {
      bad(`${where}.${own}`, `is not allowed on a ${type} attribute`);
    }
  }
  let categories: string[] = [];
  let range: [number, number] | undefined;
  let edges: number[] = [];
  if (type === "categorical") categories = checkCategories(raw.categories, `${where}.categories`);
  else if (type === "numeric") {
    const r = increasing(raw.range, `${where}.range`, 2, 2);
    range = [r[0], r[1]];
  } else if (type === "histogram") {
    edges = increasing(raw.edges, `${where}.edges`, MIN_CATEGORIES + 1, MAX_CATEGORIES + 1);
    categories = bucketNames(edges);
    if (has(raw, "categories") && JSON.stringify(raw.categories) !== JSON.stringify(categories)) {
      bad(`${where}.categories`, "must be the bucket names of edges");
    }
  }
  if (!(epsilon >= MIN_EPSILON)) bad(`${where}.epsilon`, "is under 1e-4 (its share of the total)");
  const d = Math.max(2, categories.length); // a boolean has two values
  let mech: Mechanism;
  try {
    mech = resolve(type, get(raw, "mechanism", AUTO), epsilon, d);
  } catch (e) {
    bad(`${where}.mechanism`, `must be one of ${(e as Error).message}`);
  }
  let [p, q] = mech.parameters(epsilon, d);
  let memo: Memo | undefined;
  if (epsilonPermanent !== undefined) {
    if (!mech.memoisable) {
      bad(`${where}.type`, "cannot be memoised (no epsilon_permanent with a numeric mean)");
    }
    memo = (mech as ShareMechanism).memoise(epsilon, epsilonPermanent, d);
    [p, q] = [memo.p, memo.q];
  }
  // Every derived number given back must be ours within tolerance, and then the served one is
  // used: the coins are the server's own numbers (V8's exp and log may differ in a last bit).
  const derived: Record<string, number> = { p, q, ...mech.shown(epsilon) };
  for (const [field, value] of Object.entries(derived)) {
    if (has(raw, field)) {
      if (!close(raw[field], value)) bad(`${where}.${field}`, `must be ${value} (derived from epsilon and mechanism)`);
      derived[field] = raw[field] as number;
    }
  }
  for (const field of SHOWN) if (has(raw, field) && !has(derived, field)) bad(`${where}.${field}`, `is no parameter of ${mech.name}`);
  ({ p, q } = derived);
  delete derived.p;
  delete derived.q;
  if (memo) memo = { ...servedLayers(raw, memo, where), p, q };
  return {
    name, type, epsilon, mechanism: mech.name, mech, p, q, categories, memo, range, edges,
    indexOf: new Map(categories.map((c, i) => [c, i])), params: derived,
  };
}

/** A memoised attribute's layers: ours, or the served ones when they match ours within tolerance. */
function servedLayers(raw: Json, memo: Memo, where: string): Memo {
  const expect = {
    permanent: { epsilon: memo.epsilonPermanent, p: memo.permanentP, q: memo.permanentQ },
    instantaneous: { p: memo.instantP, q: memo.instantQ },
  };
  const out = { ...memo };
  for (const key of ["permanent", "instantaneous"] as const) {
    if (!has(raw, key)) continue;
    const given = raw[key];
    const want: Record<string, number> = expect[key];
    const ok = isObject(given) && Object.keys(given).length === Object.keys(want).length &&
      Object.entries(want).every(([k, v]) => has(given, k) && close(given[k], v));
    if (!ok) {
      bad(`${where}.${key}`, `must be ${JSON.stringify(want)} (derived from epsilon_permanent)`);
    }
    const g = given as Record<string, number>;
    if (key === "permanent") Object.assign(out, { epsilonPermanent: g.epsilon, permanentP: g.p, permanentQ: g.q });
    else Object.assign(out, { instantP: g.p, instantQ: g.q });
  }
  return out;
}

function increasing(raw: unknown, where: string, least: number, most: number): number[] {
  if (!Array.isArray(raw) || raw.length < least || raw.length > most) {
    const count = least === most ? `${least}` : `${least} to ${most}`;
    bad(where, `must be a list of ${count} increasing numbers`);
  }
  raw.forEach((value, i) => {
    if (!isNumber(value) || !(Math.abs(value) <= MAX_MAGNITUDE)) {
      bad(`${where}[${i}]`, "must be a number of magnitude at most 1e15");
    }
    if (i && !(value - raw[i - 1] >= MIN_RELATIVE_WIDTH * Math.max(1, Math.abs(value), Math.abs(raw[i - 1])))) {
      bad(`${where}[${i}]`, "must exceed the number before it by 1e-9 of the larger (and of 1)");
    }
  });
  return raw as number[];
}

/** The names of the buckets `edges` make: `[e0, e1)`, ..., `[e(k-1), ek]`. */
export function bucketNames(edges: readonly number[]): string[] {
  const texts = edges.map(numberText);
  const last = edges.length - 2;
  return texts.slice(0, -1).map((a, i) => `[${a}, ${texts[i + 1]}${i === last ? "]" : ")"}`);
}

/** The histogram bucket of `x`, clipped to [e0, ek] (the last bucket is closed). */
export function bucket(edges: readonly number[], x: number): number {
  // bisect_right: the number of edges <= x.
  let lo = 0;
  let hi = edges.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (x < edges[mid]) hi = mid;
    else lo = mid + 1;
  }
  return Math.min(edges.length - 2, Math.max(0, lo - 1));
}

function checkCategories(raw: unknown, where: string): string[] {
  if (!Array.isArray(raw) || raw.length < MIN_CATEGORIES || raw.length > MAX_CATEGORIES) {
    bad(where, "must be a list of 2 to 1024 strings");
  }
  const seen = new Set<string>();
  raw.forEach((c, i) => {
    if (typeof c !== "string" || c.length === 0 || [...c].length > MAX_CATEGORY_LENGTH) {
      bad(`${where}[${i}]`, "must be a non-empty string of at most 64 characters");
    }
    requireText(c, `${where}[${i}]`);
    // Two spellings of one text (é, and e + a combining accent) would look the same everywhere.
    const normal = c.normalize("NFC");
    if (seen.has(normal)) {
      bad(`${where}[${i}]`, "repeats a category (after Unicode NFC normalisation)");
    }
    seen.add(normal);
  });
  return raw as string[];
}

const LONE_SURROGATE = /\p{Cs}/u;
const CONTROL_OR_FORMAT = /[\p{Cc}\p{Cf}]/u;

/** Text that shows as what it is: no lone surrogate, no control or format character (U+202E...). */
function requireText(text: string, field: string): void {
  if (LONE_SURROGATE.test(text) || CONTROL_OR_FORMAT.test(text)) bad(field, "must be Unicode text without control or format characters");
}

function checkName(value: unknown, field: string): string {
  if (typeof value !== "string" || !NAME_RE.test(value)) {
    bad(field, "must match [a-z0-9][a-z0-9_-]{0,63}");
  }
  return value;
}

function checkEpsilon(value: unknown, field: string): number {
  if (!isNumber(value) || !(value >= MIN_EPSILON && value <= MAX_EPSILON)) {
    bad(field, "must be a number in [1e-4, 20]");
  }
  return value;
}

function rejectUnknown(obj: Json, allowed: Set<string>, where: string): void {
  const unknown = Object.keys(obj).filter((k) => !allowed.has(k)).sort();
  if (unknown.length) bad(where, `has unknown field(s): ${unknown.join(", ").slice(0, 200)}`);
}

export function mechanismOf(name: string): Mechanism | undefined {
  return REGISTRY.get(name);
}
