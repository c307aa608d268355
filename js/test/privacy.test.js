// A privacy audit of the JS encoders: the empirical ε of each mechanism at ε = 1, from many draws
// of the production coins (crypto.getRandomValues: no seed can be fixed, so the tolerance comes
// from the binomial variance instead of a replayed seed).
//
// For two inputs x, x' and an output event E, ε̂ = |ln P̂(E|x) − ln P̂(E|x')|; the claim is
// ε̂ ≤ ε for every event, with equality for the most telling one (each mechanism's (p, q) is that
// event's pair, p/q = e^ε). By the delta method the standard deviation of ln P̂ from N draws is
// sqrt((1 − P)/(N·P)), so sd(ε̂) = sqrt((1 − p)/(N p) + (1 − q)/(N q)). With N = 60,000 draws per
// input and the smallest P here about 0.18, sd(ε̂) ≤ 0.0104; the test allows 4.5 sd, which a correct
// encoder exceeds with probability about 3.4·10⁻⁶ per check (some 30 checks: under 10⁻⁴ a run).
// The most telling event must also come out near ε (within the same band): an encoder that
// leaked less than it claims would be broken too.
import { test } from "node:test";
import assert from "node:assert/strict";
import { parseSchema } from "../dist/index.js";
import { EPSILON_STAR, SystemRandom } from "../dist/index.js";

const N = 60_000;
const EPSILON = 1;
const source = new SystemRandom();

function attribute(spec) {
  return parseSchema({ name: "audit", version: 1, epsilon: EPSILON, attributes: [{ name: "a", ...spec }] }).attributes[0];
}

function rate(a, truth, event) {
  let hits = 0;
  for (let i = 0; i < N; i++) if (event(a.mech.encode(a, truth, source))) hits++;
  return hits / N;
}

/** ε̂ of one event, and the tolerance of 4.5 standard deviations at the observed rates. */
function audit(a, x, y, event) {
  const p = rate(a, x, event);
  const q = rate(a, y, event);
  const eps = Math.abs(Math.log(p) - Math.log(q));
  const sd = Math.sqrt((1 - p) / (N * p) + (1 - q) / (N * q));
  return { eps, tolerance: 4.5 * sd };
}

function check(name, a, x, y, events, tellingIndex) {
  events.forEach((event, i) => {
    const { eps, tolerance } = audit(a, x, y, event);
    assert.ok(eps <= EPSILON + tolerance, `${name}, event ${i}: empirical epsilon ${eps.toFixed(4)} over ${EPSILON} + ${tolerance.toFixed(4)}`);
    if (i === tellingIndex) {
      assert.ok(eps >= EPSILON - tolerance, `${name}: the most telling event gives ${eps.toFixed(4)}, far below ${EPSILON}`);
    }
  });
}

test("privacy: hm's switch point EPSILON_STAR is the closed form of Wang et al. 2019, Eq. 6", () => {
  const cube = (x) => Math.pow(x, 1 / 3); // as Python's x ** (1 / 3)
  assert.equal(EPSILON_STAR, Math.log((-5 + 2 * cube(6353 - 405 * Math.sqrt(241)) + 2 * cube(6353 + 405 * Math.sqrt(241))) / 27));
});

test("privacy: rr at epsilon 1", () => {
  const a = attribute({ type: "boolean" });
  check("rr", a, true, false, [(o) => o === true, (o) => o === false], 0);
});

test("privacy: grr at epsilon 1 (4 categories)", () => {
  const a = attribute({ type: "categorical", categories: ["a", "b", "c", "d"], mechanism: "grr" });
  check("grr", a, 0, 1, ["a", "b", "c"].map((c) => (o) => o === c), 0);
});

test("privacy: oue at epsilon 1 (4 categories)", () => {
  const a = attribute({ type: "categorical", categories: ["a", "b", "c", "d"], mechanism: "oue" });
  // Inputs 0 and 1 differ in bits 0 and 1; the joint outcome (1, 0) is the most telling.
  const events = [[1, 0], [0, 1], [1, 1], [0, 0]].map(([u, v]) => (o) => o[0] === u && o[1] === v);
  check("oue", a, 0, 1, events, 0);
});

test("privacy: histogram (grr over buckets) at epsilon 1", () => {
  const a = attribute({ type: "histogram", edges: [0, 10, 20, 30], mechanism: "grr" });
  check("histogram", a, 0, 2, ["[0, 10)", "[10, 20)"].map((c) => (o) => o === c), 0);
});

for (const mechanism of ["duchi", "pm", "hm", "laplace"]) {
  test(`privacy: ${mechanism} at epsilon 1 (the top of the range against the bottom)`, () => {
    const a = attribute({ type: "numeric", range: [0, 10], mechanism });
    // A report at or above 1 (duchi: the bit 1) is each mean mechanism's most telling event.
    const high = mechanism === "duchi" ? (o) => o === 1 : (o) => o >= 1;
    const low = mechanism === "duchi" ? (o) => o === 0 : (o) => o <= -1;
    check(mechanism, a, 10, 0, [high, low], 0);
  });
}

test("privacy: a memoised rr report is epsilon-LDP at its instantaneous layer's composed (p, q)", async () => {
  // Over devices (fresh secrets), one memoised report is exactly ε-LDP: p/q of the composition = e^ε.
  const { randomize } = await import("../dist/index.js");
  const schema = { name: "m", version: 1, epsilon: EPSILON, epsilon_permanent: 3, attributes: [{ name: "a", type: "boolean" }] };
  const n = 4000; // each draw needs its own secret and HMAC: fewer draws, a wider band below
  const draw = async (truth) => {
    let hits = 0;
    for (let i = 0; i < n; i++) {
      const secret = crypto.getRandomValues(new Uint8Array(32));
      if ((await randomize(schema, { a: truth }, { deviceSecret: secret })).values.a) hits++;
    }
    return hits / n;
  };
  const p = await draw(true);
  const q = await draw(false);
  const eps = Math.log(p / q);
  const tolerance = 4.5 * Math.sqrt((1 - p) / (n * p) + (1 - q) / (n * q));
  assert.ok(Math.abs(eps - EPSILON) <= tolerance, `memoised rr: ${eps.toFixed(4)} vs ${EPSILON} ± ${tolerance.toFixed(4)}`);
});
