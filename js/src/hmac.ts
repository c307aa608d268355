/**
 * Memoisation's deterministic coins: HMAC-SHA256(device secret, message ‖ counter) for counter
 * 0, 1, ... (4 bytes big-endian), concatenated. Web Crypto is asynchronous while the encoders
 * draw synchronously, so the blocks are computed ahead ({@link hmacStream}) and handed out by a
 * FixedBytes.
 */

/** The device's secret: its 32 raw bytes, or an HMAC-SHA256 CryptoKey made from them (in a
 * browser it is kept non-extractable, so no script can read it back). */
export type DeviceSecret = Uint8Array | CryptoKey;

export const DEVICE_SECRET_BYTES = 32;

/** Thrown when a memoised schema meets a platform without `crypto.subtle` (outside a secure
 * context). Where `crypto` itself is missing, the ReferenceError "crypto is not defined" says so
 * (as for SystemRandom: browsers and Node >= 20 all have it). */
export function subtle(): SubtleCrypto {
  const s = crypto.subtle;
  if (!s) throw new Error("a memoised schema needs crypto.subtle (HTTPS or localhost)");
  return s;
}

export function isCryptoKey(value: unknown): value is CryptoKey {
  return typeof CryptoKey !== "undefined" && value instanceof CryptoKey;
}

/** An HMAC-SHA256 key for `secret` (a key is returned as it is). */
export async function hmacKey(secret: DeviceSecret, extractable = false): Promise<CryptoKey> {
  if (isCryptoKey(secret)) return secret;
  return subtle().importKey("raw", secret as Uint8Array<ArrayBuffer>, { name: "HMAC", hash: "SHA-256" }, extractable, ["sign"]);
}

/** The first `blocks` × 32 bytes of the stream for `message` (the counter as 4 bytes big-endian:
 * a Uint8Array keeps the low 8 bits of each shift). */
export async function hmacStream(key: CryptoKey, message: Uint8Array, blocks: number): Promise<Uint8Array> {
  const s = subtle();
  const parts = await Promise.all(Array.from({ length: blocks }, (_, counter) =>
    s.sign("HMAC", key, new Uint8Array([...message, counter >> 24, counter >> 16, counter >> 8, counter]))));
  return new Uint8Array(await new Blob(parts).arrayBuffer());
}
