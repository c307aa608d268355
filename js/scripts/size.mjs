// Prints the browser bundle's size, minified and gzipped (gzip -9), beside its ceiling (DESIGN.md
// "JavaScript client": 16 KB, a ceiling and not a target).
import { readFileSync } from "node:fs";
import { gzipSync } from "node:zlib";

export const BUDGET = 16 * 1024;
export function bundleSize() {
  const code = readFileSync(new URL("../dist/ldp-telemetry.min.js", import.meta.url));
  return { minified: code.length, gzipped: gzipSync(code, { level: 9 }).length };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { minified, gzipped } = bundleSize();
  if (process.argv.includes("--json")) console.log(JSON.stringify({ minified, gzipped, budget: BUDGET }));
  else console.log(`dist/ldp-telemetry.min.js: ${minified} bytes minified, ${gzipped} bytes gzipped (budget ${BUDGET})`);
}
