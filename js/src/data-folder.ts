/**
 * The data folder under Node (`dataDir`, by default the Python client's place: `$XDG_DATA_HOME` or
 * `~/.local/share`, `~/Library/Application Support`, `%LOCALAPPDATA%`, plus `ldp-telemetry/`), its
 * file names, and the first read of a second start: the cached schema, the ledger and the device
 * secret read synchronously when the client is made (as the Python client does), so a record made
 * at once is randomised at once. That read needs process.getBuiltinModule (Node >= 20.16); where
 * there is none (a browser, an older Node) there is no first read, and records wait in memory for
 * the store (milliseconds).
 */

import { DEVICE_SECRET_BYTES } from "./hmac.js";
import { parseState } from "./storage.js";

type Os = typeof import("node:os");
type Path = typeof import("node:path");
type NodeProcess = {
  env: Record<string, string | undefined>;
  platform: string;
  versions: { node?: string };
  getBuiltinModule?: (id: string) => unknown;
};

export const SECRET_FILE = "device-secret";

/** The file of a schema's outbox, ledger and cached schema. */
export const stateFile = (schema: string) => `js-outbox-${schema}.json`;

function nodeProcess(): NodeProcess | undefined {
  const p = (globalThis as { process?: NodeProcess }).process;
  return typeof p?.versions?.node === "string" ? p : undefined;
}

export function isNode(): boolean {
  return nodeProcess() !== undefined;
}

/** Node's built-in module `name` at once, where Node has process.getBuiltinModule (>= 20.16). */
export function builtinNow<T>(name: string): T | undefined {
  return nodeProcess()?.getBuiltinModule?.(`node:${name}`) as T | undefined;
}

/** Node's built-in module `name`: at once where it can be, else imported. (By a computed name, so a
 * bundler building for a browser leaves it alone.) */
export async function builtin<T>(name: string): Promise<T> {
  return builtinNow<T>(name) ?? ((await import(/* @vite-ignore */ /* webpackIgnore: true */ `node:${name}`)) as T);
}

/** The data folder: `given`, else the Python client's default place. */
export function dataFolder(given: string | undefined, os: Os, path: Path): string {
  if (given !== undefined) return given;
  const { env, platform } = nodeProcess()!;
  let base: string;
  if (platform === "win32") base = env.LOCALAPPDATA || path.join(os.homedir(), "AppData", "Local");
  else if (platform === "darwin") base = path.join(os.homedir(), "Library", "Application Support");
  else {
    const xdg = env.XDG_DATA_HOME ?? "";
    // The XDG spec says a relative path is invalid and must be ignored.
    base = path.isAbsolute(xdg) ? xdg : path.join(os.homedir(), ".local", "share");
  }
  return path.join(base, "ldp-telemetry");
}

/** The device secret's bytes as read from `file`: a damaged one is an error, never a new device. */
export function checkedSecret(bytes: Uint8Array, file: string): Uint8Array {
  if (bytes.length !== DEVICE_SECRET_BYTES) throw new Error(`${file} is damaged: ${bytes.length} bytes, not ${DEVICE_SECRET_BYTES}`);
  return bytes;
}

export interface FirstRead {
  /** The cached schema's JSON text. */
  schema: string;
  ledger: [string, number][];
  secret: Uint8Array;
}

/** What a second start of `schema` needs at once, read synchronously from the data folder; undefined
 * when something is missing, damaged or unreadable (the store's open then deals with it and says why). */
export function firstRead(given: string | undefined, schema: string): FirstRead | undefined {
  const fs = builtinNow<typeof import("node:fs")>("fs");
  const os = builtinNow<Os>("os");
  const path = builtinNow<Path>("path");
  if (!fs || !os || !path) return undefined;
  try {
    const dir = dataFolder(given, os, path);
    const state = parseState(fs.readFileSync(path.join(dir, stateFile(schema)), "utf8"));
    const text = state?.schemas[schema];
    if (!state || text === undefined) return undefined;
    const file = path.join(dir, SECRET_FILE);
    const secret = checkedSecret(new Uint8Array(fs.readFileSync(file)), file);
    return { schema: text, ledger: Object.entries(state.ledger[schema] ?? {}), secret };
  } catch {
    return undefined;
  }
}
