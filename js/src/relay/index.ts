/**
 * ldp-telemetry/relay, the optional relay module as an ES module: importing it installs it, so
 * that a TelemetryClient given the `relay` option sends each report alone through its relay
 * (`import "ldp-telemetry/relay";`). Its parts are exported for tests and other uses.
 */
import { installRelay } from "../relay-hook.js";
import { Route } from "./route.js";

installRelay((context) => new Route(context));

export { setupBaseSender, encap, keySchedule, hasX25519, SenderContext, KEM_X25519, KDF_HKDF_SHA256, AEAD_AES_128_GCM } from "./hpke.js";
export { chooseKeyConfig, bhttpRequest, paddedSize, relayRefusal, encapsulate, varint, HEADER_BYTES, REQUEST_OVERHEAD, PAD_UNIT,
  MAX_REQUEST_BYTES, KEY_PROBLEM_TYPE, type KeyConfig } from "./ohttp.js";
export { Route, KEY_GAP_MS, KEYS_MAX_AGE_MS, type RouteTimes } from "./route.js";
