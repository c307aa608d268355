// Builds dist/: one ES module with .d.ts types (bundlers, Node >= 20) and one minified IIFE for a
// <script> tag (global `LdpTelemetry`), then type-checks with tsc, which writes the .d.ts files.
import { build } from "esbuild";
import { execFileSync } from "node:child_process";
import { rmSync } from "node:fs";

rmSync("dist", { recursive: true, force: true });
const common = { entryPoints: ["src/index.ts"], bundle: true, target: "es2022", logLevel: "warning" };
await build({ ...common, format: "esm", outfile: "dist/index.js", platform: "neutral" });
await build({ ...common, format: "iife", globalName: "LdpTelemetry", minify: true, outfile: "dist/ldp-telemetry.min.js",
  platform: "browser" });
execFileSync(process.execPath, ["node_modules/typescript/bin/tsc", "-p", "tsconfig.json"], { stdio: "inherit" });
