/** The <script> tag's build (global `LdpTelemetry`): the client and randomize(), without the
 * Node file store and the report validator (kept out to stay within the 10 KB budget). */
export { TelemetryClient } from "./client.js";
export { randomize, RecordError } from "./reports.js";
export { parseSchema, SchemaError } from "./schema.js";
