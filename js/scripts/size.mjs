// Prints the <script> bundles' sizes, minified and gzipped (gzip -9): the core's beside its ceiling
// (DESIGN.md "JavaScript client": 16 KB, a ceiling and not a target), and the optional relay
// module's, which a page loads only with the `relay` option.
import { readFileSync } from "node:fs";
import { gzipSync } from "node:zlib";

export const BUDGET = 16 * 1024;
export const CORE = "ldp-telemetry.min.js";
export const RELAY = "ldp-telemetry-relay.min.js";

/** The size of dist/<file>, minified and gzipped. */
export function bundleSize(file = CORE) {
  const code = readFileSync(new URL(`../dist/${file}`, import.meta.url));
  return { minified: code.length, gzipped: gzipSync(code, { level: 9 }).length };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const core = bundleSize(CORE);
  const relay = bundleSize(RELAY);
  // The core's figures stay at the top level (bench/run.py, step js-bundle, reads them there).
  if (process.argv.includes("--json")) console.log(JSON.stringify({ ...core, budget: BUDGET, relay }));
  else {
    console.log(`dist/${CORE}: ${core.minified} bytes minified, ${core.gzipped} bytes gzipped (budget ${BUDGET})`);
    console.log(`dist/${RELAY}: ${relay.minified} bytes minified, ${relay.gzipped} bytes gzipped (optional, loaded with the relay option)`);
  }
}
