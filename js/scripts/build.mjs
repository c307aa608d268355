// Builds dist/ from one program (src/index.ts): an ES module with .d.ts types (bundlers, Node >= 20;
// `require()` loads it too on Node >= 20.19) and the same program minified for a <script> tag
// (global `LdpTelemetry`), then type-checks with tsc, which writes the .d.ts files.
import { build } from "esbuild";
import { execFileSync } from "node:child_process";
import { rmSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { browserBundle } from "./browser-build.mjs";

process.chdir(fileURLToPath(new URL("..", import.meta.url)));
rmSync("dist", { recursive: true, force: true });
await build({ bundle: true, target: "es2022", logLevel: "warning", entryPoints: ["src/index.ts"], format: "esm", outfile: "dist/index.js", platform: "neutral" });
writeFileSync("dist/ldp-telemetry.min.js", await browserBundle());
execFileSync(process.execPath, ["node_modules/typescript/bin/tsc", "-p", "tsconfig.json"], { stdio: "inherit" });
