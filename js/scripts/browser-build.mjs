// The <script> bundles. dist/ldp-telemetry.min.js (global `LdpTelemetry`): src/browser.ts, what a
// page uses of the one program the ES module is, wrapped for a <script> tag and minified (esbuild,
// then terser's compressor: a few hundred bytes). The Node file store, which the client loads with
// import() under Node only, is left out: a page has no file system. dist/ldp-telemetry-relay.min.js:
// the optional relay module (src/relay/browser.ts), which installs itself through `LdpTelemetry`.
import { build, transform } from "esbuild";
import { fileURLToPath } from "node:url";
import { minify } from "terser";

process.chdir(fileURLToPath(new URL("..", import.meta.url)));
const nodeOnly = {
  name: "node-only",
  setup(b) {
    b.onResolve({ filter: /\/store-files\.js$/ }, (args) => ({ path: args.path, external: true }));
  },
};
const BUNDLE = { bundle: true, target: "es2022", logLevel: "warning", entryPoints: ["src/browser.ts"], format: "iife",
  globalName: "LdpTelemetry", platform: "browser", write: false, plugins: [nodeOnly] };
const TERSER = { ecma: 2020, mangle: true, compress: { passes: 2 } };

/** The minified text of the <script> bundle. */
export async function browserBundle() {
  return minifyBrowser((await build(BUNDLE)).outputFiles[0].text);
}

/** The minified text of the relay module's <script> bundle (no global of its own). */
export async function relayBrowserBundle() {
  const { globalName, ...iife } = BUNDLE;
  return minifyBrowser((await build({ ...iife, entryPoints: ["src/relay/browser.ts"] })).outputFiles[0].text);
}

/** For scripts/size-modules.mjs: the bundle before minifying (each module's code under a
 * `// src/<file>` line), and the minifier of such text. */
export async function browserSource() {
  return (await build(BUNDLE)).outputFiles[0].text;
}
export async function minifyBrowser(source) {
  const esbuilt = await transform(source, { minify: true, target: "es2022" });
  return (await minify(esbuilt.code, TERSER)).code;
}
