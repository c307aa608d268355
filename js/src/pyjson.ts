/**
 * Python's number and JSON text, where bytes must match the Python client's: a bucket's name
 * (`number_text`) and memoisation's HMAC message (`json.dumps(..., sort_keys=True,
 * separators=(",", ":"))`, ASCII only). Python writes a float with ".0" or an exponent where
 * JavaScript does not (2.0 vs 2, 1e-07 vs 1e-7, 1e+16 vs 10000000000000000); the shortest
 * round-trip digits are the same in both.
 */

/** A number Python holds as a float (`epsilon`, `p`, `q`): written as `repr(float)`. */
export class PyFloat {
  constructor(readonly value: number) {}
}

/** Python's `repr(x)` of the float `x`: fixed notation for exponents -4 to 15, else scientific. */
export function floatRepr(x: number): string {
  if (!Number.isFinite(x)) throw new RangeError(`no JSON for ${x}`);
  if (x === 0) return Object.is(x, -0) ? "-0.0" : "0.0";
  const sign = x < 0 ? "-" : "";
  const [mantissa, exponentText] = Math.abs(x).toExponential().split("e");
  const digits = mantissa.replace(".", "");
  const exponent = Number(exponentText);
  if (exponent < -4 || exponent >= 16) {
    const m = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
    const e = Math.abs(exponent);
    return `${sign}${m}e${exponent < 0 ? "-" : "+"}${e < 10 ? "0" : ""}${e}`;
  }
  if (exponent < 0) return `${sign}0.${"0".repeat(-exponent - 1)}${digits}`;
  const whole = digits.slice(0, exponent + 1).padEnd(exponent + 1, "0");
  const fraction = digits.slice(exponent + 1) || "0";
  return `${sign}${whole}.${fraction}`;
}

/** How a bucket name writes an edge: an integer without a point, else Python's float repr. */
export function numberText(x: number): string {
  return Number.isInteger(x) ? String(x === 0 ? 0 : x) : floatRepr(x);
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
  if (value === null) return "null";
  if (value === true) return "true";
  if (value === false) return "false";
  if (value instanceof PyFloat) return floatRepr(value.value);
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : floatRepr(value);
  if (typeof value === "string") return quote(value);
  if (Array.isArray(value)) return "[" + value.map(pyJson).join(",") + "]";
  if (typeof value === "object") {
    // Python sorts keys by code point; our keys are ASCII field names, where that is UTF-16 order too.
    const keys = Object.keys(value as object).sort();
    return "{" + keys.map((k) => quote(k) + ":" + pyJson((value as Record<string, unknown>)[k])).join(",") + "}";
  }
  throw new TypeError(`no JSON for a ${typeof value}`);
}
