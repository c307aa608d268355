/**
 * Python's number and JSON text, where bytes must match the Python client's: a bucket's name
 * (`number_text`) and memoisation's HMAC message (`json.dumps(..., sort_keys=True,
 * separators=(",", ":"))`, ASCII only). Python writes a float with ".0" or an exponent where
 * JavaScript does not (2.0 vs 2, 1e-07 vs 1e-7, 1e+16 vs 10000000000000000); the shortest
 * round-trip digits are the same in both.
 */

/** A number Python holds as a float (`epsilon`, `p`, `q`; a histogram edge given as `100.0`):
 * written as `repr(float)`. */
export class PyFloat {
  constructor(readonly value: number) {}
}

/** The number `v` holds: a {@link PyFloat}'s value, else `v` itself. */
export function num<T>(v: T): T | number {
  return v instanceof PyFloat ? v.value : v;
}

// A JSON string token, or a number token (outside strings, as strings are matched first).
const TOKENS = /"(?:[^"\\]|\\.)*"|-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?/g;
const MARK = "\u0000float";

/** JSON.parse, except that a number written as a float whose value is whole (`1.0`, `1e3`) is a
 * {@link PyFloat}: Python reads it as a float, and where the wire format wants an integer (an OUE
 * bit, a string report's `a`, `max_length`) Python refuses it, while JSON.parse would make it an
 * integer; and a histogram edge written `100.0` is written so again in memoisation's HMAC message,
 * as Python writes it. Other numbers are plain numbers. The client reads served schemas with it. */
export function parseJson(text: string): unknown {
  const marked = text.replace(TOKENS, (t) => (t[0] !== '"' && /[.eE]/.test(t) && Number.isInteger(+t) ? `{${JSON.stringify(MARK)}:${t}}` : t));
  return JSON.parse(marked, (_key, value) => (value !== null && typeof value === "object" && Object.keys(value).length === 1 &&
    MARK in value ? new PyFloat(value[MARK]) : value));
}

/** Python's `repr(x)` of the float `x`: the same shortest round-trip digits as JavaScript's,
 * fixed notation (with ".0" when whole) for exponents -4 to 15, else scientific with a signed
 * exponent of at least two digits. */
export function floatRepr(x: number): string {
  if (!Number.isFinite(x)) throw new RangeError(`no JSON for ${x}`);
  const [mantissa, written] = x.toExponential().split("e"); // "1.5e+16": "1.5", "+16"; "1e-7": "1", "-7"
  const exponent = Number(written);
  // Python writes scientific notation outside 1e-4 <= |x| < 1e16, with an exponent of two digits or more.
  if (exponent < -4 || exponent > 15) return `${mantissa}e${written[0]}${written.slice(1).padStart(2, "0")}`;
  // A whole number with ".0" (-0 too, which String() writes "0").
  return Number.isInteger(x) ? `${Object.is(x, -0) ? "-0" : x}.0` : String(x);
}

/** How a bucket name writes an edge: an integer without a point, else Python's float repr. */
export function numberText(x: number): string {
  return Number.isInteger(x) ? String(x) : floatRepr(x); // String(-0) is "0"
}

/** `s` as a JSON string in ASCII only: JSON.stringify's escapes (\", \\, \n, \b, ..., \u00XX for
 * other controls, lone surrogates as \udXXX) are Python's, and every other character outside
 * printable ASCII becomes \uXXXX per UTF-16 unit, as Python's ensure_ascii writes it. */
export function quote(s: string): string {
  return JSON.stringify(s).replace(/[^\x20-\x7e]/g, (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
}

/** `json.dumps(value, sort_keys=True, separators=(",", ":"))` (ensure_ascii) of a value made of
 * objects, arrays, strings, booleans, null, {@link PyFloat}s and numbers (integers written bare). */
export function pyJson(value: unknown): string {
  if (value instanceof PyFloat) return floatRepr(value.value);
  if (typeof value === "number" && !Number.isInteger(value)) return floatRepr(value);
  if (typeof value === "string") return quote(value);
  if (Array.isArray(value)) return `[${value.map(pyJson)}]`;
  if (value && typeof value === "object") {
    // Python sorts keys by code point; our keys are ASCII field names, where that is UTF-16 order too.
    return `{${Object.keys(value).sort().map((k) => `${quote(k)}:${pyJson((value as Record<string, unknown>)[k])}`)}}`;
  }
  if (value === null || typeof value === "boolean" || typeof value === "number") return String(value);
  throw new TypeError(`no JSON for a ${typeof value}`);
}
