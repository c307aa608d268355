// How the <script> bundle (dist/ldp-telemetry.min.js, global `LdpTelemetry`) is built: for size.
import { build, transform } from "esbuild";
import { fileURLToPath } from "node:url";
import { minify } from "terser";

process.chdir(fileURLToPath(new URL("..", import.meta.url)));
// The browser bundle has a budget of 10 KB gzipped (DESIGN.md), so it is built for size:
// - LDP_FULL is false: code under `if (LDP_FULL)` is dead and dropped, namely what only Node, the
//   tests or the server need (src/flags.d.ts): the server's schema-hygiene checks, redirects (a
//   browser hides them), parseJson, argument checks of internal calls, vector-only helpers;
// - no file system in a browser: the file store is swapped for a stub, so Node's code stays out;
// - internal member names (never JSON keys, options, public API or what a custom `store` is
//   handed: the Store methods, Limits and Row fields) are shortened;
// - terser's compressor runs over esbuild's output (a few hundred bytes smaller);
// - the global is assigned in src/browser.ts, not through esbuild's IIFE export helpers.
const browserStore = {
  name: "browser-store",
  setup(b) {
    b.onResolve({ filter: /\/store-files\.js$/ }, () => ({ path: fileURLToPath(new URL("../src/store-files.browser.ts", import.meta.url)) }));
  },
};
const INTERNAL = ("acked again attempt batchLimit byName counted days deliverDue failure fetched fresh hold inflight " +
  "internal mech memoisable mirror onHide pool randomise ready resolvePending respond running " +
  "schemaAttempt schemaDue secret sender stored timer turn why wire wireBytes worstVariance parameters " +
  "permanentResponse answered claim learn release persist drop post step wake waitSettled busy stopped " +
  "sendNow offer fitting refusal previous bit make beforeTurn batch cap maxReport refill what types " +
  "memoise shown given made settled closed wakeAt check refresh delay send current state db params " +
  "memo strings used data outbox schemas epsilonPermanent spent timeoutMs edgesGiven").split(" ");
const mangleProps = new RegExp(`^(${INTERNAL.join("|")})$`);
// unsafe_* here only rewrite syntax (arrows, methods, String(x) as ""+x); no arithmetic is
// reordered (no unsafe_math, no unsafe_comps: NaN checks written as !(x >= y) stay as they are).
const TERSER = { ecma: 2020, mangle: true, compress: { passes: 3, unsafe: true, unsafe_arrows: true, unsafe_methods: true, pure_getters: true } };
const BUNDLE = { bundle: true, target: "es2022", logLevel: "warning", entryPoints: ["src/browser.ts"], format: "iife",
  write: false, platform: "browser", plugins: [browserStore], define: { LDP_FULL: "false" } };

/** The minified text of the <script> bundle. */
export async function browserBundle() {
  const bundle = await build({ ...BUNDLE, minify: true, mangleProps });
  return (await minify(bundle.outputFiles[0].text, TERSER)).code;
}

/** For scripts/size-modules.mjs: the bundle before minifying (each module's code under a
 * `// src/<file>` line), and a minifier of such text (a few dozen bytes off browserBundle()'s). */
export async function browserSource() {
  return (await build(BUNDLE)).outputFiles[0].text;
}
export async function minifyBrowser(source) {
  const esbuilt = await transform(source, { minify: true, target: "es2022", mangleProps });
  return (await minify(esbuilt.code, TERSER)).code;
}
