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

/** The copy in memory: schema -> {window: ε}. */
export interface Ledger {
  /** What storage says was spent (this process, other tabs or processes, earlier runs). */
  learn(schema: string, rows: [string, number][]): void;
  /** Spend in memory if the rules allow; else why not. */
  claim(schema: string, window: string, epsilon: number): string | undefined;
  release(schema: string, window: string): void;
  spent(): Record<string, Record<string, DaySpent>>;
}

export function ledger(cap: number): Ledger {
  const all: Record<string, Record<string, number>> = {};
  const of = (schema: string) => (all[schema] ??= {});
  return {
    learn: (schema, rows) => Object.assign(of(schema), Object.fromEntries(rows)),
    claim: (schema, window, epsilon) => spend(of(schema), window, epsilon, cap),
    release: (schema, window) => delete of(schema)[window],
    spent() {
      const out: Record<string, Record<string, DaySpent>> = {};
      for (const schema of Object.keys(all).sort()) {
        const windows = all[schema];
        for (const w of Object.keys(windows).sort()) {
          const d = ((out[schema] ??= {})[dayOf(w)] ??= { epsilon: 0, maxEpsilonPerDay: cap, windows: {} });
          d.epsilon += windows[w];
          d.windows[w] = windows[w];
        }
      }
      return out;
    },
  };
}
