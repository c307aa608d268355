/**
 * The mechanism registry: one object per mechanism, the only place that knows their names
 * (as shared/mechanisms in Python). Each gives its (p, q) at ε, its worst-case variance (which
 * `auto` minimises), its device encoder with coins from a {@link RandomSource}, and, for the
 * share mechanisms, memoisation's two layers. Formulas and sources: DESIGN.md "The math" and the
 * Python docstrings; the draws are tests/vectors/README.md's, byte for byte.
 */

import { pyJson } from "./pyjson.js";
import { bernoulli, randbelow, threshold, uniform, uniform53, SCALE, type RandomSource } from "./random.js";

/** What an encoder needs of an attribute (the schema module's Attribute has it all). */
export interface Encoded {
  readonly name: string;
  readonly epsilon: number;
  readonly p: number;
  readonly q: number;
  readonly categories: readonly string[];
  readonly range?: readonly [number, number];
  readonly memo?: Memo;
  /** A mean mechanism's other parameters (C, z, C_pm, alpha, scale): the served ones, which the
   * coins use, so that this client's reports are the server's to the last bit. */
  readonly params: Readonly<Record<string, number>>;
}

/** The permanent and instantaneous layers of a memoised attribute; p, q are the two composed. */
export interface Memo {
  epsilonPermanent: number;
  permanentP: number;
  permanentQ: number;
  instantP: number;
  instantQ: number;
  p: number;
  q: number;
}

export interface Mechanism {
  readonly name: string;
  readonly types: readonly string[];
  readonly memoisable: boolean;
  parameters(epsilon: number, d: number): [number, number];
  /** The parameters besides p and q that its encoder and estimator use, named as DESIGN.md names
   * them; the derived schema shows them (none for a share). */
  shown(epsilon: number): Record<string, number>;
  worstVariance(epsilon: number, d: number): number;
  /** The wire value of `truth` (a boolean, a category index, or a number), coins from `source`;
   * a memoised attribute's permanent layer takes its coins from `permanent`. */
  encode(a: Encoded, truth: unknown, source: RandomSource, permanent?: RandomSource): unknown;
  /** The most characters one wire value's JSON text can take (a greedy schema is refused). */
  wireBytes(a: Encoded): number;
}

export interface ShareMechanism extends Mechanism {
  memoise(epsilon: number, epsilonPermanent: number, d: number): Memo;
  /** The wire form of the permanent response (never sent as it is; the vectors show it). */
  permanentResponse(a: Encoded, truth: unknown, permanent: RandomSource): unknown;
}

function variance1(p: number, q: number): number {
  // Wang et al. 2017's q(1-q)/(p-q)^2; an ε so small that p == q carries nothing.
  return p > q ? (q * (1 - q)) / (p - q) ** 2 : Infinity;
}

/** What rr, grr and oue share: a response at (p, q) on an internal value, and memoisation
 * (RAPPOR: a permanent response at the attribute's share of ε∞ from the device secret's coins,
 * then an instantaneous one with fresh coins, `keep` solved by bisection so that one report is
 * exactly ε-LDP). */
abstract class Share implements ShareMechanism {
  abstract readonly name: string;
  abstract readonly types: readonly string[];
  readonly memoisable = true;
  abstract parameters(epsilon: number, d: number): [number, number];
  abstract wireBytes(a: Encoded): number;
  protected abstract internal(a: Encoded, truth: unknown): unknown;
  protected abstract respond(a: Encoded, value: unknown, p: number, q: number, source: RandomSource): unknown;
  protected wire(a: Encoded, value: unknown): unknown {
    return value;
  }
  protected uninformativeKeep(_d: number): number {
    return 0.5;
  }
  protected irr(keep: number, _d: number): [number, number] {
    return [keep, 1 - keep];
  }
  protected epsilonOf(p: number, q: number): number {
    return Math.log(p / q);
  }

  worstVariance(epsilon: number, d: number): number {
    const [p, q] = this.parameters(epsilon, d);
    return variance1(p, q);
  }

  shown(): Record<string, number> {
    return {};
  }

  private compose(p1: number, q1: number, keep: number, d: number): [number, number] {
    const [p2, q2] = this.irr(keep, d);
    return [p1 * p2 + (1 - p1) * q2, q1 * p2 + (1 - q1) * q2];
  }

  memoise(epsilon: number, epsilonPermanent: number, d: number): Memo {
    const [p1, q1] = this.parameters(epsilonPermanent, d);
    let low = this.uninformativeKeep(d);
    let high = 1.0;
    for (let i = 0; i < 200; i++) {
      const middle = (low + high) / 2;
      if (middle === low || middle === high) break;
      if (this.epsilonOf(...this.compose(p1, q1, middle, d)) < epsilon) low = middle;
      else high = middle;
    }
    // The lower end is kept: the report's ε never exceeds `epsilon`.
    const [p, q] = this.compose(p1, q1, low, d);
    const [p2, q2] = this.irr(low, d);
    return { epsilonPermanent, permanentP: p1, permanentQ: q1, instantP: p2, instantQ: q2, p, q };
  }

  encode(a: Encoded, truth: unknown, source: RandomSource, permanent?: RandomSource): unknown {
    const value = this.internal(a, truth);
    const memo = a.memo;
    if (!memo) return this.wire(a, this.respond(a, value, a.p, a.q, source));
    if (!permanent) throw new Error("no device secret");
    const prr = this.respond(a, value, memo.permanentP, memo.permanentQ, permanent);
    return this.wire(a, this.respond(a, prr, memo.instantP, memo.instantQ, source));
  }

  permanentResponse(a: Encoded, truth: unknown, permanent: RandomSource): unknown {
    const memo = a.memo!;
    return this.wire(a, this.respond(a, this.internal(a, truth), memo.permanentP, memo.permanentQ, permanent));
  }
}

/** Binary randomised response (Warner 1965): the true bit w.p. p = e^ε/(1+e^ε), else its negation. */
class BinaryRR extends Share {
  readonly name = "rr";
  readonly types = ["boolean"];
  parameters(epsilon: number): [number, number] {
    const e = Math.exp(epsilon);
    return [e / (1 + e), 1 / (1 + e)];
  }
  protected internal(_a: Encoded, truth: unknown): boolean {
    return truth as boolean;
  }
  protected respond(_a: Encoded, value: unknown, p: number, _q: number, source: RandomSource): boolean {
    return bernoulli(p, source) ? (value as boolean) : !value;
  }
  wireBytes(): number {
    return 5; // false
  }

}

/** Generalised RR: the true category w.p. p = e^ε/(e^ε+d-1), else one of the other d-1 uniformly
 * (a uniform index below d-1 that skips over the true one). */
class GeneralisedRR extends Share {
  readonly name = "grr";
  readonly types = ["categorical", "histogram"];
  parameters(epsilon: number, d: number): [number, number] {
    const e = Math.exp(epsilon);
    return [e / (e + d - 1), 1 / (e + d - 1)];
  }
  protected uninformativeKeep(d: number): number {
    return 1 / d;
  }
  protected irr(keep: number, d: number): [number, number] {
    return [keep, (1 - keep) / (d - 1)];
  }
  protected internal(_a: Encoded, truth: unknown): number {
    return truth as number;
  }
  protected respond(a: Encoded, value: unknown, p: number, _q: number, source: RandomSource): number {
    if (bernoulli(p, source)) return value as number;
    const other = randbelow(a.categories.length - 1, source);
    return other >= (value as number) ? other + 1 : other;
  }
  protected wire(a: Encoded, value: unknown): string {
    return a.categories[value as number];
  }
  wireBytes(a: Encoded): number {
    return Math.max(...a.categories.map((c) => pyJson(c).length)); // as Python's json.dumps writes it
  }

}

/** Optimised unary encoding (Wang et al. 2017): a one-hot vector, the true bit 1 w.p. p = 1/2,
 * every other bit w.p. q = 1/(e^ε+1); one coin per bit, in order. */
class OptimisedUnaryEncoding extends Share {
  readonly name = "oue";
  readonly types = ["categorical", "histogram"];
  parameters(epsilon: number): [number, number] {
    return [0.5, 1 / (Math.exp(epsilon) + 1)];
  }
  protected epsilonOf(p: number, q: number): number {
    return Math.log((p * (1 - q)) / (q * (1 - p))); // two inputs differ in two bits
  }
  protected internal(a: Encoded, truth: unknown): number[] {
    const bits = new Array<number>(a.categories.length).fill(0);
    bits[truth as number] = 1;
    return bits;
  }
  protected respond(_a: Encoded, value: unknown, p: number, q: number, source: RandomSource): number[] {
    const below = [threshold(q), threshold(p)];
    return (value as number[]).map((bit) => (uniform53(source) < below[bit] ? 1 : 0));
  }
  wireBytes(a: Encoded): number {
    return 3 * a.categories.length;
  }

}

// Outputs of pm, hm's pm part and laplace are rounded (randomly, without bias) to this grid, so
// the low bits of a double never leak the input (Mironov, CCS 2012).
export const GRID = 2 ** -20;
const ROUNDING_VARIANCE = (GRID * GRID) / 4;
// hm uses pm above this ε (Wang et al. 2019, Eq. 6).
export const EPSILON_STAR = Math.log(
  (-5 + 2 * Math.pow(6353 - 405 * Math.sqrt(241), 1 / 3) + 2 * Math.pow(6353 + 405 * Math.sqrt(241), 1 / 3)) / 27,
);

/** `x` clipped to the range and mapped to t in [-1, 1]. */
export function unit(a: Encoded, x: number): number {
  const [lo, hi] = a.range!;
  const clipped = Math.min(Math.max(x, lo), hi);
  return Math.min(1, Math.max(-1, (2 * (clipped - lo)) / (hi - lo) - 1));
}

/** `y` rounded to a multiple of GRID, up with probability its fractional part (unbiased). */
export function snap(y: number, source: RandomSource): number {
  const scaled = y / GRID;
  const below = Math.floor(scaled);
  return (below + (bernoulli(scaled - below, source) ? 1 : 0)) * GRID;
}

export function pmConstants(epsilon: number): [number, number] {
  const z = Math.exp(epsilon / 2);
  return [z, (z + 1) / (z - 1)];
}

export function duchiC(epsilon: number): number {
  const e = Math.exp(epsilon);
  return (e + 1) / (e - 1);
}

function hmAlpha(epsilon: number): number {
  return epsilon > EPSILON_STAR ? 1 - Math.exp(-epsilon / 2) : 0;
}

function pmVariance(epsilon: number, t: number): number {
  const [z] = pmConstants(epsilon);
  return (t * t) / (z - 1) + (z + 3) / (3 * (z - 1) ** 2) + ROUNDING_VARIANCE;
}

/** One Piecewise Mechanism output for t (unrounded): the band coin, then one uniform. */
function pmSample(t: number, { z, C_pm: c }: Readonly<Record<string, number>>, source: RandomSource): number {
  const left = ((c + 1) / 2) * t - (c - 1) / 2;
  const right = left + c - 1;
  const inside = bernoulli(z / (z + 1), source);
  const u = uniform(source);
  let y: number;
  if (inside) y = left + (c - 1) * u;
  else {
    const s = u * (c + 1); // a point of the two outer pieces laid end to end
    y = s < left + c ? -c + s : right + (s - (left + c));
  }
  return Math.min(c, Math.max(-c, y));
}

abstract class Mean implements Mechanism {
  abstract readonly name: string;
  readonly types = ["numeric"];
  readonly memoisable = false;
  abstract parameters(epsilon: number, d: number): [number, number];
  abstract varianceAt(epsilon: number, t: number): number;
  abstract randomise(a: Encoded, t: number, source: RandomSource): unknown;
  abstract shown(epsilon: number): Record<string, number>;
  worstVariance(epsilon: number): number {
    // Every variance here is monotone in |t|: the worst is at 0 or 1.
    return Math.max(this.varianceAt(epsilon, 0), this.varianceAt(epsilon, 1));
  }
  encode(a: Encoded, truth: unknown, source: RandomSource): unknown {
    return this.randomise(a, unit(a, truth as number), source);
  }
  wireBytes(): number {
    return "-2.2250738585072014e-308".length;
  }
}

/** Duchi et al.'s one-bit mechanism: 1 w.p. q + (p - q)(t + 1)/2; wire 0 or 1. */
class Duchi extends Mean {
  readonly name = "duchi";
  parameters(epsilon: number): [number, number] {
    const e = Math.exp(epsilon);
    return [e / (1 + e), 1 / (1 + e)];
  }
  varianceAt(epsilon: number, t: number): number {
    return duchiC(epsilon) ** 2 - t * t;
  }
  shown(epsilon: number): Record<string, number> {
    return { C: duchiC(epsilon) };
  }
  bit(t: number, p: number, q: number, source: RandomSource): number {
    return bernoulli(q + (p - q) * ((t + 1) / 2), source) ? 1 : 0;
  }
  randomise(a: Encoded, t: number, source: RandomSource): number {
    return this.bit(t, a.p, a.q, source);
  }
  wireBytes(): number {
    return 1;
  }

}

/** Wang et al.'s Piecewise Mechanism (ICDE 2019), rounded to GRID. */
class PiecewiseMechanism extends Mean {
  readonly name = "pm";
  parameters(epsilon: number): [number, number] {
    const [z] = pmConstants(epsilon);
    return [z / (z + 1), 1 / (z * (z + 1))];
  }
  varianceAt(epsilon: number, t: number): number {
    return pmVariance(epsilon, t);
  }
  shown(epsilon: number): Record<string, number> {
    const [z, C_pm] = pmConstants(epsilon);
    return { z, C_pm };
  }
  randomise(a: Encoded, t: number, source: RandomSource): number {
    return snap(pmSample(t, a.params, source), source);
  }

}

/** Wang et al.'s Hybrid Mechanism: pm w.p. α, else duchi's bit written as ±C (not rounded). */
class HybridMechanism extends Mean {
  readonly name = "hm";
  parameters(epsilon: number): [number, number] {
    const alpha = hmAlpha(epsilon);
    const e = Math.exp(epsilon);
    const [z] = pmConstants(epsilon);
    const high = z / (z + 1);
    const far = 1 / (z * (z + 1));
    return [alpha * high + ((1 - alpha) * e) / (1 + e), alpha * far + (1 - alpha) / (1 + e)];
  }
  varianceAt(epsilon: number, t: number): number {
    const alpha = hmAlpha(epsilon);
    const pmPart = alpha ? pmVariance(epsilon, t) + t * t : 0;
    return alpha * pmPart + (1 - alpha) * duchiC(epsilon) ** 2 - t * t;
  }
  shown(epsilon: number): Record<string, number> {
    const [z, C_pm] = pmConstants(epsilon);
    return { z, C_pm, C: duchiC(epsilon), alpha: hmAlpha(epsilon) };
  }
  randomise(a: Encoded, t: number, source: RandomSource): number {
    const { alpha, C } = a.params;
    if (bernoulli(alpha, source)) return snap(pmSample(t, a.params, source), source);
    const [p, q] = DUCHI.parameters(a.epsilon);
    return DUCHI.bit(t, p, q, source) ? C : -C;
  }

}

/** The local Laplace mechanism: t + Lap(2/ε), the exponential by inversion of a 53-bit uniform. */
class LocalLaplace extends Mean {
  readonly name = "laplace";
  parameters(epsilon: number): [number, number] {
    return [0.5, Math.exp(-epsilon) / 2];
  }
  varianceAt(epsilon: number): number {
    return 8 / epsilon ** 2 + ROUNDING_VARIANCE;
  }
  shown(epsilon: number): Record<string, number> {
    return { scale: 2 / epsilon }; // sensitivity 2 over [-1, 1]
  }
  randomise(a: Encoded, t: number, source: RandomSource): number {
    const negative = bernoulli(0.5, source);
    const noise = a.params.scale * -Math.log((uniform53(source) + 1) / SCALE);
    return snap(negative ? t - noise : t + noise, source);
  }

}

const DUCHI = new Duchi();

export const AUTO = "auto";
// In order of preference on a tie under `auto` (at ε ≤ 0.61 hm is duchi: duchi is named).
export const REGISTRY: ReadonlyMap<string, Mechanism> = new Map<string, Mechanism>(
  [new BinaryRR(), new GeneralisedRR(), new OptimisedUnaryEncoding(), DUCHI, new PiecewiseMechanism(),
    new HybridMechanism(), new LocalLaplace()].map((m) => [m.name, m]),
);

export function forType(kind: string): Mechanism[] {
  return [...REGISTRY.values()].filter((m) => m.types.includes(kind));
}

/** The mechanism an attribute of type `kind` asked for (a name or `auto`: the lowest worst-case
 * variance, the first on a tie); an Error naming the choices if it cannot randomise `kind`. */
export function resolve(kind: string, requested: unknown, epsilon: number, d: number): Mechanism {
  const candidates = forType(kind);
  if (requested === AUTO) {
    let best = candidates[0];
    let bestVariance = best.worstVariance(epsilon, d);
    for (const m of candidates.slice(1)) {
      const v = m.worstVariance(epsilon, d);
      if (v < bestVariance) [best, bestVariance] = [m, v];
    }
    return best;
  }
  const found = candidates.find((m) => m.name === requested);
  if (!found) throw new Error([AUTO, ...candidates.map((m) => m.name)].join(", "));
  return found;
}
