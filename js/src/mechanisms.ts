/**
 * The mechanism registry: one object per mechanism, the only place that knows their names
 * (as shared/mechanisms in Python). Each gives its (p, q) at ε, its worst-case variance (which
 * `auto` minimises), its device encoder with coins from a {@link RandomSource}, the check of its
 * wire value, and, for the share mechanisms, memoisation's two layers. Formulas and sources: DESIGN.md "The math" and the
 * Python docstrings; the draws are tests/vectors/README.md's, byte for byte.
 */

import { num, pyJson } from "./pyjson.js";
import { bernoulli, randbelow, uniform53, SCALE, type RandomSource } from "./random.js";
import { fingerprint, olhHash, P, prefix } from "./strings.js";

/** What an encoder needs of an attribute (the schema module's Attribute has it all). */
export interface Encoded {
  readonly name: string;
  readonly epsilon: number;
  readonly p: number;
  readonly q: number;
  readonly categories: readonly string[];
  readonly range?: readonly [number, number];
  readonly memo?: Memo;
  /** A string attribute's discovery: whether it discovers, its alphabet and its served levels. */
  readonly strings?: { readonly discover: boolean; readonly alphabet?: string; readonly levels?: readonly number[] };
  /** A mechanism's other parameters (a mean's C, z, C_pm, alpha, scale; olh's g): the served
   * ones, which the coins use, so that this client's reports are the server's to the last bit. */
  readonly params: Readonly<Record<string, number>>;
}

/** The permanent and instantaneous layers of a memoised attribute, as the derived schema shows
 * them; p, q are the two composed. */
export interface Memo {
  permanent: { epsilon: number; p: number; q: number };
  instantaneous: { p: number; q: number };
  p: number;
  q: number;
}

export interface Mechanism {
  readonly name: string;
  readonly types: readonly string[];
  readonly memoisable: boolean;
  parameters(epsilon: number, d: number): [number, number];
  /** The parameters besides p and q that its encoder and estimator use, named as DESIGN.md names
   * them; the derived schema shows them (none for a share; olh's g is 1/q, q as derived or given). */
  shown(epsilon: number, q: number): Record<string, number>;
  /** (p, q) from served parameters that differ from ours but that DESIGN.md lets a client take
   * as served (olh's g at a half-integer e^ε), else undefined: ours stand. */
  given?(raw: Record<string, unknown>, epsilon: number): Pair | undefined;
  worstVariance(epsilon: number, d: number): number;
  /** The wire value of `truth` (a boolean, a category index, or a number), coins from `source`;
   * a memoised attribute's permanent layer takes its coins from `permanent`. */
  encode(a: Encoded, truth: unknown, source: RandomSource, permanent?: RandomSource): unknown;
  /** Why `value` is no wire value of `a` (what it must be), or undefined when it is one. */
  check(a: Encoded, value: unknown): string | undefined;
  /** The most characters one wire value's JSON text can take (a greedy schema is refused). */
  wireBytes(a: Encoded): number;
}

export interface ShareMechanism extends Mechanism {
  memoise(epsilon: number, epsilonPermanent: number, d: number): Memo;
  /** The wire form of the permanent response (never sent as it is; the vectors show it). */
  permanentResponse(a: Encoded, truth: unknown, permanent: RandomSource): unknown;
}

type Pair = [number, number];

/** e^ε/(1+e^ε) and 1/(1+e^ε): rr's (p, q), and duchi's. */
function logistic(epsilon: number): Pair {
  const e = Math.exp(epsilon);
  return [e / (1 + e), 1 / (1 + e)];
}

/** One randomised-response core for rr, grr and oue (and so for histograms): a response at (p, q)
 * on an internal value (an index, rr's 1 for true, or oue's one-hot bits), and memoisation
 * (RAPPOR: a permanent response at the attribute's share of ε∞ from the device secret's coins,
 * then an instantaneous one with fresh coins, `keep` solved by bisection so that one report is
 * exactly ε-LDP). A response keeps a value w.p. p and moves it to each of the m-1 others w.p.
 * (1-p)/(m-1), with m = 2 for rr and d for grr (the instantaneous layer is uninformative at
 * keep = 1/m); oue (`unary`) responds bit by bit, 1 w.p. p for a 1 and q for a 0, has m = 2 and
 * ε = ln(p(1-q)/(q(1-p))), two inputs differing in two bits; the others ε = ln(p/q). */
function share(name: string, types: string[], parameters: (epsilon: number, d: number) => Pair, unary?: boolean): ShareMechanism {
  const mechanism: ShareMechanism = {
    name, types, memoisable: true, parameters,
    shown: () => ({}),
    // Wang et al. 2017's q(1-q)/(p-q)^2 (p >= q as e^ε >= 1); an ε so small that p == q carries
    // nothing: a division by 0, Infinity.
    worstVariance(epsilon, d) {
      const [p, q] = parameters(epsilon, d);
      return (q * (1 - q)) / (p - q) ** 2;
    },
    memoise(epsilon, epsilonPermanent, d) {
      const [p1, q1] = parameters(epsilonPermanent, d);
      const m = unary ? 2 : d;
      // Both layers and their composition, the instantaneous one keeping a value w.p. `keep`.
      const layers = (keep: number, other = (1 - keep) / (m - 1)): Memo => ({
        permanent: { epsilon: epsilonPermanent, p: p1, q: q1 }, instantaneous: { p: keep, q: other },
        p: p1 * keep + (1 - p1) * other, q: q1 * keep + (1 - q1) * other,
      });
      let low = 1 / m;
      let high = 1.0;
      // Bisection down to adjacent doubles (some 60 steps).
      for (;;) {
        const middle = (low + high) / 2;
        if (middle === low || middle === high) break;
        const { p, q } = layers(middle);
        if (Math.log(unary ? (p * (1 - q)) / (q * (1 - p)) : p / q) < epsilon) low = middle;
        else high = middle;
      }
      // The lower end is kept: the report's ε never exceeds `epsilon`.
      return layers(low);
    },
    encode(a, truth, source, permanent) {
      // The responses in order, each at its (p, q) with its coins: a memoised attribute's permanent
      // layer (the device secret's coins), then the instantaneous one; else the one response.
      if (a.memo && !permanent) throw new Error("no device secret");
      const responses: [{ p: number; q: number }, RandomSource][] = a.memo
        ? [[a.memo.permanent, permanent!], [a.memo.instantaneous, source]] : [[a, source]];
      if (unary) {
        let bits = a.categories.map((_, i) => (i === truth ? 1 : 0)); // one-hot
        for (const [{ p, q }, coins] of responses) bits = bits.map((bit) => (bernoulli(bit ? p : q, coins) ? 1 : 0));
        return bits;
      }
      let index = Number(truth); // a category's index, or rr's 1 for true
      for (const [{ p }, coins] of responses) index = among(index, a.categories.length || 2, p, coins);
      return a.categories.length ? a.categories[index] : index === 1; // grr's category, rr's boolean
    },
    check(a, v) {
      const d = a.categories.length;
      if (unary) return Array.isArray(v) && v.length === d && v.every((b) => b === 0 || b === 1) ? undefined : `must be a list of ${d} integers, each 0 or 1 (OUE)`;
      if (d) return typeof v === "string" && a.categories.includes(v) ? undefined : "must be one of the categories";
      return typeof v === "boolean" ? undefined : "must be JSON true or false";
    },
    // The permanent layer alone is the response of an attribute with its (p, q) and no
    // memoisation, from the permanent coins.
    permanentResponse: (a, truth, permanent) => mechanism.encode({ ...a, ...a.memo!.permanent, memo: undefined }, truth, permanent),
    // Python's json.dumps of the longest: false, a category, or oue's bits ("1, " each).
    wireBytes: (a) => (unary ? 3 * a.categories.length : a.categories.length ? Math.max(...a.categories.map((c) => pyJson(c).length)) : 5),
  };
  return mechanism;
}

/** An index below d's response: itself w.p. p, else a uniform index below d-1 that skips over it. */
function among(value: number, d: number, p: number, source: RandomSource): number {
  if (bernoulli(p, source)) return value;
  const other = randbelow(d - 1, source);
  return other + +(other >= value);
}

/** (p, q) at e = e^ε and g: p = e/(e + g - 1), q = 1/g. By default g is optimal local hashing's,
 * min(65536, floor(e^ε + 1/2) + 1) (Wang et al. 2017: about e^ε + 1). */
const olhPair = (e: number, g = Math.min(65536, Math.floor(e + 0.5) + 1)): Pair => [e / (e + g - 1), 1 / g];

/** Optimal local hashing's g at ε: 1/q (exactly g, once rounded). */
export function olhBuckets(epsilon: number): number {
  return Math.round(1 / olhPair(Math.exp(epsilon))[1]);
}

// Outputs of pm, hm's pm part and laplace are rounded (randomly, without bias) to this grid, so
// the low bits of a double never leak the input (Mironov, CCS 2012).
export const GRID = 2 ** -20;
const ROUNDING_VARIANCE = 2 ** -42; // GRID² / 4
// hm uses pm above this ε (Wang et al. 2019, Eq. 6): ln((-5 + 2∛(6353 - 405√241) + 2∛(6353 + 405√241)) / 27),
// the double Python's shared/mechanisms/means.py computes (test/privacy.test.js checks it).
export const EPSILON_STAR = 0.6093524930273093;

/** The check of a number wire value within `limit` (another client's rounding may exceed it by a
 * relative 1e-9); a float written whole (a PyFloat) is a number here. */
function numberWithin(limit: (a: Encoded) => number): Mechanism["check"] {
  return (a, given) => {
    const v = num(given);
    return typeof v === "number" && Math.abs(v) <= limit(a) * (1 + 1e-9) ? undefined : `must be a number from ${-limit(a)} to ${limit(a)}`;
  };
}

/** `y` rounded to a multiple of GRID, up with probability its fractional part (unbiased). */
export function snap(y: number, source: RandomSource): number {
  const scaled = y / GRID;
  const below = Math.floor(scaled);
  return (below + +bernoulli(scaled - below, source)) * GRID;
}

export function duchiC(epsilon: number): number {
  const e = Math.exp(epsilon);
  return (e + 1) / (e - 1);
}

/** pm's z and C_pm (the server's bounds of a report). */
export function pmConstants(epsilon: number): Pair {
  const { z, C_pm } = pmNumbers(epsilon)[2];
  return [z, C_pm];
}

/** A mean mechanism's numbers at ε: its (p, q), the constants it shows (as DESIGN.md names
 * them) and its variance at t. */
type MeanNumbers = [p: number, q: number, shown: Record<string, number>, variance: (t: number) => number];

/** Wang et al.'s Piecewise Mechanism's numbers: z = e^(ε/2) and C_pm = (z + 1)/(z - 1), which is
 * duchi's C at ε/2. */
function pmNumbers(epsilon: number): MeanNumbers {
  const z = Math.exp(epsilon / 2);
  const C_pm = duchiC(epsilon / 2);
  return [z / (z + 1), 1 / (z * (z + 1)), { z, C_pm }, (t) => (t * t) / (z - 1) + (z + 3) / (3 * (z - 1) ** 2) + ROUNDING_VARIANCE];
}

/** One Piecewise Mechanism output for t, rounded to GRID: the band coin, one uniform, the grid coin. */
function pmSample(t: number, { z, C_pm: c }: Readonly<Record<string, number>>, source: RandomSource): number {
  const left = ((c + 1) / 2) * t - (c - 1) / 2; // the band is [left, left + c - 1]
  const inside = bernoulli(z / (z + 1), source);
  const u = uniform53(source) / SCALE; // uniform in [0, 1)
  const s = u * (c + 1); // outside: a point of the two outer pieces laid end to end
  const y = inside ? left + (c - 1) * u : s < left + c ? -c + s : left + c - 1 + (s - (left + c));
  return snap(Math.min(c, Math.max(-c, y)), source);
}

/** Duchi et al.'s one bit: 1 w.p. q + (p - q)(t + 1)/2. */
function duchiBit(t: number, p: number, q: number, source: RandomSource): number {
  return +bernoulli(q + (p - q) * ((t + 1) / 2), source);
}

/** A mean mechanism: the value x clipped to the range and mapped to t in [-1, 1], then randomised.
 * (Python clips x first: the same t, as the map is monotone and takes lo and hi exactly to -1 and 1,
 * 2(hi - lo)/(hi - lo) being exactly 2.) Every variance here is monotone in |t|: the worst is at 0 or 1. */
function mean(name: string, numbers: (epsilon: number) => MeanNumbers, randomise: (a: Encoded, t: number, source: RandomSource) => number,
  check: Mechanism["check"], wireBytes = "-2.2250738585072014e-308".length): Mechanism {
  return {
    name, types: ["numeric"], memoisable: false,
    parameters: (epsilon) => numbers(epsilon).slice(0, 2) as Pair,
    shown: (epsilon) => numbers(epsilon)[2],
    worstVariance(epsilon) {
      const variance = numbers(epsilon)[3];
      return Math.max(variance(0), variance(1));
    },
    encode(a, x, source) {
      const [lo, hi] = a.range!;
      return randomise(a, Math.min(1, Math.max(-1, (2 * ((x as number) - lo)) / (hi - lo) - 1)), source);
    },
    check,
    wireBytes: () => wireBytes,
  };
}

// Optimal local hashing (Wang et al. 2017; DESIGN.md "Strings"): a fresh hash seed (a, b) per
// report, h = ((a·x + b) mod P) mod g of the value's fingerprint x, then GRR over the g hash
// values. Draws: for an attribute that discovers strings (PEM) first the level, a coin at 1/2 for
// level 0 (the value), else level i = 1 + randbelow(L), whose report hashes the value's prefix of
// levels[i - 1] code points; then a = 1 + randbelow(P - 1), b = randbelow(P), then GRR's. The
// level is drawn apart from the value, so every level's report is ε-LDP. Never memoised: a fixed
// seed would link a device's reports.
const OLH: Mechanism = {
  name: "olh", types: ["string"], memoisable: false,
  parameters: (epsilon) => olhPair(Math.exp(epsilon)),
  shown: (_epsilon, q) => ({ g: Math.round(1 / q) }),
  // Where e^ε is within 1e-9 of a half-integer, another libm may round g the other way: either
  // neighbour is taken as served, with its own p and q (DESIGN.md "Strings").
  given(raw, epsilon) {
    const e = Math.exp(epsilon);
    const half = Math.floor(e) + 0.5;
    const g = raw.g as number;
    return Math.abs(e - half) <= 1e-9 && (g === half + 0.5 || g === half + 1.5) && g <= 65536 ? olhPair(e, g) : undefined;
  },
  worstVariance: () => 0, // the one mechanism for a string
  encode(a, truth, source) {
    const { discover, alphabet, levels } = a.strings!;
    const level = discover && !bernoulli(0.5, source) ? 1 + randbelow(levels!.length, source) : 0;
    const x = fingerprint(level ? prefix(truth as string, levels![level - 1], alphabet!) : (truth as string));
    const seed = 1 + randbelow(P - 1, source);
    const b = randbelow(P, source);
    return { a: seed, b, y: among(olhHash(seed, b, x, a.params.g), a.params.g, a.p, source), ...(discover && { level }) };
  },
  // {"a": a, "b": b, "y": y}, integers, no other key; and "level" (0 to L) on every report of an
  // attribute that discovers strings, on no other.
  check(a, v) {
    const g = a.params.g;
    const top = a.strings!.discover ? a.strings!.levels!.length : -1;
    const ranges: [string, number, number][] = [["a", 1, P - 1], ["b", 0, P - 1], ["y", 0, g - 1]];
    if (top >= 0) ranges.push(["level", 0, top]);
    const o = v as Record<string, unknown>;
    const fits = typeof v === "object" && v !== null && !Array.isArray(v) && Object.keys(o).length === ranges.length &&
      ranges.every(([k, low, high]) => Number.isInteger(o[k]) && (o[k] as number) >= low && (o[k] as number) <= high);
    return fits ? undefined : `must be {"a": 1 to ${P - 1}, "b": 0 to ${P - 1}, "y": 0 to ${g - 1}${top < 0 ? "" : `, "level": 0 to ${top}`}} (integers) with no other key`;
  },
  // {"a": 2147483646, "b": 2147483646, "y": 65535}, and `, "level": L` when discovering.
  wireBytes: (a) => 46 + (a.strings!.discover ? 11 + String(a.strings!.levels!.length).length : 0),
};

export const AUTO = "auto";
// In order of preference on a tie under `auto` (at ε ≤ 0.61 hm is duchi: duchi is named).
export const MECHANISMS: readonly Mechanism[] = [
  // Binary randomised response (Warner 1965): the true bit w.p. p = e^ε/(1+e^ε), else its negation.
  share("rr", ["boolean"], logistic),
  // Generalised RR: the true category w.p. p = e^ε/(e^ε+d-1), else one of the other d-1 uniformly.
  share("grr", ["categorical", "histogram"], (epsilon, d) => {
    const e = Math.exp(epsilon);
    return [e / (e + d - 1), 1 / (e + d - 1)];
  }),
  // Optimised unary encoding (Wang et al. 2017): a one-hot vector, the true bit 1 w.p. p = 1/2,
  // every other bit w.p. q = 1/(e^ε+1); one coin per bit, in order.
  share("oue", ["categorical", "histogram"], (epsilon) => [0.5, 1 / (Math.exp(epsilon) + 1)], true),
  // Duchi et al.'s one-bit mechanism; wire 0 or 1.
  mean("duchi", (epsilon) => {
    const C = duchiC(epsilon);
    return [...logistic(epsilon), { C }, (t) => C ** 2 - t * t];
  }, (a, t, source) => duchiBit(t, a.p, a.q, source), (_a, v) => (v === 0 || v === 1 ? undefined : "must be the JSON integer 0 or 1 (one bit)"), 1),
  // Wang et al.'s Piecewise Mechanism (ICDE 2019), rounded to GRID.
  mean("pm", pmNumbers, (a, t, source) => pmSample(t, a.params, source), numberWithin((a) => pmConstants(a.epsilon)[1] + GRID)),
  // Wang et al.'s Hybrid Mechanism: pm w.p. alpha, else duchi's bit written as ±C (not rounded);
  // at ε ≤ EPSILON_STAR alpha is 0: hm is duchi.
  mean("hm", (epsilon) => {
    const [high, far, shown, pmVariance] = pmNumbers(epsilon);
    const alpha = epsilon > EPSILON_STAR ? 1 - Math.exp(-epsilon / 2) : 0;
    const C = duchiC(epsilon);
    const e = Math.exp(epsilon);
    return [alpha * high + ((1 - alpha) * e) / (1 + e), alpha * far + (1 - alpha) / (1 + e), { ...shown, C, alpha },
      (t) => alpha * (alpha ? pmVariance(t) + t * t : 0) + (1 - alpha) * C ** 2 - t * t];
  }, (a, t, source) => {
    const { alpha, C } = a.params;
    if (bernoulli(alpha, source)) return pmSample(t, a.params, source);
    return duchiBit(t, ...logistic(a.epsilon), source) ? C : -C;
  }, numberWithin((a) => Math.max(pmConstants(a.epsilon)[1] + GRID, duchiC(a.epsilon)))),
  OLH,
  // The local Laplace mechanism: t + Lap(2/ε), the exponential by inversion of a 53-bit uniform.
  mean("laplace", (epsilon) => [0.5, Math.exp(-epsilon) / 2, { scale: 2 / epsilon }, () => 8 / epsilon ** 2 + ROUNDING_VARIANCE],
    (a, t, source) => { // sensitivity 2 over [-1, 1]
      const sign = bernoulli(0.5, source) ? -1 : 1; // ±1 times the noise is exact: t - noise or t + noise
      return snap(t + sign * a.params.scale * -Math.log((uniform53(source) + 1) / SCALE), source);
    },
    // The largest exponential a 53-bit uniform gives is 53 ln 2.
    numberWithin((a) => 1 + (2 / a.epsilon) * 53 * Math.LN2 + GRID)),
];
export const REGISTRY: ReadonlyMap<string, Mechanism> = new Map(MECHANISMS.map((m) => [m.name, m]));

/** The mechanism an attribute of type `kind` asked for (a name or `auto`: the lowest worst-case
 * variance, the first on a tie); an Error naming the choices if it cannot randomise `kind`. */
export function resolve(kind: string, requested: unknown, epsilon: number, d: number): Mechanism {
  const candidates = MECHANISMS.filter((m) => m.types.includes(kind));
  const found = requested === AUTO
    ? candidates.reduce((best, m) => (m.worstVariance(epsilon, d) < best.worstVariance(epsilon, d) ? m : best))
    : candidates.find((m) => m.name === requested);
  if (!found) throw new Error([AUTO, ...candidates.map((m) => m.name)].join(", "));
  return found;
}
