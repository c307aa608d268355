/**
 * String attributes (DESIGN.md "Strings", optimal local hashing): how a device prepares its text,
 * the text's fingerprint, and the hash a report's seed (a, b) makes of it. Byte for byte as
 * shared/attribute_types.py (prepare_text) and shared/mechanisms/olh.py.
 */

import { sha256Words } from "./sha256.js";
import { UTF8 } from "./storage.js";

/** The hash family's prime modulus, 2^31 - 1. */
export const P = 2 ** 31 - 1;
// Domain separation of the fingerprints: the tag, then one byte 0x00.
const TAG = "ldp-telemetry/string/v1\0";

/** A string value as the device hashes it: each lone surrogate, control (Cc) and format (Cf)
 * character becomes U+FFFD; then NFC; then the first `maxLength` code points (never UTF-16 units;
 * none given: all of them). The engine's Unicode tables may be newer than Python 3.11's 14.0:
 * only characters newer than that may differ (DESIGN.md), and none of the vectors has one. */
export function prepareText(text: string, maxLength?: number): string {
  return [...text.replace(/[\p{Cs}\p{Cc}\p{Cf}]/gu, "\ufffd").normalize("NFC")].slice(0, maxLength).join("");
}

/** The discovery prefix of the prepared `value` at `length` code points (DESIGN.md "Strings"): each
 * code point kept if it is in `alphabet`, else U+FFFD, padded with U+0000 to `length`. Hashed as it
 * is: preparing it again would turn the padding into U+FFFD. */
export function prefix(value: string, length: number, alphabet: string): string {
  const kept = [...value].slice(0, length).map((c) => (alphabet.includes(c) ? c : "\ufffd"));
  return kept.join("") + "\0".repeat(length - kept.length);
}

/** x(s): the first 8 bytes of SHA-256(tag ‖ 0x00 ‖ UTF-8 of `text`), big-endian, mod P, of
 * `text` exactly as given (a prepared value or candidate). As 2^32 ≡ 2 (mod P), the 64-bit
 * number hi·2^32 + lo is 2·hi + lo mod P, below 2^34: exact in a double. */
export function fingerprint(text: string): number {
  const [hi, lo] = sha256Words(UTF8.encode(TAG + text));
  return (2 * hi + lo) % P;
}

/** ((a·x + b) mod P) mod g in exact integers, in doubles: with a = high·2^16 + low, every partial
 * product and sum stays below 2^49 (a double is exact to 2^53; never a·x itself, up to 2^62). */
export function olhHash(a: number, b: number, x: number, g: number): number {
  const high = Math.floor(a / 65536);
  const low = a % 65536;
  const highPart = ((high * x) % P) * 65536; // ≡ high·2^16·x (mod P), below 2^47
  return ((highPart + low * x + b) % P) % g;
}
