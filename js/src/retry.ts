/**
 * When to retry a request and how long to wait first (posthog's policy with full jitter, as
 * client/retry.py): network errors, 5xx, 408, 429 (and 401, 403, 404, 405: no verdict on the
 * reports, a wrong endpoint or a proxy) are retried after uniform(0, min(cap, base·2^attempt)),
 * never sooner than the server's Retry-After; any other 4xx is final.
 */

// A Retry-After beyond a day is more likely a bug than a plan; it never silences a device.
const MAX_RETRY_AFTER_MS = 86_400_000;
// 2^60 times any base is past every cap: the exponent stops there (and never overflows to Infinity).
const MAX_DOUBLINGS = 60;

/** True for an answer that settles nothing, below 400 included: one its caller did not take (a 2xx
 * without the aggregator's acknowledgement, from a captive portal or a proxy; a redirect not followed). */
export function isRetryable(status: number): boolean {
  return status < 400 || status > 499 || [401, 403, 404, 405, 408, 429].includes(status);
}

/** The wait before retry number `attempt` (0 first): full jitter. Math.random is fine here: the
 * wait is no secret (the coins never use it). */
export function backoff(attempt: number, baseMs: number, capMs: number): number {
  return Math.random() * Math.min(capMs, baseMs * 2 ** Math.min(attempt, MAX_DOUBLINGS));
}

/** The server's Retry-After (seconds or an HTTP date) in ms from now; 0 when absent or unreadable. */
export function retryAfter(headers: Headers): number {
  const value = headers.get("retry-after"); // trimmed already: Headers strips surrounding whitespace
  if (value === null) return 0;
  const ms = /^\d+$/.test(value) ? Number(value) * 1000 : Date.parse(value) - Date.now();
  if (Number.isNaN(ms)) return 0; // an unreadable date
  return Math.min(Math.max(ms, 0), MAX_RETRY_AFTER_MS);
}
