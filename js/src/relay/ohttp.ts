/**
 * The bytes of a relayed report, as DESIGN.md "Relay and amplification" ("Bytes") fixes them and
 * as Python's shared/ohttp.py writes them: key configurations (RFC 9458 §3), the Binary HTTP
 * request that carries one report (RFC 9292 known-length, padded to its schema version's one size)
 * and its encapsulation (RFC 9458 §4.3).
 */

import { AEAD_AES_128_GCM, concat, i2osp, KDF_HKDF_SHA256, KEM_X25519, setupBaseSender } from "./hpke.js";

export const HEADER_BYTES = 7; // key id, KEM, KDF, AEAD
export const REQUEST_OVERHEAD = 55; // the header, enc (32 bytes) and the AEAD's tag (16)
export const PAD_UNIT = 1024;
export const MAX_REQUEST_BYTES = 65536;
export const KEY_PROBLEM_TYPE = "https://iana.org/assignments/http-problem-types#ohttp-key";

const PUBLIC_KEY_BYTES = 32;
const TEXT = new TextEncoder();
// The request line and header of every relayed report (RFC 9292 §3.4, §3.5).
const METHOD = "POST";
const SCHEME = "https";
const PATH = "/api/v1/reports";
const HEADER: [string, string] = ["content-type", "application/json"];
// `{"reports":[` and `]}` around one report, as both clients write them (compact), and as Python's
// shared.ohttp.padded_size counts them.
const CONTENT_WRAPPING = '{"reports":[]}'.length;

/** A key configuration the client can use: KEM 0x0020 listing (HKDF-SHA256, AES-128-GCM). */
export interface KeyConfig {
  keyId: number;
  publicKey: Uint8Array;
}

/** The first usable configuration of an `application/ohttp-keys` body (RFC 9458 §3.2: each one
 * preceded by its length, 2 bytes big-endian). Throws an Error saying what is wrong if the body is
 * malformed or lists none with KEM 0x0020 and (KDF 0x0001, AEAD 0x0001). */
export function chooseKeyConfig(body: Uint8Array): KeyConfig {
  if (!body.length) throw new Error("no key configuration (an empty body)");
  const view = new DataView(body.buffer, body.byteOffset, body.byteLength);
  let chosen: KeyConfig | undefined;
  for (let at = 0; at < body.length;) {
    if (at + 2 > body.length) throw new Error(`a key configuration's length is cut off at byte ${at}`);
    const length = view.getUint16(at);
    const end = at + 2 + length;
    if (end > body.length) throw new Error(`a key configuration of ${length} bytes at byte ${at} runs past the body's ${body.length}`);
    chosen ??= usable(body.subarray(at + 2, end), at);
    at = end;
  }
  if (!chosen) throw new Error(`no key configuration with KEM 0x0020 and (KDF 0x0001, AEAD 0x0001)`);
  return chosen;
}

/** One key configuration (RFC 9458 §3.1: key id, KEM id, public key, the length of the (KDF, AEAD)
 * pairs, the pairs), if it is usable; throws if it is malformed. `at` places it in the body. */
function usable(config: Uint8Array, at: number): KeyConfig | undefined {
  const view = new DataView(config.buffer, config.byteOffset, config.byteLength);
  if (config.length < 3) throw new Error(`the key configuration at byte ${at} has ${config.length} bytes, too few`);
  if (view.getUint16(1) !== KEM_X25519) return undefined; // another KEM: its key's length is its own
  const pairsAt = 3 + PUBLIC_KEY_BYTES;
  const pairsLength = pairsAt + 2 <= config.length ? view.getUint16(pairsAt) : -1;
  if (pairsLength < 4 || pairsLength % 4 || pairsAt + 2 + pairsLength !== config.length) {
    throw new Error(`the key configuration at byte ${at} is malformed (its ${config.length} bytes do not hold a key and (KDF, AEAD) pairs)`);
  }
  for (let p = pairsAt + 2; p < config.length; p += 4) {
    if (view.getUint16(p) === KDF_HKDF_SHA256 && view.getUint16(p + 2) === AEAD_AES_128_GCM) {
      return { keyId: config[0], publicKey: config.slice(3, pairsAt) };
    }
  }
  return undefined;
}

/** `n` as a QUIC variable-length integer in its shortest form (RFC 9000 §16). */
export function varint(n: number): Uint8Array {
  if (n < 64) return i2osp(n, 1);
  if (n < 16384) return i2osp(0x4000 + n, 2);
  if (n < 2 ** 30) return i2osp(0x8000_0000 + n, 4);
  throw new RangeError(`no 4-byte varint for ${n}`);
}

/** A length-prefixed field: its length as a varint, then its bytes. */
function field(bytes: Uint8Array): Uint8Array {
  return concat(varint(bytes.length), bytes);
}

/** Everything of the request before its content: framing indicator 0 (known-length request), the
 * control data (method, scheme, an empty authority, path) and the header section of one field line. */
const HEAD = concat(Uint8Array.of(0), field(TEXT.encode(METHOD)), field(TEXT.encode(SCHEME)), field(new Uint8Array(0)),
  field(TEXT.encode(PATH)), field(concat(field(TEXT.encode(HEADER[0])), field(TEXT.encode(HEADER[1])))));
const TRAILER = Uint8Array.of(0); // an empty trailer section, never truncated

/** The RFC 9292 known-length request that carries `content` (the JSON of {"reports": [report]}),
 * zero-padded to `paddedSize` bytes. */
export function bhttpRequest(content: Uint8Array, paddedSize: number): Uint8Array {
  const message = concat(HEAD, field(content), TRAILER);
  if (message.length > paddedSize) throw new RangeError(`a request of ${message.length} bytes is over its padded size ${paddedSize}`);
  const out = new Uint8Array(paddedSize);
  out.set(message);
  return out;
}

/** The size every request of a schema version is padded to: the smallest multiple of 1,024 not
 * below the longest message a report of it can make, whose JSON text is at most `maxReportBytes`
 * (DESIGN "Bytes"; Python's shared.ohttp.padded_size, from the same bound). */
export function paddedSize(maxReportBytes: number): number {
  const content = maxReportBytes + CONTENT_WRAPPING;
  const longest = HEAD.length + varint(content).length + content + TRAILER.length;
  return Math.ceil(longest / PAD_UNIT) * PAD_UNIT;
}

/** Why a schema version cannot go through a relay (its encapsulated requests would be over 64 KiB),
 * or undefined when it can. */
export function relayRefusal(name: string, version: number, maxReportBytes: number): string | undefined {
  const size = paddedSize(maxReportBytes) + REQUEST_OVERHEAD;
  if (size <= MAX_REQUEST_BYTES) return undefined;
  return `the schema ${name} version ${version} cannot go through a relay: its requests would be ${size} bytes, over ${MAX_REQUEST_BYTES}`;
}

/** The 7-byte header of a request to `config`: key id, KEM, KDF, AEAD (RFC 9458 §4.3). */
function header(config: KeyConfig): Uint8Array {
  return concat(i2osp(config.keyId, 1), i2osp(KEM_X25519, 2), i2osp(KDF_HKDF_SHA256, 2), i2osp(AEAD_AES_128_GCM, 2));
}

/** The encapsulated request (RFC 9458 §4.3): hdr ‖ enc ‖ Seal("", message), HPKE base mode with
 * info = "message/bhttp request" ‖ 0x00 ‖ hdr. A fresh ephemeral key each time unless
 * `ephemeralPrivate` (raw 32 bytes) fixes it for test vectors. */
export async function encapsulate(config: KeyConfig, message: Uint8Array, ephemeralPrivate?: Uint8Array): Promise<Uint8Array> {
  const hdr = header(config);
  const info = concat(TEXT.encode("message/bhttp request"), Uint8Array.of(0), hdr);
  const context = await setupBaseSender(config.publicKey, info, ephemeralPrivate);
  return concat(hdr, context.enc, await context.seal(new Uint8Array(0), message));
}
