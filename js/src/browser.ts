/** The <script> tag's build: the global `LdpTelemetry` with the client and randomize(), without the
 * Node file store and the report validator (kept out to stay within the 10 KB budget). Assigned
 * here rather than by the bundler's IIFE exports, whose helpers cost bytes. */
import { TelemetryClient } from "./client.js";
import { randomize, RecordError } from "./reports.js";
import { parseSchema, SchemaError } from "./schema.js";

(globalThis as Record<string, unknown>).LdpTelemetry = { TelemetryClient, randomize, RecordError, parseSchema, SchemaError };
