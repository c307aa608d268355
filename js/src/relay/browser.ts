/** The relay module's <script> entry (ldp-telemetry-relay.min.js): it installs itself in the
 * client of ldp-telemetry.min.js, which must be loaded first (the global `LdpTelemetry`). */
import type { RelayModule } from "../relay-hook.js";
import { Route } from "./route.js";

const core = (globalThis as { LdpTelemetry?: { installRelay?: (module: RelayModule) => void } }).LdpTelemetry;
if (!core?.installRelay) throw new Error("ldp-telemetry-relay.min.js needs ldp-telemetry.min.js loaded before it");
core.installRelay((context) => new Route(context));
