/**
 * The ledger's rules, per schema (as client/ledger.py): one report per window, where a day and
 * its hours overlap (either spends the other), and at most `perDay` ε per UTC day. The stores
 * apply {@link spend} inside their check-and-spend; {@link Ledger} is the copy in memory that
 * answers record() without touching storage.
 */

import { dayOf } from "./windows.js";

/** Spend `epsilon` on `window` in `spent` (one schema's {window: ε}) if the rules allow, else
 * say why not: a window overlapping it spent (a day and its hours: one name is a prefix of the
 * other), or the UTC day's total over `perDay` (within 1e-9). */
export function spend(spent: Record<string, number>, window: string, epsilon: number, perDay: number): string | undefined {
  const day = dayOf(window);
  let total = 0;
  for (const w in spent) {
    if (dayOf(w) !== day) continue;
    if (w.startsWith(window) || window.startsWith(w)) return `already reported in window ${window}`;
    total += spent[w];
  }
  if (total + epsilon > perDay + 1e-9) return `over maxEpsilonPerDay on ${day}`;
  spent[window] = epsilon;
}

export interface DaySpent {
  epsilon: number;
  maxEpsilonPerDay: number;
  windows: Record<string, number>;
}

/** The copy in memory, with the daily cap `perDay`. */
export class Ledger {
  // schema -> day -> {window: ε}: a claim reads only its day's windows, however many days the
  // ledger holds (a device on hour windows spends thousands a year; record() must not scan them).
  private readonly days: Record<string, Record<string, Record<string, number>>> = {};

  constructor(private readonly perDay: number) {}

  /** What storage says was spent (this process, other tabs or processes, earlier runs). */
  learn(schema: string, rows: [string, number][]): void {
    for (const [window, epsilon] of rows) this.dayOf(schema, window)[window] = epsilon;
  }

  /** Spend in memory if the rules allow; else why not. */
  claim(schema: string, window: string, epsilon: number): string | undefined {
    return spend(this.dayOf(schema, window), window, epsilon, this.perDay);
  }

  release(schema: string, window: string): void {
    delete this.dayOf(schema, window)[window];
  }

  /** {schema: {day: {epsilon, maxEpsilonPerDay, windows: {window: ε}}}}, sorted. */
  spent(): Record<string, Record<string, DaySpent>> {
    const out: Record<string, Record<string, DaySpent>> = {};
    for (const schema of Object.keys(this.days).sort()) {
      for (const day of Object.keys(this.days[schema]).sort()) {
        const windows = this.days[schema][day];
        for (const w of Object.keys(windows).sort()) {
          const d = ((out[schema] ??= {})[day] ??= { epsilon: 0, maxEpsilonPerDay: this.perDay, windows: {} });
          d.epsilon += windows[w];
          d.windows[w] = windows[w];
        }
      }
    }
    return out;
  }

  private dayOf(schema: string, window: string): Record<string, number> {
    return ((this.days[schema] ??= {})[dayOf(window)] ??= {});
  }
}
