/**
 * Subject-token escaping of the event contract (docs/events.md): bytes outside `[A-Za-z0-9_-]` become `%XX` (uppercase hex
 * of the UTF-8 byte), so any pool, zone or pod name is exactly one NATS token and `.`, `*`, `>`
 * and spaces never change a subject's shape.
 */
const SAFE_BYTE = new Uint8Array(256);
for (const ch of 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-') SAFE_BYTE[ch.charCodeAt(0)] = 1;
const HEX = '0123456789ABCDEF';
const encoder = new TextEncoder();
const strictDecoder = new TextDecoder('utf-8', { fatal: true });

export function escapeToken(name: string): string {
  let plain = true;
  for (let i = 0; i < name.length; i++) {
    const c = name.charCodeAt(i);
    if (c > 127 || SAFE_BYTE[c] === 0) {
      plain = false;
      break;
    }
  }
  if (plain) return name;
  let out = '';
  for (const byte of encoder.encode(name)) {
    out += SAFE_BYTE[byte] === 1 ? String.fromCharCode(byte) : `%${HEX[byte >> 4]}${HEX[byte & 15]}`;
  }
  return out;
}

/** Inverse of escapeToken; undefined when the token is not a valid escaped spelling. */
export function unescapeToken(token: string): string | undefined {
  if (!token.includes('%')) {
    for (let i = 0; i < token.length; i++) {
      const c = token.charCodeAt(i);
      if (c > 127 || SAFE_BYTE[c] === 0) return undefined;
    }
    return token;
  }
  const bytes: number[] = [];
  for (let i = 0; i < token.length; i++) {
    const c = token.charCodeAt(i);
    if (c === 37 /* % */) {
      const hex = token.slice(i + 1, i + 3);
      if (!/^[0-9A-F]{2}$/.test(hex)) return undefined;
      const byte = parseInt(hex, 16);
      // A safe byte written escaped is not the canonical spelling: reject so each name has one subject.
      if (SAFE_BYTE[byte] === 1) return undefined;
      bytes.push(byte);
      i += 2;
    } else if (c > 127 || SAFE_BYTE[c] === 0) {
      return undefined;
    } else {
      bytes.push(c);
    }
  }
  try {
    return strictDecoder.decode(new Uint8Array(bytes));
  } catch {
    return undefined;
  }
}
