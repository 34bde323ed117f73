/**
 * Content versions: FNV-1a over bytes, two 32-bit lanes with different offsets (64 bits of hex).
 * The version of a resource is a function of its bytes alone, so equal content has an equal version
 * in every spillway-xds replica and after a restart, and a reconnecting client that already holds
 * it sees the same version string. Not cryptographic: versions only tell contents apart.
 */
const PRIME = 0x01000193;

export function contentHash(bytes: Uint8Array): string {
  let a = 0x811c9dc5;
  let b = 0x050c5d1f;
  for (let i = 0; i < bytes.length; i++) {
    const byte = bytes[i] as number;
    a = Math.imul(a ^ byte, PRIME);
    b = Math.imul(b ^ byte ^ 0x5a, PRIME);
  }
  return (a >>> 0).toString(16).padStart(8, '0') + (b >>> 0).toString(16).padStart(8, '0');
}

const utf8 = new TextEncoder();

export function textHash(text: string): string {
  return contentHash(utf8.encode(text));
}
