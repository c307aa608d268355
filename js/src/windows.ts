/**
 * Aggregation windows: the UTC hour or day a report was made in, named by its start
 * (`YYYY-MM-DD` for a day, `YYYY-MM-DDTHH` for an hour). The finest time the server learns.
 */

export type WindowKind = "hour" | "day";

// [0-9], not \d: the window names are ASCII only (a non-ASCII digit would name a window twice).
const PATTERNS: Record<WindowKind, RegExp> = {
  day: /^[0-9]{4}-[0-9]{2}-[0-9]{2}$/,
  hour: /^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}$/,
};
export const ROLLUP = "all";
const LENGTH_MS: Record<WindowKind, number> = { day: 86_400_000, hour: 3_600_000 };

function pad(n: number, width = 2): string {
  return String(n).padStart(width, "0");
}

/** The name of the `kind` window containing `moment` (UTC). */
export function windowOf(moment: Date | number, kind: WindowKind): string {
  const d = new Date(moment);
  if (Number.isNaN(d.getTime())) throw new RangeError("windowOf needs a valid time");
  const day = `${pad(d.getUTCFullYear(), 4)}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())}`;
  return kind === "hour" ? `${day}T${pad(d.getUTCHours())}` : day;
}

/** The UTC start of the window called `name` (ms since the epoch); a RangeError if it is none. */
export function windowStart(name: unknown, kind: WindowKind): number {
  const pattern = PATTERNS[kind];
  if (!pattern) throw new RangeError("kind must be hour or day");
  if (typeof name !== "string" || !pattern.test(name)) {
    throw new RangeError(`window must name a UTC ${kind}`);
  }
  const [y, m, d, h] = [+name.slice(0, 4), +name.slice(5, 7), +name.slice(8, 10), kind === "hour" ? +name.slice(11, 13) : 0];
  const t = Date.UTC(y, m - 1, d, h);
  const back = new Date(t);
  // Date.UTC rolls 2026-02-29 over to March 1st: a real date comes back unchanged.
  if (y < 1 || back.getUTCFullYear() !== y || back.getUTCMonth() !== m - 1 || back.getUTCDate() !== d || back.getUTCHours() !== h) {
    throw new RangeError(`window must name a UTC ${kind}`);
  }
  return t;
}

export function windowEnd(name: string, kind: WindowKind): number {
  return windowStart(name, kind) + LENGTH_MS[kind];
}

/** The windows whose time overlaps `name`: itself, and its day (an hour) or its 24 hours (a day).
 * The ledger counts all of them as spent, so switching a schema between day and hour windows buys
 * no second report for the same time. */
export function overlapping(name: string): string[] {
  if (name.length > 10) return [name, name.slice(0, 10)];
  return [name, ...Array.from({ length: 24 }, (_, h) => `${name}T${pad(h)}`)];
}

/** The UTC day a window falls in. */
export function dayOf(name: string): string {
  return name.slice(0, 10);
}
