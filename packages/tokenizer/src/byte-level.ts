/** Byte → the printable character ByteLevel maps it to (GPT-2's bytes_to_unicode). */
export const BYTE_CHAR: readonly string[] = (() => {
  const printable: number[] = [];
  for (let b = 0x21; b <= 0x7e; b++) printable.push(b);
  for (let b = 0xa1; b <= 0xac; b++) printable.push(b);
  for (let b = 0xae; b <= 0xff; b++) printable.push(b);
  const table: string[] = new Array<string>(256);
  let n = 0;
  for (let b = 0; b < 256; b++) table[b] = printable.includes(b) ? String.fromCharCode(b) : String.fromCharCode(256 + n++);
  return table;
})();

const encoder = new TextEncoder();

/** UTF-8 bytes, as the library's TextEncoder gives them (a lone surrogate becomes U+FFFD). */
export function utf8(text: string): Uint8Array {
  return encoder.encode(text);
}

/** A piece's UTF-8 bytes as ByteLevel characters (what the library computes with Array.from/join). */
export function byteLevel(piece: string): string {
  const bytes = encoder.encode(piece);
  let out = '';
  for (let i = 0; i < bytes.length; i++) out += BYTE_CHAR[bytes[i] as number];
  return out;
}
