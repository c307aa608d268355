// What each module adds to the <script> bundle, gzipped: the bundle's size without that module's
// code, against its whole size (roughly: a module's code may keep another's alive). For finding
// where the bytes go (test/size.test.js: the 16 KB ceiling).  node scripts/size-modules.mjs
import { gzipSync } from "node:zlib";
import { browserSource, minifyBrowser } from "./browser-build.mjs";

const gz = async (source) => gzipSync(await minifyBrowser(source), { level: 9 }).length;
const source = await browserSource();
const parts = source.split(/^ {2}\/\/ (src\/[\w.-]+\.ts)$/m); // [head, file, code, file, code, ...]
const whole = await gz(source);
const rows = [];
// The last module assigns the global: without it everything is dead code.
for (let i = 1; i < parts.length - 2; i += 2) {
  rows.push([whole - (await gz(parts.filter((_, j) => j !== i && j !== i + 1).join("\n"))), parts[i]]);
}
console.log(`${whole} bytes gzipped in all; without each module, this many fewer:`);
for (const [bytes, file] of rows.sort((a, b) => b[0] - a[0])) console.log(`${String(bytes).padStart(6)}  ${file}`);
