/**
 * The ledger's rules, per schema (as client/ledger.py): one report per window, where a day and
 * its hours overlap (either spends the other), and at most `perDay` ε per UTC day. The stores
 * apply {@link refusal} inside their check-and-spend; {@link Ledger} is the copy in memory that
 * answers record() without touching storage.
 */

import { dayOf, overlapping } from "./windows.js";

const EPSILON_TOLERANCE = 1e-9;

/** Why a report of `epsilon` in `window` may not be made, given `day` ({window: ε} spent that
 * UTC day); undefined when it may. */
export function refusal(day: Record<string, number>, window: string, epsilon: number, perDay: number): string | undefined {
  for (const name of overlapping(window)) {
    if (name in day) return `already reported in window ${window}`;
  }
  const total = Object.values(day).reduce((a, b) => a + b, 0);
  if (total + epsilon > perDay + EPSILON_TOLERANCE) {
    return `over maxEpsilonPerDay on ${dayOf(window)}`;
  }
  return undefined;
}

export interface DaySpent {
  epsilon: number;
  maxEpsilonPerDay: number;
  windows: Record<string, number>;
}

export class Ledger {
  // schema -> day -> {window: ε}
  private readonly days = new Map<string, Map<string, Record<string, number>>>();
  constructor(readonly perDay: number) {}

  private day(schema: string, window: string): Record<string, number> {
    let bySchema = this.days.get(schema);
    if (!bySchema) this.days.set(schema, (bySchema = new Map()));
    const key = dayOf(window);
    let day = bySchema.get(key);
    if (!day) bySchema.set(key, (day = {}));
    return day;
  }

  /** What storage says was spent (this process, other tabs or processes, earlier runs). */
  learn(schema: string, rows: Iterable<[string, number]>): void {
    for (const [window, epsilon] of rows) this.day(schema, window)[window] = epsilon;
  }

  /** Spend in memory if the rules allow; else why not. */
  claim(schema: string, window: string, epsilon: number): string | undefined {
    const day = this.day(schema, window);
    const reason = refusal(day, window, epsilon, this.perDay);
    if (reason === undefined) day[window] = epsilon;
    return reason;
  }

  release(schema: string, window: string): void {
    delete this.day(schema, window)[window];
  }

  spent(): Record<string, Record<string, DaySpent>> {
    const out: Record<string, Record<string, DaySpent>> = {};
    for (const [schema, days] of [...this.days].sort()) {
      for (const [day, windows] of [...days].sort()) {
        const names = Object.keys(windows).sort();
        if (!names.length) continue;
        (out[schema] ??= {})[day] = {
          epsilon: names.reduce((a, w) => a + windows[w], 0), maxEpsilonPerDay: this.perDay,
          windows: Object.fromEntries(names.map((w) => [w, windows[w]])),
        };
      }
    }
    return out;
  }
}
