// The receiving side of Oblivious HTTP for tests: an aggregator's X25519 key pair and its key
// configurations, and the opening of an encapsulated request (RFC 9458 §4.3) with an HPKE (RFC 9180,
// base mode, X25519, HKDF-SHA256, AES-128-GCM) written on node:crypto, independent of
// src/relay/hpke.ts, and the fields of the Binary HTTP request inside (RFC 9292 known-length).
import { createDecipheriv, createHmac, createPublicKey, diffieHellman, generateKeyPairSync } from "node:crypto";

/** An aggregator's key pair, and its key configurations as application/ohttp-keys. */
export function keyPair(keyId = 7) {
  const { privateKey, publicKey } = generateKeyPairSync("x25519");
  const raw = Buffer.from(publicKey.export({ format: "jwk" }).x, "base64url");
  const config = Buffer.concat([Buffer.from([keyId, 0, 0x20]), raw, Buffer.from([0, 4, 0, 1, 0, 1])]);
  return { keyId, privateKey, raw, body: Buffer.concat([Buffer.from([0, config.length]), config]) };
}

const labeled = (suite, label, bytes) => Buffer.concat([Buffer.from("HPKE-v1"), suite, Buffer.from(label), bytes]);
const extract = (salt, ikm) => createHmac("sha256", salt.length ? salt : Buffer.alloc(32)).update(ikm).digest();
const expand = (prk, info, length) => createHmac("sha256", prk).update(Buffer.concat([info, Buffer.from([1])])).digest().subarray(0, length);
const u16 = (n) => Buffer.from([n >> 8, n & 255]);
const KEM = Buffer.concat([Buffer.from("KEM"), u16(0x20)]);
const HPKE = Buffer.concat([Buffer.from("HPKE"), u16(0x20), u16(1), u16(1)]);
const none = Buffer.alloc(0);

/** The Binary HTTP message inside an encapsulated request to `keys`. */
export function decapsulate(request, keys) {
  const hdr = request.subarray(0, 7);
  const enc = request.subarray(7, 39);
  const peer = createPublicKey({ key: { kty: "OKP", crv: "X25519", x: enc.toString("base64url") }, format: "jwk" });
  const dh = diffieHellman({ privateKey: keys.privateKey, publicKey: peer });
  const prk = extract(none, labeled(KEM, "eae_prk", dh));
  const shared = expand(prk, Buffer.concat([u16(32), labeled(KEM, "shared_secret", Buffer.concat([enc, keys.raw]))]), 32);
  const info = Buffer.concat([Buffer.from("message/bhttp request"), Buffer.from([0]), hdr]);
  const context = Buffer.concat([Buffer.from([0]), extract(none, labeled(HPKE, "psk_id_hash", none)), extract(none, labeled(HPKE, "info_hash", info))]);
  const secret = extract(shared, labeled(HPKE, "secret", none));
  const key = expand(secret, Buffer.concat([u16(16), labeled(HPKE, "key", context)]), 16);
  const nonce = expand(secret, Buffer.concat([u16(12), labeled(HPKE, "base_nonce", context)]), 12);
  const ct = request.subarray(39);
  const decipher = createDecipheriv("aes-128-gcm", key, nonce);
  decipher.setAuthTag(ct.subarray(ct.length - 16));
  return Buffer.concat([decipher.update(ct.subarray(0, ct.length - 16)), decipher.final()]);
}

/** The fields of a known-length Binary HTTP request (RFC 9292), each length a varint. */
export function bhttpFields(message) {
  let at = 0;
  const varint = () => {
    const first = message[at];
    const width = 1 << (first >> 6);
    let n = first & 0x3f;
    for (let i = 1; i < width; i++) n = n * 256 + message[at + i];
    at += width;
    return n;
  };
  const field = () => {
    const n = varint();
    at += n;
    return message.subarray(at - n, at);
  };
  const framing = varint();
  const [method, scheme, authority, path, headers, content] = [field(), field(), field(), field(), field(), field()];
  const trailer = varint();
  return { framing, method: `${method}`, scheme: `${scheme}`, authority: `${authority}`, path: `${path}`, headers: `${headers}`,
    content: JSON.parse(content), trailer, padding: message.subarray(at) };
}
