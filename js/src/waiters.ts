/**
 * Promises that wait for a condition on the client's state (a schema to record under, everything
 * delivered), resolved when whoever changes that state says so, or when their time is up. No polling.
 */

interface Waiter {
  ready: () => boolean;
  finish: () => void;
}

export class Waiters {
  private readonly waiting = new Set<Waiter>();

  /** Resolves once `ready()` holds, or after `timeoutMs` (a delay a timer can take: options.ts
   * checks it); then the caller reads the state it waited for. The timer keeps a Node process
   * alive: the app asked to wait. */
  until(ready: () => boolean, timeoutMs: number): Promise<void> {
    if (ready()) return Promise.resolve();
    return new Promise((resolve) => {
      const waiter: Waiter = {
        ready,
        finish: () => {
          clearTimeout(timer);
          this.waiting.delete(waiter);
          resolve();
        },
      };
      const timer = setTimeout(waiter.finish, timeoutMs);
      this.waiting.add(waiter);
    });
  }

  /** The state changed: those whose condition now holds are resolved. */
  changed(): void {
    for (const waiter of this.waiting) if (waiter.ready()) waiter.finish();
  }
}
