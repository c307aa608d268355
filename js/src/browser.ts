/** The <script> tag's entry (global `LdpTelemetry`): what a page uses of the same program. */
export { TelemetryClient, type RecordResult } from "./client.js";
export { randomize, RecordError } from "./reports.js";
export { parseSchema, SchemaError } from "./schema.js";
export { parseJson } from "./pyjson.js";
export { MemoryStore } from "./storage.js";
// For ldp-telemetry-relay.min.js, the optional relay module, which installs itself with it.
export { installRelay } from "./relay-hook.js";
