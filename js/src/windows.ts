/**
 * Aggregation windows: the UTC hour or day a report was made in, named by its start
 * (`YYYY-MM-DD` for a day, `YYYY-MM-DDTHH` for an hour). The finest time the server learns.
 */

export type WindowKind = "hour" | "day";

export const ROLLUP = "all";
const LENGTH_MS: Record<WindowKind, number> = { day: 86_400_000, hour: 3_600_000 };

/** The name of the `kind` window containing `moment` (UTC): its ISO time, cut after the day or hour. */
export function windowOf(moment: Date | number, kind: WindowKind): string {
  // An invalid time is a RangeError from toISOString.
  return new Date(moment).toISOString().slice(0, kind === "hour" ? 13 : 10);
}

/** The UTC start of the window called `name` (ms since the epoch), NaN if it is none. */
export function startOf(name: unknown, kind: WindowKind): number {
  // Read as an ISO time (a day alone, or the hour with ":00Z"); a window's name is what its start is
  // called, so anything else (2026-02-29, 2026-11-21T5, an hour for a day, non-ASCII digits) is none.
  const t = typeof name === "string" ? Date.parse(name.length > 10 ? `${name}:00Z` : name) : NaN;
  return !Number.isNaN(t) && windowOf(t, kind) === name ? t : NaN;
}

/** The UTC start of the window called `name` (ms since the epoch); a RangeError if it is none. */
export function windowStart(name: unknown, kind: WindowKind): number {
  if (!LENGTH_MS[kind]) throw new RangeError("kind must be hour or day");
  const t = startOf(name, kind);
  if (Number.isNaN(t)) throw new RangeError(`window must name a UTC ${kind}`);
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
  return [name, ...Array.from({ length: 24 }, (_, h) => `${name}T${String(h).padStart(2, "0")}`)];
}

/** The UTC day a window falls in. */
export function dayOf(name: string): string {
  return name.slice(0, 10);
}
