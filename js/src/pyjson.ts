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

function quote(s: string): string {
  let out = '"';
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    const ch = s[i];
    if (ch === '"') out += '\\"';
    else if (ch === "\\") out += "\\\\";
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (ch === "\b") out += "\\b";
    else if (ch === "\f") out += "\\f";
    else if (c < 0x20 || c > 0x7e) out += "\\u" + c.toString(16).padStart(4, "0"); // UTF-16 units, as Python
    else out += ch;
  }
  return out + '"';
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
