/**
 * Where a device's coins come from: a source of random bytes, passed to every encoder.
 *
 * Production uses {@link SYSTEM}, the platform CSPRNG (`crypto.getRandomValues`, never
 * `Math.random`: a predictable coin undoes randomised response). A test vector passes
 * {@link FixedBytes} instead. Every draw is defined byte for byte in tests/vectors/README.md,
 * so this client reproduces the Python one exactly:
 *
 * - a Bernoulli(p) coin reads 8 bytes little-endian, keeps the top 53 bits, and is 1 when that
 *   number is below floor(p * 2^53);
 * - a uniform integer below n reads ceil(bits / 8) bytes little-endian (bits = bit length of
 *   n - 1), keeps the low `bits` bits and reads again while the number is >= n.
 */

export interface RandomSource {
  /** Exactly `n` random bytes. */
  take(n: number): Uint8Array;
}

export const SCALE = 2 ** 53;

/** Given bytes, handed out in order (test vectors, memoisation's HMAC stream). Running out is an
 * error, never a wrap, that says `what` they are. */
export class FixedBytes implements RandomSource {
  used = 0;
  constructor(protected data: Uint8Array, private readonly what = "random bytes") {}

  take(n: number): Uint8Array {
    if (this.used + n > this.data.length) this.refill(n);
    return this.data.subarray(this.used, (this.used += n));
  }

  protected refill(n: number): void {
    throw new Error(`${this.what} ran out: ${n} more wanted after ${this.used} of ${this.data.length}`);
  }
}

/** Bytes from `crypto.getRandomValues`, fetched 4 KiB at a time (one call serves hundreds of coins). */
export class SystemRandom extends FixedBytes {
  constructor() {
    super(new Uint8Array());
  }

  protected refill(n: number): void {
    // getRandomValues fills at most 65,536 bytes per call. Where `crypto` is missing, the
    // ReferenceError "crypto is not defined" says so: there is no other source of coins.
    const pool = new Uint8Array(Math.max(4096, n));
    for (let i = 0; i < pool.length; i += 65536) crypto.getRandomValues(pool.subarray(i, i + 65536));
    this.data = pool;
    this.used = 0;
  }
}

export const SYSTEM: RandomSource = new SystemRandom();

/** The number `bytes` hold, little-endian (exact up to 6 bytes). */
const littleEndian = (bytes: Uint8Array) => bytes.reduceRight((sum, byte) => sum * 256 + byte, 0);

/** A uniform integer in [0, 2^53): 8 bytes little-endian, top 53 bits, which are the top 48
 * (bytes 2 to 7) and the top 5 of byte 1. */
export function uniform53(source: RandomSource): number {
  const b = source.take(8);
  return littleEndian(b.subarray(2)) * 32 + (b[1] >> 3);
}

/** 1 with `probability`: a 53-bit draw below floor(p·2^53) (p·2^53 is exact). */
export function bernoulli(probability: number, source: RandomSource): boolean {
  return uniform53(source) < Math.floor(probability * SCALE);
}

/** A uniform integer in [0, n), n ≤ 2^48, by rejection (no modulo bias). */
export function randbelow(n: number, source: RandomSource): number {
  if (!(Number.isInteger(n) && n >= 1 && n <= 2 ** 48)) throw new RangeError("randbelow needs 1 <= n <= 2^48");
  if (n < 2) return 0; // no bits to draw
  const bits = (n - 1).toString(2).length;
  const modulus = 2 ** bits; // keeping the low bits is a remainder by 2^bits (exact below 2^53)
  for (;;) {
    const value = littleEndian(source.take(Math.ceil(bits / 8))) % modulus;
    if (value < n) return value;
  }
}
