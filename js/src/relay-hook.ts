/**
 * Where the core meets the optional relay module (src/relay/: HPKE on Web Crypto, Binary HTTP, the
 * relay's answers). The module is its own entry point, so that the <script> bundle keeps within its
 * ceiling, and loading it installs it here: `import "ldp-telemetry/relay"` (ES module), or
 * ldp-telemetry-relay.min.js after ldp-telemetry.min.js (<script>). A client given the `relay`
 * option asks for it as it starts and, until it has it, whenever it sends; while it is not there,
 * reports wait in the outbox (and the log says why once): a client with a relay never posts around it.
 */

import type { Settings } from "./options.js";
import type { Report } from "./reports.js";
import type { Schema } from "./schema.js";
import type { Row, Store } from "./storage.js";

/** What the sender does with a report after a try: remove it (`settled`: delivered, or dropped with
 * a warning the route logged), or try again: after backoff, `after` ms at least, saying `retry`
 * in the log, or quietly in `after` ms when there is no `retry` (waiting for the keys, say). */
export interface Verdict {
  settled?: boolean;
  retry?: string;
  after?: number;
}

/** How one client's reports go through its relay, each alone in its own request. */
export interface RelayRoute {
  /** The size of the request that carries `row` (keepalive's quota counts it), or Infinity when it
   * cannot go at once (no keys yet, or too soon after fetching them from the aggregator). */
  bytes(row: Row): number;
  /** Seal ahead the requests of the first of `rows` that a closing page could send (within its
   * keepalive quota): at pagehide a request must leave at once, and Web Crypto's answers come only
   * after a closing page is gone. Never throws: a row not sealed is sealed when it is sent. */
  seal(rows: Row[]): Promise<void>;
  /** Send `row` through the relay and say what to do with it. */
  send(row: Row, keepalive: boolean): Promise<Verdict>;
}

/** What a route needs of its client: the settings, the store (whose cache keeps the keys between
 * starts), the schema version a report was made under (undefined when the client no longer knows
 * it), against which it is checked and from which its padding follows, and the client's reader of
 * a served schema (for a version the route fetches itself; so the relay module carries no copy). */
export interface RelayContext {
  settings: Settings;
  store: Promise<Store>;
  schemaOf(report: Report): Schema | undefined;
  parseSchema(served: unknown): Schema;
}

export type RelayModule = (context: RelayContext) => RelayRoute;

let installed: RelayModule | undefined;

/** Called by the relay module's entry points as they load. */
export function installRelay(module: RelayModule): void {
  installed = module;
}

/** The relay module, once loaded. */
export function relayModule(): RelayModule | undefined {
  return installed;
}
