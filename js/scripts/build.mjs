// Builds dist/: one ES module with .d.ts types (bundlers, Node >= 20) and one minified IIFE for a
// <script> tag (global `LdpTelemetry`), then type-checks with tsc, which writes the .d.ts files.
import { build } from "esbuild";
import { execFileSync } from "node:child_process";
import { rmSync } from "node:fs";
import { fileURLToPath } from "node:url";

process.chdir(fileURLToPath(new URL("..", import.meta.url)));
rmSync("dist", { recursive: true, force: true });
const common = { bundle: true, target: "es2022", logLevel: "warning" };
await build({ ...common, entryPoints: ["src/index.ts"], format: "esm", outfile: "dist/index.js", platform: "neutral" });
// The browser has no file system: the file store is swapped for a stub, so Node's code stays out.
const browserStore = {
  name: "browser-store",
  setup(b) {
    b.onResolve({ filter: /\/store-files\.js$/ }, () => ({ path: fileURLToPath(new URL("../src/store-files.browser.ts", import.meta.url)) }));
  },
};
await build({ ...common, entryPoints: ["src/browser.ts"], format: "iife", globalName: "LdpTelemetry", minify: true,
  outfile: "dist/ldp-telemetry.min.js", platform: "browser", plugins: [browserStore] });
execFileSync(process.execPath, ["node_modules/typescript/bin/tsc", "-p", "tsconfig.json"], { stdio: "inherit" });
