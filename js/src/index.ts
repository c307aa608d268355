/** ldp-telemetry: local-differential-privacy telemetry for web pages, Node services and Electron apps. */
export { randomize, validateRecord, RecordError, permanentMessage, encodeReport, encodeWithPermanent, newReportId,
  maxReportBytes, PERMANENT_TAG, type Report, type RandomizeOptions, type Truth } from "./reports.js";
export { parseSchema, schemaDict, attributeDict, bucketNames, SchemaError, type Schema, type Attribute, type StringFields } from "./schema.js";
export { REGISTRY, resolve, olhBuckets, EPSILON_STAR, type Mechanism, type ShareMechanism } from "./mechanisms.js";
export { prepareText, prefix, fingerprint, olhHash, P } from "./strings.js";
export { sha256 } from "./sha256.js";
export { FixedBytes, SystemRandom, bernoulli, randbelow, uniform53, type RandomSource } from "./random.js";
export { hmacKey, hmacStream, type DeviceSecret } from "./hmac.js";
export { windowOf, windowStart, windowEnd, overlapping, dayOf, ROLLUP, type WindowKind } from "./windows.js";
export { floatRepr, pyJson, parseJson, PyFloat } from "./pyjson.js";
export { validateReport, ReportError, type SchemaLookup } from "./validate.js";
export { TelemetryClient, type RecordResult } from "./client.js";
export type { ClientOptions, Logger } from "./options.js";
export { MemoryStore, type Store, type Row, type Limits, type Appended } from "./storage.js";
export { FileStore, defaultDataDir } from "./store-files.js";
export { IndexedDbStore } from "./store-idb.js";
export type { DaySpent } from "./ledger.js";
export { installRelay, type RelayModule, type RelayRoute, type RelayContext, type Verdict } from "./relay-hook.js";
