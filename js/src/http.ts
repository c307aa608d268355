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
/** What a closing page's requests may carry at once: under the page's 64 KiB keepalive quota. */
export const KEEPALIVE_BUDGET = 60 * 1024;
const MAX_REDIRECTS = 5;
// A POST follows only the redirects that keep its method and body.
const KEEPS_THE_BODY = [307, 308];

export interface Answer {
  status: number;
  headers: Headers;
  body: unknown; // the parsed JSON, or undefined
  text: string;
  bytes: Uint8Array; // the answer as sent (the text is these bytes as UTF-8)
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

/** A request that got no answer: `message` says which request and why (the network's cause,
 * the deadline, an answer too big). */
export class RequestError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "RequestError";
  }
}

/** Why fetch failed, in words: the deadline, or the platform's error with its cause (Node's
 * "fetch failed" carries the system's, such as "connect ECONNREFUSED 127.0.0.1:9"; a browser says
 * only "Failed to fetch"). */
function networkCause(e: unknown, timeoutMs: number): string {
  const error = e as { name?: string; message?: string; cause?: { message?: string; code?: string } } | undefined;
  if (error?.name === "TimeoutError") return `no answer within ${timeoutMs} ms`;
  const cause = error?.cause?.message ?? error?.cause?.code;
  const message = error?.message ?? String(e);
  return cause ? `${message} (${cause})` : message;
}

/** An answer as a log line says it: its status and the server's sentence (`error`), escaped. */
export function answerSaid(answer: Answer): string {
  const sentence = (answer.body as { error?: unknown } | undefined)?.error;
  return `HTTP ${answer.status}${sentence === undefined ? "" : ` ${shown(sentence, 300)}`}`;
}

async function readBounded(response: Response, signal: AbortSignal, timeoutMs: number): Promise<Uint8Array> {
  const reader = response.body?.getReader(); // none for an empty answer
  const parts: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    let chunk;
    try {
      chunk = await reader?.read();
    } catch (e) {
      throw new RequestError(networkCause(e, timeoutMs));
    }
    if (!chunk || chunk.done) break;
    size += chunk.value.length;
    if (signal.aborted || size > MAX_RESPONSE_BYTES) {
      await reader!.cancel().catch(() => undefined);
      throw new RequestError(signal.aborted ? `no whole answer within ${timeoutMs} ms` : `an answer over ${MAX_RESPONSE_BYTES} bytes`);
    }
    parts.push(chunk.value);
  }
  return new Uint8Array(await new Blob(parts as BlobPart[]).arrayBuffer());
}

/** fetch's own options (passed on as they are), and the deadline and the fetch to use. */
export interface RequestOptions {
  method: "GET" | "POST";
  body?: string | BufferSource;
  headers?: Record<string, string>;
  keepalive?: boolean;
  timeoutMs: number;
  fetch: Fetch;
}

/** One request within its deadline. Throws a {@link RequestError} saying the method, the URL and
 * why for a network failure, the deadline or an oversized answer; any HTTP status is an answer. */
export async function request(url: string, o: RequestOptions): Promise<Answer> {
  try {
    return await exchange(url, o);
  } catch (e) {
    throw new RequestError(`${o.method} ${url} failed: ${e instanceof RequestError ? e.message : networkCause(e, o.timeoutMs)}`);
  }
}

async function exchange(url: string, o: RequestOptions): Promise<Answer> {
  const signal = AbortSignal.timeout(o.timeoutMs); // the overall deadline (its timer keeps no process alive)
  const init: RequestInit = {
    method: o.method, body: o.body, headers: o.headers, keepalive: o.keepalive, signal,
    redirect: "manual", credentials: "omit", referrerPolicy: "no-referrer", cache: "no-store",
  };
  let response = await o.fetch(url, init);
  // A browser answers "manual" with an opaque redirect (status 0, no Location): none is followed there.
  let target = url;
  for (let hop = 0; hop < MAX_REDIRECTS; hop++) {
    const next = sameOriginRedirect(response, target, url, o.method);
    if (next === undefined) break;
    await response.body?.cancel().catch(() => undefined);
    target = next;
    response = await o.fetch(target, init);
  }
  const bytes = await readBounded(response, signal, o.timeoutMs);
  const text = new TextDecoder().decode(bytes);
  let body: unknown; // undefined for an empty or unreadable answer
  try {
    body = parseJson(text); // a float keeps its spelling (a served histogram edge 100.0: see parseJson)
  } catch {}
  return { status: response.status, headers: response.headers, body, text, bytes };
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
