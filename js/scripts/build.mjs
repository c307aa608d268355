// Builds dist/ from one program: the ES module src/index.ts (dist/index.js, with .d.ts types;
// bundlers, Node >= 20, and `require()` on Node >= 20.19), the optional relay module src/relay/index.ts
// (dist/relay.js, `import "ldp-telemetry/relay"`, which installs itself in dist/index.js), and both
// minified for <script> tags (dist/ldp-telemetry.min.js, global `LdpTelemetry`, and
// dist/ldp-telemetry-relay.min.js); then type-checks with tsc, which writes the .d.ts files.
import { build } from "esbuild";
import { execFileSync } from "node:child_process";
import { rmSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { browserBundle, relayBrowserBundle } from "./browser-build.mjs";

process.chdir(fileURLToPath(new URL("..", import.meta.url)));
rmSync("dist", { recursive: true, force: true });
const ESM = { bundle: true, target: "es2022", logLevel: "warning", format: "esm", platform: "neutral" };
await build({ ...ESM, entryPoints: ["src/index.ts"], outfile: "dist/index.js" });
// The relay module installs itself in the core's own hook, so it imports it from dist/index.js rather
// than bundling a second copy of it (the helpers it shares with the core, such as http.ts, are copied).
const core = {
  name: "core",
  setup(b) {
    b.onResolve({ filter: /\/relay-hook\.js$/ }, () => ({ path: "./index.js", external: true }));
  },
};
await build({ ...ESM, entryPoints: ["src/relay/index.ts"], outfile: "dist/relay.js", plugins: [core] });
writeFileSync("dist/ldp-telemetry.min.js", await browserBundle());
writeFileSync("dist/ldp-telemetry-relay.min.js", await relayBrowserBundle());
execFileSync(process.execPath, ["node_modules/typescript/bin/tsc", "-p", "tsconfig.json"], { stdio: "inherit" });
