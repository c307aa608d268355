/** ldp-telemetry: local-differential-privacy telemetry for web pages, Node services and Electron apps. */
export { randomize, validateRecord, RecordError, permanentMessage, encodeReport, encodeWithPermanent, newReportId,
  maxReportBytes, PERMANENT_TAG, type Report, type RandomizeOptions, type Truth } from "./reports.js";
export { parseSchema, schemaDict, attributeDict, bucketNames, SchemaError, type Schema, type Attribute } from "./schema.js";
export { REGISTRY, resolve, type Mechanism, type ShareMechanism } from "./mechanisms.js";
export { FixedBytes, SystemRandom, bernoulli, randbelow, uniform53, type RandomSource } from "./random.js";
export { hmacKey, hmacStream, StreamBytes, type DeviceSecret } from "./hmac.js";
export { windowOf, windowStart, windowEnd, overlapping, dayOf, ROLLUP, type WindowKind } from "./windows.js";
export { floatRepr, pyJson } from "./pyjson.js";
export { validateReport, ReportError, type SchemaLookup } from "./validate.js";
