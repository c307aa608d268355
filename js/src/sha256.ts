/**
 * SHA-256 (FIPS 180-4), synchronous and bundled: a string attribute's fingerprint needs it on
 * every page, also where `crypto.subtle` is missing (no secure context) or asynchronous. Its
 * constants are computed rather than listed (a few hundred bytes less): the first 32 bits of the
 * fractional parts of the square roots of the first 8 primes (H) and the cube roots of the first
 * 64 (K). Each is at least 2^-8 of its last bit away from a rounding boundary (some thousand
 * ulps of the root), far beyond the error of any engine's sqrt or cbrt (test/strings.test.js
 * checks both lists and known digests).
 */

const K: number[] = [];
const H: number[] = [];

const rotr = (x: number, n: number) => (x >>> n) | (x << (32 - n));

/** SHA-256 of `data` (at most 2^29 - 1 bytes: the bit length fits 32 bits) as its eight 32-bit
 * words, big-endian order, each as an unsigned 32-bit number. */
export function sha256Words(data: Uint8Array): number[] {
  // The first call fills K and H (later ones find K full).
  for (let n = 2, d; K.length < 64; n++) {
    for (d = 2; n % d; d++); // n is prime when its least divisor is n
    // `| 0` keeps the low 32 bits of the integer part: the fraction's first 32 bits.
    if (d === n) H.push((Math.sqrt(n) * 2 ** 32) | 0), K.push((Math.cbrt(n) * 2 ** 32) | 0);
  }
  const length = data.length;
  const words = new Int32Array(((length + 72) >> 6) << 4); // the message, 0x80, zeros, 64-bit bit length
  // A shift count is taken mod 32: 24 - 8i is 24 - 8(i mod 4) there.
  [...data, 0x80].forEach((byte, i) => (words[i >> 2] |= byte << (24 - 8 * i)));
  words[words.length - 1] = length * 8;
  let h = H.slice(0, 8);
  const w = new Int32Array(64);
  for (let block = 0; block < words.length; block += 16) {
    let [a, b, c, d, e, f, g, k] = h;
    for (let t = 0; t < 64; t++) {
      const x = w[t - 15];
      const y = w[t - 2];
      // Int32Array stores every sum modulo 2^32.
      w[t] = t < 16 ? words[block + t]
        : (rotr(x, 7) ^ rotr(x, 18) ^ (x >>> 3)) + w[t - 7] + (rotr(y, 17) ^ rotr(y, 19) ^ (y >>> 10)) + w[t - 16];
      const t1 = k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[t] + w[t];
      // The working variables move down one place; a and e take the new values.
      [a, b, c, d, e, f, g, k] = [(t1 + (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c))) | 0, a, b, c, (d + t1) | 0, e, f, g];
    }
    h = [a, b, c, d, e, f, g, k].map((x, i) => (h[i] + x) >>> 0);
  }
  return h;
}

/** The 32 bytes of SHA-256 of `data`. */
export function sha256(data: Uint8Array): Uint8Array {
  const out = new DataView(new ArrayBuffer(32));
  sha256Words(data).forEach((x, i) => out.setInt32(4 * i, x));
  return new Uint8Array(out.buffer);
}
