// The package as an app gets it: packed (npm pack), installed from the tarball into a project outside
// the repository, then loaded with require() from CommonJS and with import from an ES module
// (DESIGN.md: both module systems, Node >= 20.19). Both give the one module instance: no second copy
// of the client's classes (an instanceof across the two would fail).
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { tempDir } from "./helpers.js";

const PACKAGE = fileURLToPath(new URL("..", import.meta.url));
const npm = (args, cwd) => execFileSync("npm", [...args, "--offline", "--no-audit", "--no-fund", "--loglevel=error"], { cwd, encoding: "utf8" });

test("the packed package loads with require() and with import, as one module", () => {
  const app = tempDir("ldp-js-app-");
  const tarball = npm(["pack", "--pack-destination", app], PACKAGE).trim().split("\n").pop();
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", version: "1.0.0", private: true, type: "commonjs" }));
  npm(["install", join(app, tarball)], app);
  writeFileSync(join(app, "main.js"), `
const required = require("ldp-telemetry");
import("ldp-telemetry").then((imported) => {
  const client = new required.TelemetryClient({ endpoint: "http://127.0.0.1:9", maxEpsilon: 2, store: new imported.MemoryStore(),
    schema: { name: "app", version: 1, epsilon: 1, attributes: [{ name: "flag", type: "boolean" }] }, logger: { warn() {}, error() {} } });
  console.log(JSON.stringify({
    same: required.TelemetryClient === imported.TelemetryClient,
    instance: client instanceof imported.TelemetryClient,
    randomize: typeof required.randomize,
  }));
  return client.close(0);
});
`);
  writeFileSync(join(app, "main.mjs"), `import { TelemetryClient, parseJson } from "ldp-telemetry";\nconsole.log(typeof TelemetryClient, typeof parseJson);\n`);
  // The optional relay module, both ways: it installs itself in the one core module.
  writeFileSync(join(app, "relay.mjs"), `import "ldp-telemetry/relay";\nimport { encapsulate } from "ldp-telemetry/relay";\nconsole.log(typeof encapsulate);\n`);
  writeFileSync(join(app, "relay.js"), `const { encapsulate } = require("ldp-telemetry/relay");\nconsole.log(typeof encapsulate);\n`);
  const run = (file) => execFileSync(process.execPath, [file], { cwd: app, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] }).trim();
  assert.deepEqual(JSON.parse(run("main.js")), { same: true, instance: true, randomize: "function" });
  assert.equal(run("main.mjs"), "function function");
  assert.equal(run("relay.mjs"), "function");
  assert.equal(run("relay.js"), "function");
});
