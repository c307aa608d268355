/**
 * HPKE (RFC 9180) in base mode for the one suite the relay uses, on Web Crypto alone:
 * DHKEM(X25519, HKDF-SHA256) (KEM 0x0020), HKDF-SHA256 (KDF 0x0001), AES-128-GCM (AEAD 0x0001).
 * Only the sender's side: the client encrypts to the aggregator and never decrypts.
 *
 * HKDF is written out with HMAC-SHA256 (RFC 5869): Extract(salt, ikm) = HMAC(salt, ikm), and
 * Expand(prk, info, L) = the first L bytes of HMAC(prk, info ‖ 0x01), since every L here is at most
 * 32 (one block). RFC 9180 §4 labels both: LabeledExtract feeds "HPKE-v1" ‖ suite_id ‖ label ‖ ikm,
 * LabeledExpand feeds I2OSP(L, 2) ‖ "HPKE-v1" ‖ suite_id ‖ label ‖ info.
 */

export const KEM_X25519 = 0x0020;
export const KDF_HKDF_SHA256 = 0x0001;
export const AEAD_AES_128_GCM = 0x0001;

const N_SECRET = 32; // Nsecret of DHKEM(X25519, HKDF-SHA256), and Npk (enc's length)
const N_K = 16; // AES-128-GCM's key
const N_N = 12; // and nonce
const MODE_BASE = 0;
// A PKCS#8 PrivateKeyInfo for X25519 (RFC 8410) is this prefix and the raw 32-byte key.
const PKCS8_X25519 = [0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x6e, 0x04, 0x22, 0x04, 0x20];

const ASCII = new TextEncoder();

/** The bytes of `parts` one after another. */
export function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** I2OSP(n, width): `n` big-endian in `width` bytes. */
export function i2osp(n: number, width: number): Uint8Array {
  const out = new Uint8Array(width);
  for (let i = width - 1; i >= 0; i--, n = Math.floor(n / 256)) out[i] = n % 256;
  return out;
}

// suite_id of the KEM (RFC 9180 §4.1) and of HPKE (§5.1).
const KEM_SUITE = concat(ASCII.encode("KEM"), i2osp(KEM_X25519, 2));
const HPKE_SUITE = concat(ASCII.encode("HPKE"), i2osp(KEM_X25519, 2), i2osp(KDF_HKDF_SHA256, 2), i2osp(AEAD_AES_128_GCM, 2));
const VERSION = ASCII.encode("HPKE-v1");

/** Web Crypto, which exists only in secure contexts (HTTPS, localhost) and Node. */
function subtle(): SubtleCrypto {
  const s = globalThis.crypto?.subtle;
  if (!s) throw new Error("no Web Crypto (crypto.subtle) here: an insecure page?");
  return s;
}

async function hmac(key: Uint8Array, message: Uint8Array): Promise<Uint8Array> {
  // A zero-length key (LabeledExtract's empty salt) is refused by Web Crypto's importKey, and HMAC
  // pads a key to its block with zeros anyway (RFC 2104): Nh zero bytes are the same key (RFC 5869 §2.2).
  const k = await subtle().importKey("raw", (key.length ? key : new Uint8Array(32)) as BufferSource, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  return new Uint8Array(await subtle().sign("HMAC", k, message as BufferSource));
}

function labeledExtract(suite: Uint8Array, salt: Uint8Array, label: string, ikm: Uint8Array): Promise<Uint8Array> {
  return hmac(salt, concat(VERSION, suite, ASCII.encode(label), ikm));
}

async function labeledExpand(suite: Uint8Array, prk: Uint8Array, label: string, info: Uint8Array, length: number): Promise<Uint8Array> {
  const labeled = concat(i2osp(length, 2), VERSION, suite, ASCII.encode(label), info);
  return (await hmac(prk, concat(labeled, Uint8Array.of(1)))).slice(0, length);
}

/** An X25519 private key from its raw 32 bytes (a PKCS#8 import: Web Crypto takes no raw private key). */
function importPrivate(raw: Uint8Array): Promise<CryptoKey> {
  return subtle().importKey("pkcs8", concat(Uint8Array.from(PKCS8_X25519), raw) as BufferSource, { name: "X25519" }, true, ["deriveBits"]);
}

/** The raw public key of an X25519 private key (its JWK's `x`, base64url). */
async function publicOf(privateKey: CryptoKey): Promise<Uint8Array> {
  const { x } = await subtle().exportKey("jwk", privateKey);
  return Uint8Array.from(atob(x!.replace(/-/g, "+").replace(/_/g, "/")), (c) => c.charCodeAt(0));
}

/** True where Web Crypto does X25519 (Node 20, and current browsers: Chrome and Edge since 133);
 * not on an insecure page (no crypto.subtle) or an older browser. */
export async function hasX25519(): Promise<boolean> {
  try {
    await subtle().generateKey({ name: "X25519" }, false, ["deriveBits"]);
    return true;
  } catch {
    return false;
  }
}

/** What Encap makes (RFC 9180 §4.1): the shared secret and `enc`, the ephemeral public key. */
export interface Encapsulated {
  sharedSecret: Uint8Array;
  enc: Uint8Array;
}

/** DHKEM's Encap(pkR) (RFC 9180 §4.1): X25519 with a fresh ephemeral key, or with
 * `ephemeralPrivate` (raw 32 bytes) for test vectors. */
export async function encap(pkR: Uint8Array, ephemeralPrivate?: Uint8Array): Promise<Encapsulated> {
  let skE: CryptoKey;
  let enc: Uint8Array;
  if (ephemeralPrivate) {
    skE = await importPrivate(ephemeralPrivate);
    enc = await publicOf(skE);
  } else {
    const pair = (await subtle().generateKey({ name: "X25519" }, false, ["deriveBits"])) as CryptoKeyPair;
    skE = pair.privateKey;
    enc = new Uint8Array(await subtle().exportKey("raw", pair.publicKey));
  }
  const recipient = await subtle().importKey("raw", pkR as BufferSource, { name: "X25519" }, true, []);
  const dh = new Uint8Array(await subtle().deriveBits({ name: "X25519", public: recipient } as EcdhKeyDeriveParams, skE, 256));
  // ExtractAndExpand(dh, kem_context), kem_context = enc ‖ pkRm.
  const prk = await labeledExtract(KEM_SUITE, new Uint8Array(0), "eae_prk", dh);
  return { sharedSecret: await labeledExpand(KEM_SUITE, prk, "shared_secret", concat(enc, pkR), N_SECRET), enc };
}

/** The key schedule's output in base mode (RFC 9180 §5.1): the AEAD key and the base nonce. */
export interface KeySchedule {
  key: Uint8Array;
  baseNonce: Uint8Array;
}

/** KeySchedule(mode_base, shared_secret, info, psk = "", psk_id = ""). (The exporter secret is
 * not derived: the client exports nothing.) */
export async function keySchedule(sharedSecret: Uint8Array, info: Uint8Array): Promise<KeySchedule> {
  const empty = new Uint8Array(0);
  const pskIdHash = await labeledExtract(HPKE_SUITE, empty, "psk_id_hash", empty);
  const infoHash = await labeledExtract(HPKE_SUITE, empty, "info_hash", info);
  const context = concat(Uint8Array.of(MODE_BASE), pskIdHash, infoHash);
  const secret = await labeledExtract(HPKE_SUITE, sharedSecret, "secret", empty);
  return {
    key: await labeledExpand(HPKE_SUITE, secret, "key", context, N_K),
    baseNonce: await labeledExpand(HPKE_SUITE, secret, "base_nonce", context, N_N),
  };
}

/** A sender's encryption context (RFC 9180 §5.2): each seal() uses the next sequence number. */
export class SenderContext {
  private seq = 0;

  constructor(readonly enc: Uint8Array, readonly schedule: KeySchedule) {}

  /** Seal(aad, pt): AES-128-GCM under the key, with nonce = base_nonce XOR I2OSP(seq, Nn). */
  async seal(aad: Uint8Array, plaintext: Uint8Array): Promise<Uint8Array> {
    const nonce = i2osp(this.seq++, N_N).map((b, i) => b ^ this.schedule.baseNonce[i]);
    const key = await subtle().importKey("raw", this.schedule.key as BufferSource, "AES-GCM", false, ["encrypt"]);
    const sealed = await subtle().encrypt({ name: "AES-GCM", iv: nonce, additionalData: aad as BufferSource }, key, plaintext as BufferSource);
    return new Uint8Array(sealed);
  }
}

/** SetupBaseS(pkR, info) (RFC 9180 §5.1.1); `ephemeralPrivate` fixes the ephemeral key (test vectors). */
export async function setupBaseSender(pkR: Uint8Array, info: Uint8Array, ephemeralPrivate?: Uint8Array): Promise<SenderContext> {
  const { sharedSecret, enc } = await encap(pkR, ephemeralPrivate);
  return new SenderContext(enc, await keySchedule(sharedSecret, info));
}
