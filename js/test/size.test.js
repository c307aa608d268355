// The browser bundle's budget (DESIGN.md "JavaScript client"): at most 10 KB minified and gzipped
// (gzip -9). It was 13.3 KB at first and 11.9 KB with strings and discovery; the <script> build
// leaves out what only Node, the tests or the server need (scripts/browser-build.mjs says what).
import { test } from "node:test";
import assert from "node:assert/strict";
import { bundleSize, BUDGET } from "../scripts/size.mjs";

test("the browser bundle is at most 10 KB minified and gzipped", (t) => {
  const { minified, gzipped } = bundleSize();
  const line = `dist/ldp-telemetry.min.js: ${minified} bytes minified, ${gzipped} bytes gzipped (budget ${BUDGET})`;
  t.diagnostic(line);
  assert.ok(gzipped <= BUDGET, line);
});
