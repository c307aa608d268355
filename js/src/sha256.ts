/**
 * SHA-256 (FIPS 180-4), synchronous and bundled: a string attribute's fingerprint needs it on
 * every page, also where `crypto.subtle` is missing (no secure context) or asynchronous. Its
 * constants are computed as the standard defines them: the first 32 bits of the fractional parts
 * of the square roots of the first 8 primes (H) and of the cube roots of the first 64 (K). Each is
 * at least 2^-8 of its last bit away from a rounding boundary (some thousand ulps of the root), far
 * beyond the error of any engine's sqrt or cbrt (test/strings.test.js checks that and known digests).
 */

const BLOCK_WORDS = 16; // 512 bits
const ROUNDS = 64;

/** The first `count` primes. */
function primes(count: number): number[] {
  const found: number[] = [];
  for (let n = 2; found.length < count; n++) {
    if (found.every((p) => n % p !== 0)) found.push(n);
  }
  return found;
}

/** The first 32 bits of the fractional part of `x`, as an unsigned number. */
function fraction32(x: number): number {
  return Math.floor((x - Math.floor(x)) * 2 ** 32);
}

const PRIMES = primes(ROUNDS);
const H = PRIMES.slice(0, 8).map((p) => fraction32(Math.sqrt(p)));
const K = PRIMES.map((p) => fraction32(Math.cbrt(p)));

const rotr = (x: number, n: number) => (x >>> n) | (x << (32 - n));

/** The message as 32-bit big-endian words, padded: the bytes, 0x80, zeros, and the length in bits
 * as a 64-bit number (its high word 0: at most 2^29 - 1 bytes), to a whole number of blocks. */
function padded(data: Uint8Array): Int32Array {
  const blocks = Math.floor((data.length + 1 + 8 + 63) / 64);
  const words = new Int32Array(blocks * BLOCK_WORDS);
  const bytes = [...data, 0x80];
  for (let i = 0; i < bytes.length; i++) words[Math.floor(i / 4)] |= bytes[i] << (24 - 8 * (i % 4));
  words[words.length - 1] = data.length * 8;
  return words;
}

/** SHA-256 of `data` (at most 2^29 - 1 bytes) as its eight 32-bit words, big-endian order, each as
 * an unsigned 32-bit number. */
export function sha256Words(data: Uint8Array): number[] {
  const words = padded(data);
  let h = H.slice();
  const w = new Int32Array(ROUNDS); // Int32Array stores every sum modulo 2^32
  for (let block = 0; block < words.length; block += BLOCK_WORDS) {
    let [a, b, c, d, e, f, g, k] = h;
    for (let t = 0; t < ROUNDS; t++) {
      if (t < BLOCK_WORDS) w[t] = words[block + t];
      else {
        const x = w[t - 15];
        const y = w[t - 2];
        w[t] = (rotr(x, 7) ^ rotr(x, 18) ^ (x >>> 3)) + w[t - 7] + (rotr(y, 17) ^ rotr(y, 19) ^ (y >>> 10)) + w[t - 16];
      }
      const t1 = k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[t] + w[t];
      const t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      // The working variables move down one place; a and e take the new values (modulo 2^32).
      [a, b, c, d, e, f, g, k] = [(t1 + t2) | 0, a, b, c, (d + t1) | 0, e, f, g];
    }
    h = [a, b, c, d, e, f, g, k].map((x, i) => (h[i] + x) >>> 0);
  }
  return h;
}

/** The 32 bytes of SHA-256 of `data`. */
export function sha256(data: Uint8Array): Uint8Array {
  const out = new DataView(new ArrayBuffer(32));
  sha256Words(data).forEach((x, i) => out.setUint32(4 * i, x));
  return new Uint8Array(out.buffer);
}
