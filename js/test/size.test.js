// The browser bundle's ceiling (DESIGN.md "JavaScript client"): at most 16 KB minified and gzipped
// (gzip -9). A ceiling, not a target: the bundle is the ES module's own program, unsqueezed.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { bundleSize, BUDGET, CORE, RELAY } from "../scripts/size.mjs";

test("the browser bundle is at most 16 KB minified and gzipped", (t) => {
  const { minified, gzipped } = bundleSize();
  const line = `dist/ldp-telemetry.min.js: ${minified} bytes minified, ${gzipped} bytes gzipped (budget ${BUDGET})`;
  t.diagnostic(line);
  assert.ok(gzipped <= BUDGET, line);
});

test("the relay module is a <script> file of its own: none of it is in the core's bundle", (t) => {
  const { minified, gzipped } = bundleSize(RELAY);
  t.diagnostic(`dist/${RELAY}: ${minified} bytes minified, ${gzipped} bytes gzipped`);
  const read = (file) => readFileSync(new URL(`../dist/${file}`, import.meta.url), "utf8");
  for (const mark of ["message/bhttp request", "X25519", "HPKE-v1"]) {
    assert.ok(read(RELAY).includes(mark), mark);
    assert.ok(!read(CORE).includes(mark), mark);
  }
});
