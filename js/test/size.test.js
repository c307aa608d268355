// The browser bundle's budget (DESIGN.md "JavaScript client"): at most 10 KB minified and gzipped.
import { test } from "node:test";
import assert from "node:assert/strict";
import { bundleSize, BUDGET } from "../scripts/size.mjs";

test("the browser bundle is at most 10 KB minified and gzipped", (t) => {
  const { minified, gzipped } = bundleSize();
  t.diagnostic(`dist/ldp-telemetry.min.js: ${minified} bytes minified, ${gzipped} bytes gzipped (budget ${BUDGET})`);
  assert.ok(gzipped <= BUDGET, `${gzipped} bytes gzipped, over the budget of ${BUDGET}`);
});
