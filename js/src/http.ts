/**
 * How the client talks HTTP, trusting no server (as client/transport.py): an overall deadline
 * for each request (AbortSignal.timeout: a server dripping a byte at a time cannot hold it), a
 * redirect followed only to the same origin (fetch's `redirect: "manual"`; a browser hides a
 * redirect's target, so there a redirect is simply not followed), at most MAX_RESPONSE_BYTES of an
 * answer read, no cookies and no referrer (a page's URL would link a report to what its user was
 * doing), and server text escaped before it reaches a log.
 */

import { parseJson, quote } from "./pyjson.js";

export const MAX_RESPONSE_BYTES = 1 << 20;
const MAX_REDIRECTS = 5;
// A POST follows only the redirects that keep its method and body.
const KEEPS_THE_BODY = [307, 308];

export interface Answer {
  status: number;
  headers: Headers;
  body: unknown; // the parsed JSON, or undefined
  text: string;
}

export type Fetch = typeof fetch;

/** Text from a server as it may appear in a log line: quoted, control and non-ASCII characters
 * escaped, at most `limit` characters, so it cannot forge or hide a line of the app's log. */
export function shown(text: unknown, limit = 300): string {
  return quote(String(text).slice(0, limit));
}

export function sameOrigin(a: string, b: string): boolean {
  try {
    return new URL(a).origin === new URL(b).origin;
  } catch {
    return false;
  }
}

async function readBounded(response: Response, signal: AbortSignal): Promise<string> {
  const reader = response.body?.getReader(); // none for an empty answer
  const parts: Uint8Array[] = [];
  for (let size = 0, chunk; reader && !(chunk = await reader.read()).done; parts.push(chunk.value)) {
    if (signal.aborted || (size += chunk.value.length) > MAX_RESPONSE_BYTES) {
      await reader.cancel().catch(() => undefined);
      throw new Error("answer too slow or too big");
    }
  }
  return new Blob(parts as BlobPart[]).text();
}

/** fetch's own options (passed on as they are), and the deadline and the fetch to use. */
export interface RequestOptions {
  method: "GET" | "POST";
  body?: string;
  headers?: Record<string, string>;
  keepalive?: boolean;
  timeoutMs: number;
  fetch: Fetch;
}

/** One request within its deadline. Throws for a network failure, a deadline, an oversized
 * answer; any HTTP status is an answer. */
export async function request(url: string, o: RequestOptions): Promise<Answer> {
  const signal = AbortSignal.timeout(o.timeoutMs); // the overall deadline (its timer keeps no process alive)
  // Ours among the options (timeoutMs, fetch) are no names of fetch's: it ignores them.
  const init: RequestInit = { ...o, signal, redirect: "manual", credentials: "omit", referrerPolicy: "no-referrer", cache: "no-store" };
  let response = await o.fetch(url, init);
  // A browser answers "manual" with an opaque redirect (status 0, no Location): the <script> bundle leaves this out.
  for (let hop = 0, target = url, next; LDP_FULL && hop < MAX_REDIRECTS && (next = sameOriginRedirect(response, target, url, o.method)); hop++) {
    await response.body?.cancel().catch(() => undefined);
    response = await o.fetch((target = next), init);
  }
  const text = await readBounded(response, signal);
  let body: unknown; // undefined for an empty or unreadable answer
  try {
    // Node and the ES module keep a float's spelling (a served histogram edge 100.0: see parseJson).
    body = LDP_FULL ? parseJson(text) : JSON.parse(text);
  } catch {}
  return { status: response.status, headers: response.headers, body, text };
}

/** Where a redirect to follow points: a 3xx from `target` with a Location on the origin of `url`
 * (a POST only by the codes that keep its method and body); else undefined. */
function sameOriginRedirect(response: Response, target: string, url: string, method: string): string | undefined {
  const location = response.headers.get("location");
  if (response.status < 300 || response.status >= 400 || location === null) return undefined;
  if (method !== "GET" && !KEEPS_THE_BODY.includes(response.status)) return undefined;
  const next = new URL(location, target).href;
  return sameOrigin(next, url) ? next : undefined;
}
