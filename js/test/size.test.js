// The browser bundle's ceiling (DESIGN.md "JavaScript client"): at most 16 KB minified and gzipped
// (gzip -9). A ceiling, not a target: the bundle is the ES module's own program, unsqueezed.
import { test } from "node:test";
import assert from "node:assert/strict";
import { bundleSize, BUDGET } from "../scripts/size.mjs";

test("the browser bundle is at most 16 KB minified and gzipped", (t) => {
  const { minified, gzipped } = bundleSize();
  const line = `dist/ldp-telemetry.min.js: ${minified} bytes minified, ${gzipped} bytes gzipped (budget ${BUDGET})`;
  t.diagnostic(line);
  assert.ok(gzipped <= BUDGET, line);
});
