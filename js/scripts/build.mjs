// Builds dist/: one ES module with .d.ts types (bundlers, Node >= 20) and one minified IIFE for a
// <script> tag (global `LdpTelemetry`), then type-checks with tsc, which writes the .d.ts files.
import { build } from "esbuild";
import { execFileSync } from "node:child_process";
import { rmSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { browserBundle } from "./browser-build.mjs";

process.chdir(fileURLToPath(new URL("..", import.meta.url)));
rmSync("dist", { recursive: true, force: true });
const common = { bundle: true, target: "es2022", logLevel: "warning" };
await build({ ...common, define: { LDP_FULL: "true" }, entryPoints: ["src/index.ts"], format: "esm", outfile: "dist/index.js", platform: "neutral" });

// The browser bundle: built for size (scripts/browser-build.mjs says how).
writeFileSync("dist/ldp-telemetry.min.js", await browserBundle());
execFileSync(process.execPath, ["node_modules/typescript/bin/tsc", "-p", "tsconfig.json"], { stdio: "inherit" });
