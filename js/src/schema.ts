/**
 * The schema model: parse, validate and derive a schema exactly as shared/schema.py does, so
 * the client checks what the server serves (a greedy, malformed or inconsistent schema is
 * refused) and randomises with the served `p` and `q`. Every invalid schema is a
 * {@link SchemaError} whose `field` is the path the server's error would name.
 */

import { AUTO, MECHANISMS, resolve, type Encoded, type Mechanism, type Memo, type ShareMechanism } from "./mechanisms.js";
import { num, numberText, PyFloat } from "./pyjson.js";
import { prepareText } from "./strings.js";
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
// Parameters a mechanism shows besides p and q (a mean's, olh's g); one of another mechanism is refused.
const SHOWN = ["C", "z", "C_pm", "alpha", "scale", "g"];
// p and q (and a memoised attribute's layers) given back must match what we derive within this;
// the served values are the ones used, so this client's coins are the server's (a libm may
// differ from Python's in a last digit).
const PARAMETER_TOLERANCE = 1e-9;
const WINDOWS = ["day", "hour"]; // the first is the default
const SPLITS = ["equal", "sample"]; // the first is the default
// Each type's own fields; a field of another type is refused (a histogram's categories are derived).
const OWN: Record<string, string[]> = {
  boolean: [], categorical: ["categories"], numeric: ["range"], histogram: ["edges", "categories"],
  string: ["max_length", "candidates", "discover", "alphabet", "levels"],
};
const OWN_FIELDS = ["categories", "range", "edges", ...OWN.string];
const SCHEMA_FIELDS = ["name", "version", "epsilon", "epsilon_permanent", "window", "split", "description", "attributes"];
const ATTRIBUTE_FIELDS = ["name", "type", "mechanism", "epsilon", "p", "q", "permanent", "instantaneous", ...OWN_FIELDS, ...SHOWN];
// A string attribute (DESIGN.md "Strings"): the code points of a value kept, and its candidates.
const DEFAULT_STRING_LENGTH = 64;
const MAX_STRING_LENGTH = 256;
const MAX_CANDIDATES = 10_000;
const MAX_ALPHABET = 128;

/** An Error class called `name` whose instances name a `field`; the message is "<field> <what>". */
export function fieldError(name: string) {
  return class extends Error {
    constructor(readonly field: string, what: string) {
      super(`${field} ${what}`);
      this.name = name;
    }
  };
}

/** An invalid schema: `field` is the path the server's error would name. */
export const SchemaError = fieldError("SchemaError");
export type SchemaError = InstanceType<typeof SchemaError>;

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
  /** A histogram's edges as the schema wrote them (100.0 as a PyFloat, when read with parseJson),
   * for memoisation's HMAC message, which writes them as Python does. */
  readonly edgesGiven: readonly unknown[];
  readonly indexOf: ReadonlyMap<string, number>;
  readonly params: Readonly<Record<string, number>>;
  /** A string attribute's own fields as served: `max_length`, the prepared `candidates`,
   * `discover`, `alphabet` when given, and when discovering its `levels` (served or derived). */
  readonly strings?: StringFields;
}

export interface StringFields {
  readonly max_length: number;
  readonly candidates: readonly string[];
  readonly discover: boolean;
  readonly alphabet?: string;
  readonly levels?: readonly number[];
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

type Json = Record<string, any>;

export function isObject(v: unknown): v is Json {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** A finite number (false for what is no number: Number.isFinite does not convert). */
export const isNumber = Number.isFinite as (v: unknown) => v is number;

/** Python's `obj.get(key, default)`: an explicit null is a value (and refused), not the default.
 * (`key in obj` here and below: no field name of a schema is one of Object.prototype's, and
 * JSON.parse makes even "__proto__" an own field.) */
function get(obj: Json, key: string, fallback: unknown): unknown {
  return key in obj ? obj[key] : fallback;
}

/** Throws a SchemaError for `field`: "<field> <what>". Messages say what the field must be and
 * never quote the bad value. */
function bad(field: string, what: string): never {
  throw new SchemaError(field, what);
}

/** `attribute.to_dict()`: the derived attribute as served. With `py`, the floats are marked so
 * that {@link pyJson} writes them as Python does (memoisation's HMAC message). */
export function attributeDict(a: Attribute, py = false): Json {
  /** A copy of `o` (a layer's too) whose numbers are marked as floats when `py`. */
  const floats = (o: object): Json => Object.fromEntries(Object.entries(o).map(([k, v]) => [k, isObject(v) ? floats(v) : py ? new PyFloat(v) : v]));
  return {
    name: a.name, type: a.type, ...(a.range && { range: [...a.range] }),
    // In the HMAC message an edge given as 100.0 is written so, as Python writes it.
    ...(a.edges.length > 0 && { edges: [...(py ? a.edgesGiven : a.edges)] }),
    ...(a.categories.length > 0 && { categories: [...a.categories] }), ...a.strings,
    // A memoised attribute's memo adds its layers (its p and q are the attribute's).
    ...floats({ epsilon: a.epsilon }), mechanism: a.mechanism, ...floats({ p: a.p, q: a.q, ...a.params, ...a.memo }),
  };
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
  if (PARSED.has(obj as object)) return obj as Schema;
  object(obj, "schema", SCHEMA_FIELDS);
  checkName(obj.name, "name");
  within("version", Number.isInteger(obj.version), obj.version, 1, MAX_VERSION, INTEGER);
  const epsilon = checkEpsilon(obj.epsilon, "epsilon");
  const window = oneOf(obj, "window", WINDOWS) as WindowKind;
  const split = oneOf(obj, "split", SPLITS) as "equal" | "sample";
  const description = get(obj, "description", "");
  if (typeof description !== "string" || [...description].length > MAX_DESCRIPTION_LENGTH) {
    bad("description", "must be text of at most 10000 characters");
  }
  requireText(description, "description");
  const raw = list(obj.attributes, "attributes", 1, MAX_ATTRIBUTES);
  raw.forEach((r, i) => object(r, `attributes[${i}]`));
  const sample = split === "sample";
  const epsilons = splitBudget(raw, epsilon, sample);
  const memoised = "epsilon_permanent" in obj;
  const epsilonPermanent = num(obj.epsilon_permanent);
  const permanents = memoised ? permanentBudget(epsilonPermanent, epsilon, epsilons, sample) : []; // each undefined
  const attributes = raw.map((r, i) => attribute(r, epsilons[i], permanents[i], `attributes[${i}]`));
  // Distinct names protect the device too: a record is keyed by name, so a repeated one would let
  // one attribute encode the value only the other checked (its sign, say, told with certainty).
  attributes.forEach((a, i) => {
    if (attributes.findIndex((b) => b.name === a.name) < i) bad(`attributes[${i}].name`, "repeats another attribute's name");
  });
  const schema: Schema = {
    name: obj.name, version: obj.version, epsilon, window, split, description,
    ...(memoised && { epsilonPermanent }),
    attributes, byName: new Map(attributes.map((a) => [a.name, a])),
  };
  PARSED.add(schema);
  return schema;
}

/** `obj[key]`, one of `choices` (the first by default). */
function oneOf(obj: Json, key: string, choices: string[]): string {
  const v = get(obj, key, choices[0]) as string;
  if (!choices.includes(v)) bad(key, `must be one of ${choices.join(", ")}`);
  return v;
}

/** Each attribute's share of ε∞ (`total`), shared as ε is. */
function permanentBudget(total: unknown, epsilon: number, epsilons: number[], sample: boolean): number[] {
  // Under split 'sample' a device may report each attribute in turn: each permanent layer gets
  // ε∞/k, which must exceed ε (and then so does ε∞, as k >= 1); the message names ε·k, which ε∞
  // must exceed.
  const k = sample ? epsilons.length : 1;
  if (!(isNumber(total) && total <= MAX_EPSILON_PERMANENT && epsilon < total / k)) {
    bad("epsilon_permanent", `must be a number in (${epsilon * k}, 50]`);
  }
  return epsilons.map((e) => (sample ? total / k : (total * e) / epsilon));
}

/** The sum of attributes' epsilons rounded once, as Python's math.fsum: each, in [1e-4, 20]
 * (above 2^-14), is a whole number of 2^-66, so the BigInt sum of those is exact. */
function fsum(epsilons: number[]): number {
  return Number(epsilons.reduce((sum, e) => sum + BigInt(e * 2 ** 66), 0n)) / 2 ** 66;
}

function splitBudget(raw: Json[], total: number, sample: boolean): number[] {
  const given = raw.filter((r) => r.epsilon != null).length; // null is absent, as Python's get() is None
  if (!given) return raw.map(() => (sample ? total : total / raw.length));
  if (given < raw.length) bad("attributes", "must all give epsilon or none");
  const values = raw.map((r, i) => checkEpsilon(r.epsilon, `attributes[${i}].epsilon`));
  if (sample) {
    values.forEach((e, i) => {
      if (Math.abs(e - total) > EPSILON_SUM_TOLERANCE) bad(`attributes[${i}].epsilon`, `must be ${total} (split sample)`);
    });
  } else if (Math.abs(fsum(values) - total) > EPSILON_SUM_TOLERANCE) bad("attributes", "epsilons must sum to epsilon");
  return values;
}

/** A derived number given back agrees with ours: within 1e-9, relative to it when it exceeds 1
 * (C is about 2/ε). (A difference that overflows is Infinity, no agreement either.) */
function close(served: unknown, derived: number): boolean {
  return isNumber(num(served)) && Math.abs((num(served) as number) - derived) <= PARAMETER_TOLERANCE * Math.max(1, Math.abs(derived));
}

/** The served form of the derived `want`, when it agrees with ours: a number within tolerance (g,
 * an integer, equal), or a layer with exactly our fields, each agreeing; else `refuse()`. */
function servedValue(given: unknown, want: unknown, field: string, refuse: () => never): unknown {
  if (isObject(want)) {
    const keys = Object.keys(want);
    if (!(isObject(given) && Object.keys(given).length === keys.length)) refuse();
    return Object.fromEntries(keys.map((k) => [k, servedValue(given[k], want[k], field, refuse)]));
  }
  const agrees = field === "g" ? num(given) === want : close(given, want as number);
  return agrees ? num(given) : refuse();
}

function attribute(raw: Json, epsilon: number, epsilonPermanent: number | undefined, where: string): Attribute {
  const type = raw.type;
  const at: (field: string, what: string) => never = (field, what) => bad(`${where}.${field}`, what);
  object(raw, where, ATTRIBUTE_FIELDS);
  checkName(raw.name, `${where}.name`); // a string (1 and "1" would be one key of a record)
  if (!MECHANISMS.some((m) => m.types.includes(type))) at("type", "is unknown");
  for (const key of OWN_FIELDS) if (key in raw && !OWN[type].includes(key)) at(key, `is not allowed on a ${type}`);
  let categories: string[] = [];
  let range: [number, number] | undefined;
  let edges: number[] = [];
  let strings: StringFields | undefined;
  if (type === "string") strings = stringFields(raw, where, at);
  else if (type === "categorical") {
    categories = list(raw.categories, `${where}.categories`, MIN_CATEGORIES, MAX_CATEGORIES);
    checkCategories(categories, `${where}.categories`);
  }
  else if (type === "numeric") range = increasing(raw.range, `${where}.range`, 2, 2) as [number, number];
  else if (type === "histogram") {
    edges = increasing(raw.edges, `${where}.edges`, MIN_CATEGORIES + 1, MAX_CATEGORIES + 1);
    categories = bucketNames(edges);
    if ("categories" in raw && JSON.stringify(raw.categories) !== JSON.stringify(categories)) {
      at("categories", "must be the bucket names of edges");
    }
  }
  checkEpsilon(epsilon, `${where}.epsilon`); // its share, when not given, may be under 1e-4
  const d = Math.max(2, categories.length); // a boolean has two values
  let mech: Mechanism;
  try {
    mech = resolve(type, get(raw, "mechanism", AUTO), epsilon, d);
  } catch (e) {
    at("mechanism", `must be one of ${(e as Error).message}`);
  }
  const [p, q] = mech.given?.(raw, epsilon) ?? mech.parameters(epsilon, d);
  let memo: Memo | undefined;
  if (epsilonPermanent !== undefined) {
    if (!mech.memoisable) at("type", "cannot be memoised");
    memo = (mech as ShareMechanism).memoise(epsilon, epsilonPermanent, d);
  }
  // Every derived number given back must be ours within tolerance, and then the served one is
  // used: the coins are the server's own numbers (V8's exp and log may differ in a last bit). A
  // memoised attribute's layers given back must have our fields, each ours, and no other field
  // (shared/schema.py _check_derived compares them whole). (memo holds its layers and the p and q
  // of both composed, which replace those above: spread last, the layers come last, as served; a
  // share shows no parameter, so none depends on q.)
  const shown = mech.shown(epsilon, q);
  const derived: Json = { p, q, ...shown, ...memo };
  for (const field in derived) {
    // The served value where it agrees with ours, `want`: a number within tolerance (g, an
    // integer, equal: the neighbour given() took, DESIGN.md "Strings"), or a layer field by field
    // (epsilon, p, q: none of Object.prototype's), in our order, which the HMAC message writes.
    if (field in raw) derived[field] = servedValue(raw[field], derived[field], field, () => at(field, `must be ${JSON.stringify(derived[field])} (derived)`));
  }
  for (const field of SHOWN) if (field in raw && !(field in derived)) at(field, `is no parameter of ${mech.name}`);
  // params: the parameters besides p, q and a memoised attribute's layers, as served.
  const params = Object.fromEntries(Object.keys(shown).map((field) => [field, derived[field] as number]));
  return {
    name: raw.name, type, epsilon, mechanism: mech.name, mech, p: derived.p, q: derived.q, categories,
    memo: memo && (derived as Memo), range, edges, edgesGiven: raw.edges ?? [],
    indexOf: new Map(categories.map((c, i) => [c, i])), params, strings,
  };
}

/** A string attribute's own fields, checked as shared/attribute_types.py's String.parse does. */
function stringFields(raw: Json, where: string, at: (field: string, what: string) => never): StringFields {
  const max_length = get(raw, "max_length", DEFAULT_STRING_LENGTH) as number;
  within(`${where}.max_length`, Number.isInteger(max_length), max_length, 1, MAX_STRING_LENGTH, INTEGER);
  const discover = get(raw, "discover", false);
  if (typeof discover !== "boolean") at("discover", "must be true or false");
  const alphabet = raw.alphabet;
  if ("alphabet" in raw) {
    const points = [...(typeof alphabet === "string" ? alphabet : "")];
    // NFC text of 1 to 128 distinct code points, none of them U+FFFD, U+0000, a control or a
    // format character: exactly the text that preparation leaves as it is, without U+FFFD.
    if (!points.length || points.length > MAX_ALPHABET || new Set(points).size < points.length ||
      prepareText(alphabet) !== alphabet || alphabet.includes("\ufffd")) {
      at("alphabet", "must be NFC text of 1 to 128 distinct code points, no U+FFFD or controls");
    }
  }
  let levels: number[] | undefined;
  if (discover) {
    // The code points a discovered string may hold (others are found as U+FFFD).
    if (typeof alphabet !== "string" || !alphabet) at("alphabet", "is needed to discover");
    if ("levels" in raw) {
      levels = increasing(raw.levels, `${where}.levels`, 1, max_length, max_length);
      checkLevels(levels, max_length, alphabet, `${where}.levels`);
    } else levels = derivedLevels(max_length, alphabet);
  } else if ("levels" in raw) at("levels", "need discover: true");
  // The fields as served, for attributeDict.
  return {
    max_length, candidates: checkCandidates(get(raw, "candidates", []), max_length, `${where}.candidates`), discover,
    ...("alphabet" in raw && { alphabet }), ...(levels && { levels }),
  };
}

/** A level's candidates (shared/discovery.py): the first enumerates every prefix of its length,
 * E^length with E the alphabet's code points, U+FFFD and the padding; a later one extends the K
 * = 32 prefixes kept by its step, K·E^step. At most what K prefixes and one code point of the
 * largest alphabet make. */
const KEEP = 32;
const MAX_LEVEL_CANDIDATES = KEEP * (MAX_ALPHABET + 2);
const levelCandidates = (alphabet: string, step: number, first: boolean) => (first ? 1 : KEEP) * ([...alphabet].length + 2) ** step;

/** The levels when a schema gives none, as the server derives them: the longest first level
 * within the bound, then steps of the longest length within it, the last level `maxLength`. */
function derivedLevels(maxLength: number, alphabet: string): number[] {
  const levels = [];
  for (let length = 0; length < maxLength;) {
    let step = 1;
    while (length + step < maxLength && levelCandidates(alphabet, step + 1, !length) <= MAX_LEVEL_CANDIDATES) step++;
    levels.push((length += step));
  }
  return levels;
}

/** Given levels, once increasing prefix lengths from 1 to `maxLength`: the last `maxLength`, each
 * level within the bound of candidates (the server's rules, which bound its work:
 * shared/attribute_types.py _levels). */
function checkLevels(levels: number[], maxLength: number, alphabet: string, where: string): void {
  const last = levels.length - 1;
  if (levels[last] !== maxLength) bad(`${where}[${last}]`, "must be max_length (the last level)");
  levels.forEach((length, i) => {
    if (levelCandidates(alphabet, length - (i && levels[i - 1]), !i) > MAX_LEVEL_CANDIDATES) {
      bad(`${where}[${i}]`, `tests over ${MAX_LEVEL_CANDIDATES} candidates with this alphabet: take shorter steps`);
    }
  });
}

/** At most 10,000 strings, each prepared as a value is, then at most `maxLength` code points and
 * distinct from the others; the prepared strings. */
function checkCandidates(raw: unknown, maxLength: number, where: string): string[] {
  if (!Array.isArray(raw) || raw.length > MAX_CANDIDATES) bad(where, "must be a list of at most 10000 strings");
  const seen = new Set<string>();
  return raw.map((c, i) => {
    const field = `${where}[${i}]`;
    if (typeof c !== "string") bad(field, "must be a string");
    const prepared = prepareText(c);
    if ([...prepared].length > maxLength) bad(field, "is over max_length (prepared)");
    if (seen.has(prepared)) bad(field, "repeats a candidate (prepared)");
    seen.add(prepared);
    return prepared;
  });
}

/** A list of `least` to `most` increasing numbers, each of magnitude at most 1e15 (a range, edges)
 * or, with `top`, an integer from 1 to `top` (levels). */
function increasing(raw: unknown, where: string, least: number, most: number, top?: number): number[] {
  const given = list(raw, where, least, most);
  // PyFloats only come from parseJson: a range's or an edge's is its number, a level's is refused.
  const values: number[] = top ? given : given.map(num);
  values.forEach((value, i) => {
    const field = `${where}[${i}]`;
    if (top) within(field, Number.isInteger(value), value, 1, top, INTEGER);
    else within(field, isNumber(value), value, -MAX_MAGNITUDE, MAX_MAGNITUDE);
    const previous = values[i - 1];
    if (i && !(value - previous >= MIN_RELATIVE_WIDTH * Math.max(1, Math.abs(value), Math.abs(previous)))) {
      bad(field, "must exceed the one before by 1e-9 (relative)");
    }
  });
  return values;
}

/** The names of the buckets `edges` make: `[e0, e1)`, ..., `[e(k-1), ek]`. */
export function bucketNames(edges: readonly number[]): string[] {
  const texts = edges.map(numberText);
  return texts.slice(1).map((b, i) => `[${texts[i]}, ${b}${i < edges.length - 2 ? ")" : "]"}`);
}

/** The histogram bucket of `x`, clipped to [e0, ek] (the last bucket is closed): Python's
 * bisect_right(edges, x) - 1 clipped to the k buckets, which is the number of inner edges (all
 * but the ends; at most 1023 of them, increasing) <= x. */
export function bucket(edges: readonly number[], x: number): number {
  return edges.slice(1, -1).filter((e) => e <= x).length;
}

/** What the categories are: strings of 1 to 64 characters, distinct after NFC. */
function checkCategories(categories: unknown[], where: string): void {
  const seen = new Set<string>();
  categories.forEach((c, i) => {
    const field = `${where}[${i}]`;
    within(field, typeof c === "string", typeof c === "string" ? [...c].length : 0, 1, MAX_CATEGORY_LENGTH, "a string of length");
    requireText(c as string, field);
    // Two spellings of one text (é, and e + a combining accent) would look the same everywhere.
    const normal = (c as string).normalize("NFC");
    if (seen.has(normal)) bad(field, "repeats a category (after NFC normalisation)");
    seen.add(normal);
  });
}

/** Text that shows as what it is: no lone surrogate, no control or format character (U+202E...). */
function requireText(text: string, field: string): void {
  if (/[\p{Cs}\p{Cc}\p{Cf}]/u.test(text)) bad(field, "must be text without control or format characters");
}

function checkName(value: unknown, field: string): void {
  if (typeof value !== "string" || !NAME_RE.test(value)) bad(field, `must match ${NAME_RE}`);
}

function checkEpsilon(given: unknown, field: string): number {
  within(field, isNumber(num(given)), num(given) as number, MIN_EPSILON, MAX_EPSILON);
  return num(given) as number;
}

const INTEGER = "an integer";

/** Refuses `field` unless `ok` and `least <= size <= most`: "<field> must be <what> in [least,
 * most]", the one message of every bound (a number's, an integer's, a list's length). */
function within(field: string, ok: unknown, size: number, least: number, most: number, what = "a number"): void {
  if (!(ok && size >= least && size <= most)) bad(field, `must be ${what} in [${least}, ${most}]`);
}

/** `raw`, a list of `least` to `most` items. */
function list(raw: unknown, field: string, least: number, most: number): any[] {
  within(field, Array.isArray(raw), (raw as any[])?.length, least, most, "a list of length");
  return raw as any[];
}

/** `obj` is a JSON object, with no field outside `allowed` (when given). */
function object(obj: unknown, where: string, allowed?: string[]): asserts obj is Json {
  if (!isObject(obj)) bad(where, "must be an object");
  if (allowed) {
    const unknown = Object.keys(obj).filter((k) => !allowed.includes(k)).sort();
    if (unknown.length) bad(where, `has unknown field(s): ${unknown.join(", ").slice(0, 200)}`);
  }
}
