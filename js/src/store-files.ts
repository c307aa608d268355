/**
 * The Node store: files in a data folder (`dataDir`; by default the Python client's place:
 * data-folder.ts), folder 0700 and files 0600. The device secret is the Python client's own
 * file (`device-secret`, 32 bytes), so both clients on one machine are one device. The outbox,
 * ledger and cached schema of a schema are one JSON file, `js-outbox-<schema>.json`, replaced
 * atomically and durably (write a temporary file, sync it, rename, sync the folder: after a power
 * cut the file is the old one or the new one, whole); every change happens under a lock file, so
 * two processes cannot both spend a window. A file that reads back damaged is set aside and the
 * ledger errs on the side of "spent": the current UTC day counts as spent (no window of it is
 * reported again), since what the damaged ledger held cannot be known.
 */

import type { DeviceSecret } from "./hmac.js";
import type { Report } from "./reports.js";
import { builtin, checkedSecret, dataFolder, SECRET_FILE, stateFile } from "./data-folder.js";
import { MAX_EPSILON } from "./schema.js";
import { appendTo, emptyState, parseState, type Appended, type Limits, type Row, type State, type Store } from "./storage.js";
import { windowOf } from "./windows.js";

type Fs = typeof import("node:fs/promises");

const STALE_LOCK_MS = 30_000; // a lock older than this was left by a process that died holding it
const LOCK_WAIT_MS = 10_000;
// What a day whose ledger was damaged counts as spent: the most one report may spend (what was
// really spent is unknown; the day's entry blocks all its windows whatever the number).
const UNKNOWN_SPEND = MAX_EPSILON;

/** The data folder when `dataDir` is not given (the Python client's `data_dir`). */
export async function defaultDataDir(): Promise<string> {
  return dataFolder(undefined, await builtin("os"), await builtin("path"));
}

export class FileStore implements Store {
  readonly kind = "files";
  private constructor(private readonly fs: Fs, private readonly dir: string, private readonly schema: string,
    private readonly file: string, private readonly join: (...p: string[]) => string) {}

  static async open(dataDir: string | undefined, schema: string): Promise<FileStore> {
    const fs = await builtin<Fs>("fs/promises");
    const path = await builtin<typeof import("node:path")>("path");
    const dir = dataFolder(dataDir, await builtin("os"), path);
    await fs.mkdir(dir, { recursive: true, mode: 0o700 });
    return new FileStore(fs, dir, schema, path.join(dir, stateFile(schema)), path.join);
  }

  get path(): string {
    return this.file;
  }

  async deviceSecret(): Promise<DeviceSecret> {
    const file = this.join(this.dir, SECRET_FILE);
    try {
      return await this.readSecret(file);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
    }
    // Written to a private temporary file and linked into place: linking fails if another
    // process (or the Python client) made the secret first, and then theirs is used.
    const temporary = this.join(this.dir, `.device-secret-${process.pid}-${Date.now()}`);
    const secret = globalThis.crypto.getRandomValues(new Uint8Array(32));
    await this.writeSynced(temporary, secret, "wx");
    try {
      await this.fs.link(temporary, file);
      await this.syncFolder();
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
    } finally {
      await this.fs.unlink(temporary);
    }
    return this.readSecret(file);
  }

  private async readSecret(file: string): Promise<Uint8Array> {
    return checkedSecret(new Uint8Array(await this.fs.readFile(file)), file);
  }

  /** The state as last written; a damaged file is set aside first, under the lock. */
  private async read(): Promise<State> {
    return (await this.parse()) ?? this.locked((state) => state);
  }

  /** The file's state (an empty one when there is no file yet), or undefined if it is damaged. */
  private async parse(): Promise<State | undefined> {
    try {
      return parseState(await this.fs.readFile(this.file, "utf8"));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") return emptyState();
      throw e;
    }
  }

  /** Under the lock: the damaged file moved aside (kept for a human to read), and a state whose
   * ledger counts today as spent, so no window is spent twice whatever the lost ledger held. */
  private async setAside(): Promise<State> {
    await this.fs.rename(this.file, `${this.file}.damaged-${Date.now()}`);
    const state = emptyState();
    state.ledger[this.schema] = { [windowOf(Date.now(), "day")]: UNKNOWN_SPEND };
    return state;
  }

  /** `data` in a new file at `path` (0600), on disk before this returns. */
  private async writeSynced(path: string, data: string | Uint8Array, flag: string): Promise<void> {
    const handle = await this.fs.open(path, flag, 0o600);
    try {
      await handle.writeFile(data);
      await handle.sync();
    } finally {
      await handle.close();
    }
  }

  /** Makes a rename or link in the data folder durable. Windows cannot open a folder to sync it
   * (NTFS journals the rename itself). */
  private async syncFolder(): Promise<void> {
    if (process.platform === "win32") return;
    const handle = await this.fs.open(this.dir, "r");
    try {
      await handle.sync();
    } finally {
      await handle.close();
    }
  }

  /** The state replaced whole: synced before the rename (a power cut leaves the old file or the
   * new one, never a torn one), the folder synced after it (the new name survives too). */
  private async write(state: State): Promise<void> {
    const temporary = `${this.file}.${process.pid}.tmp`;
    await this.writeSynced(temporary, JSON.stringify(state), "w");
    await this.fs.rename(temporary, this.file);
    await this.syncFolder();
  }

  /** Runs `change` on the state under the lock file and writes the result. */
  private async locked<T>(change: (state: State) => T): Promise<T> {
    const lock = `${this.file}.lock`;
    const start = Date.now();
    for (;;) {
      try {
        await (await this.fs.open(lock, "wx", 0o600)).close();
        break;
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
        const age = await this.fs.stat(lock).then((s) => Date.now() - s.mtimeMs, () => 0);
        if (age > STALE_LOCK_MS) await this.fs.rm(lock, { force: true });
        else if (Date.now() - start > LOCK_WAIT_MS) throw new Error(`${lock} is held by another process`);
        else await new Promise((r) => setTimeout(r, 5 + Math.random() * 20));
      }
    }
    try {
      const state = (await this.parse()) ?? (await this.setAside());
      const result = change(state);
      await this.write(state);
      return result;
    } finally {
      await this.fs.rm(lock, { force: true });
    }
  }

  async cachedSchema(name: string): Promise<unknown> {
    return (await this.read()).schemas[name];
  }
  async cacheSchema(name: string, text: string): Promise<void> {
    await this.locked((state) => {
      state.schemas[name] = text;
    });
  }
  async ledger(schema: string): Promise<[string, number][]> {
    return Object.entries((await this.read()).ledger[schema] ?? {});
  }
  async append(reports: Report[], limits: Limits): Promise<Appended> {
    return this.locked((s) => appendTo(s, reports, limits));
  }
  async peek(limit: number): Promise<Row[]> {
    return (await this.read()).outbox.slice(0, limit);
  }
  async remove(seqs: number[]): Promise<void> {
    const gone = new Set(seqs);
    await this.locked((state) => {
      state.outbox = state.outbox.filter((r) => !gone.has(r.seq));
    });
  }
  async count(): Promise<number> {
    return (await this.read()).outbox.length;
  }
  async close(): Promise<void> {}
}
