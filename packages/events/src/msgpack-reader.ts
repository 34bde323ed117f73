/**
 * Reading untrusted msgpack without letting its shape decide the cost.
 *
 * A generic decoder builds whatever the bytes describe before anything can look at it: a payload
 * of nested one-element arrays makes it allocate one array per byte (hundreds of ms per MiB), and
 * a header announcing a four-billion-element array is believed until the bytes run out. Two tools
 * here bound that work before it is done:
 *
 * - `MsgpackReader`, a cursor for decoders that know the layout they expect: each call reads one
 *   value of the expected type, checks a container's announced length against the caller's bound
 *   and against the bytes left (every element takes at least one byte) before reading any
 *   element, and fails at the first byte that does not fit. Nesting is whatever the caller's code
 *   nests, so depth is bounded by the layout itself. Unknown fields are skipped with `skip`, which
 *   is bounded in depth and elements too.
 * - `scanMsgpack`, a walk over a whole value that checks depth, element count, string and binary
 *   lengths without allocating anything, for layouts flexible enough to leave to a generic decoder
 *   afterwards (a model server's KV-event batch).
 *
 * Both are linear in the bytes they accept and stop at the first bound exceeded.
 */

/** Why a payload was refused: not msgpack at all, or msgpack that is not the layout (or is past a bound of it). */
export type MsgpackErrorKind = 'not-msgpack' | 'invalid';

export class MsgpackError extends Error {
  constructor(
    readonly kind: MsgpackErrorKind,
    message: string,
  ) {
    super(message);
  }
}

const TWO_32 = 4294967296;
/** 2^53 / 2^32: the high word of the first integer a double cannot hold exactly. */
const SAFE_HIGH = 0x200000;
const utf8 = new TextDecoder('utf-8', { fatal: true });

/** A value of the wrong type; a type byte msgpack never uses (0xc1) means the payload is not msgpack at all. */
function notA(b: number, what: string, expected: string): MsgpackError {
  return b === 0xc1
    ? new MsgpackError('not-msgpack', `${what}: type byte 0xc1`)
    : new MsgpackError('invalid', `${what} is not ${expected}`);
}

/** A msgpack cursor over one payload; every read checks the type and the bounds it is given. */
export class MsgpackReader {
  pos = 0;
  private readonly view: DataView;

  constructor(readonly bytes: Uint8Array) {
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  /** Bytes not read yet. */
  get left(): number {
    return this.bytes.byteLength - this.pos;
  }

  /** The next byte (the type of the next value), not consumed. */
  peek(): number {
    if (this.pos >= this.bytes.byteLength) throw new MsgpackError('not-msgpack', 'the payload ends early');
    return this.bytes[this.pos] as number;
  }

  /** Consumes a nil and returns true, or returns false and consumes nothing. */
  nil(): boolean {
    if (this.peek() !== 0xc0) return false;
    this.pos++;
    return true;
  }

  /** An array header: its length, at most `max` (and no more than the bytes left could hold). */
  arrayHeader(max: number, what: string): number {
    const b = this.peek();
    let length: number;
    if (b >= 0x90 && b <= 0x9f) {
      this.pos++;
      length = b & 0x0f;
    } else if (b === 0xdc) {
      length = this.view.getUint16(this.take(3) + 1);
    } else if (b === 0xdd) {
      length = this.view.getUint32(this.take(5) + 1);
    } else throw notA(b, what, 'an array');
    return this.bounded(length, max, 1, what);
  }

  /** A map header: its number of entries, at most `max` (each takes at least two bytes). */
  mapHeader(max: number, what: string): number {
    const b = this.peek();
    let length: number;
    if (b >= 0x80 && b <= 0x8f) {
      this.pos++;
      length = b & 0x0f;
    } else if (b === 0xde) {
      length = this.view.getUint16(this.take(3) + 1);
    } else if (b === 0xdf) {
      length = this.view.getUint32(this.take(5) + 1);
    } else throw notA(b, what, 'a map');
    return this.bounded(length, max, 2, what);
  }

  /**
   * The header of a payload that must be one map (a batch): its number of entries. Anything else is
   * `not-msgpack` when it is a value followed by more bytes (text such as JSON reads so: `{` is a
   * msgpack integer), else `invalid`; telling them apart reads at most a small value.
   */
  topMap(max: number, what: string): number {
    if (this.isMap()) return this.mapHeader(max, what);
    this.skip(4, 256, what);
    if (this.pos < this.bytes.byteLength) throw new MsgpackError('not-msgpack', `${this.left} bytes after the first value`);
    throw new MsgpackError('invalid', `${what} is not a map`);
  }

  /** True when the next value is a map (not consumed). */
  isMap(): boolean {
    const b = this.peek();
    return (b >= 0x80 && b <= 0x8f) || b === 0xde || b === 0xdf;
  }

  /** True when the next value is an array (not consumed). */
  isArray(): boolean {
    const b = this.peek();
    return (b >= 0x90 && b <= 0x9f) || b === 0xdc || b === 0xdd;
  }

  /** A string of at most `maxBytes` UTF-8 bytes. */
  str(maxBytes: number, what: string): string {
    const b = this.peek();
    let length: number;
    let start: number;
    if (b >= 0xa0 && b <= 0xbf) {
      length = b & 0x1f;
      start = this.take(1) + 1;
    } else if (b === 0xd9) {
      start = this.take(2);
      length = this.bytes[start + 1] as number;
      start += 2;
    } else if (b === 0xda) {
      start = this.take(3);
      length = this.view.getUint16(start + 1);
      start += 3;
    } else if (b === 0xdb) {
      start = this.take(5);
      length = this.view.getUint32(start + 1);
      start += 5;
    } else throw notA(b, what, 'a string');
    if (length > maxBytes) throw new MsgpackError('invalid', `${what}: a string of ${length} bytes (at most ${maxBytes})`);
    this.take(length);
    // Short ASCII (names, field keys) without the TextDecoder call.
    if (length <= 32) {
      let s = '';
      for (let i = start; i < start + length; i++) {
        const c = this.bytes[i] as number;
        if (c >= 0x80) return this.utf8(start, length, what);
        s += String.fromCharCode(c);
      }
      return s;
    }
    return this.utf8(start, length, what);
  }

  /** A binary of at most `maxBytes` bytes: a view into the payload, not a copy. */
  bin(maxBytes: number, what: string): Uint8Array {
    const b = this.peek();
    let length: number;
    let start: number;
    if (b === 0xc4) {
      start = this.take(2);
      length = this.bytes[start + 1] as number;
      start += 2;
    } else if (b === 0xc5) {
      start = this.take(3);
      length = this.view.getUint16(start + 1);
      start += 3;
    } else if (b === 0xc6) {
      start = this.take(5);
      length = this.view.getUint32(start + 1);
      start += 5;
    } else throw notA(b, what, 'a binary');
    if (length > maxBytes) throw new MsgpackError('invalid', `${what}: a binary of ${length} bytes (at most ${maxBytes})`);
    this.take(length);
    return this.bytes.subarray(start, start + length);
  }

  /** A boolean. */
  bool(what: string): boolean {
    const b = this.peek();
    if (b !== 0xc2 && b !== 0xc3) throw notA(b, what, 'a boolean');
    this.pos++;
    return b === 0xc3;
  }

  /**
   * A number: any msgpack integer or float. Integers beyond 2^53 in magnitude are refused (they
   * would not survive as a JavaScript number); whether a value must be whole is the caller's rule.
   */
  number(what: string): number {
    const b = this.peek();
    if (b <= 0x7f) {
      this.pos++;
      return b;
    }
    if (b >= 0xe0) {
      this.pos++;
      return b - 0x100;
    }
    switch (b) {
      case 0xcc:
        return this.bytes[this.take(2) + 1] as number;
      case 0xcd:
        return this.view.getUint16(this.take(3) + 1);
      case 0xce:
        return this.view.getUint32(this.take(5) + 1);
      case 0xcf: {
        const at = this.take(9) + 1;
        const high = this.view.getUint32(at);
        if (high >= SAFE_HIGH) throw new MsgpackError('invalid', `${what}: an integer beyond 2^53`);
        return high * TWO_32 + this.view.getUint32(at + 4);
      }
      case 0xd0:
        return this.view.getInt8(this.take(2) + 1);
      case 0xd1:
        return this.view.getInt16(this.take(3) + 1);
      case 0xd2:
        return this.view.getInt32(this.take(5) + 1);
      case 0xd3: {
        const at = this.take(9) + 1;
        const high = this.view.getInt32(at);
        if (high >= SAFE_HIGH || high < -SAFE_HIGH) throw new MsgpackError('invalid', `${what}: an integer beyond 2^53`);
        return high * TWO_32 + this.view.getUint32(at + 4);
      }
      case 0xca:
        return this.view.getFloat32(this.take(5) + 1);
      case 0xcb:
        return this.view.getFloat64(this.take(9) + 1);
      default:
        throw notA(b, what, 'a number');
    }
  }

  /**
   * Reads `count` values that must be whole numbers in [0, 2^53) into `out` (block hashes and
   * keys: the hot loop of every batch, so the common encodings are read inline); returns the index
   * of the first value that is a number but not such a whole number, or -1.
   */
  wholeNumbers(count: number, out: number[], what: string): number {
    const bytes = this.bytes;
    const size = bytes.byteLength;
    let pos = this.pos;
    for (let i = 0; i < count; i++) {
      if (pos >= size) throw new MsgpackError('not-msgpack', 'the payload ends early');
      const b = bytes[pos] as number;
      if (b <= 0x7f) {
        out[i] = b;
        pos += 1;
      } else if (b === 0xcf && pos + 9 <= size) {
        const high =
          (((bytes[pos + 1] as number) << 24) |
            ((bytes[pos + 2] as number) << 16) |
            ((bytes[pos + 3] as number) << 8) |
            (bytes[pos + 4] as number)) >>>
          0;
        if (high >= SAFE_HIGH) {
          this.pos = pos;
          return i;
        }
        const low =
          (((bytes[pos + 5] as number) << 24) |
            ((bytes[pos + 6] as number) << 16) |
            ((bytes[pos + 7] as number) << 8) |
            (bytes[pos + 8] as number)) >>>
          0;
        out[i] = high * TWO_32 + low;
        pos += 9;
      } else if (b === 0xce && pos + 5 <= size) {
        out[i] =
          (((bytes[pos + 1] as number) << 24) |
            ((bytes[pos + 2] as number) << 16) |
            ((bytes[pos + 3] as number) << 8) |
            (bytes[pos + 4] as number)) >>>
          0;
        pos += 5;
      } else {
        // Anything else (short integers, floats, negatives, other types): the general path.
        this.pos = pos;
        let n: number;
        try {
          n = this.number(what);
        } catch (error) {
          if (error instanceof MsgpackError && error.kind === 'invalid') return i;
          throw error;
        }
        if (!(n >= 0 && Number.isSafeInteger(n))) return i;
        out[i] = n;
        pos = this.pos;
      }
    }
    this.pos = pos;
    return -1;
  }

  /**
   * Skips one value of any type (an unknown field), at most `maxDepth` containers deep and
   * `maxElements` elements in all, without building it.
   */
  skip(maxDepth: number, maxElements: number, what: string): void {
    this.pos = walk(this.bytes, this.view, this.pos, { maxDepth, maxElements, maxStrBytes: this.left, maxBinBytes: this.left }, what);
  }

  /** Checks that the whole payload was read. */
  end(what: string): void {
    if (this.pos !== this.bytes.byteLength) throw new MsgpackError('not-msgpack', `${this.left} bytes after ${what}`);
  }

  private take(n: number): number {
    const at = this.pos;
    if (at + n > this.bytes.byteLength) throw new MsgpackError('not-msgpack', 'the payload ends early');
    this.pos = at + n;
    return at;
  }

  private bounded(length: number, max: number, bytesPerElement: number, what: string): number {
    if (length > max) throw new MsgpackError('invalid', `${what}: ${length} elements (at most ${max})`);
    if (length * bytesPerElement > this.left)
      throw new MsgpackError('not-msgpack', `${what}: ${length} elements announced, fewer bytes left`);
    return length;
  }

  private utf8(start: number, length: number, what: string): string {
    try {
      return utf8.decode(this.bytes.subarray(start, start + length));
    } catch {
      throw new MsgpackError('invalid', `${what} is not UTF-8`);
    }
  }
}

/** What `scanMsgpack` allows. */
export interface MsgpackBounds {
  /** Containers nested at most this deep (the top-level value is depth 1 when it is a container). */
  maxDepth: number;
  /** Array elements plus map keys and values, over the whole payload. */
  maxElements: number;
  maxStrBytes: number;
  maxBinBytes: number;
}

/**
 * Checks that `bytes` is exactly one msgpack value within `bounds`, without building it; the
 * violation, or undefined. Extension types are refused. Linear in the bytes read, never more than
 * `maxElements` steps plus the bytes of strings and binaries skipped.
 */
export function scanMsgpack(bytes: Uint8Array, bounds: MsgpackBounds): { kind: MsgpackErrorKind; message: string } | undefined {
  try {
    const end = walk(bytes, new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength), 0, bounds, 'the payload');
    if (end !== bytes.byteLength) return { kind: 'not-msgpack', message: `${bytes.byteLength - end} bytes after the payload` };
    return undefined;
  } catch (error) {
    if (error instanceof MsgpackError) return { kind: error.kind, message: error.message };
    throw error;
  }
}

/**
 * Walks one value from `start`, iteratively (an explicit stack of the elements left in each open
 * container, innermost last); returns the position after it.
 */
function walk(bytes: Uint8Array, view: DataView, start: number, bounds: MsgpackBounds, what: string): number {
  const size = bytes.byteLength;
  const open: number[] = [];
  let pos = start;
  let elements = 0;
  const need = (n: number): void => {
    if (pos + n > size) throw new MsgpackError('not-msgpack', `${what} ends early`);
  };
  const blob = (length: number, max: number, kind: string): void => {
    if (length > max) throw new MsgpackError('invalid', `${what}: a ${kind} of ${length} bytes (at most ${max})`);
    need(length);
    pos += length;
  };
  for (;;) {
    need(1);
    const b = bytes[pos++] as number;
    // Elements of a container this value opens (a map entry counts as two: key and value).
    let opened = 0;
    if (b <= 0x7f || b >= 0xe0 || b === 0xc0 || b === 0xc2 || b === 0xc3) {
      // fixint, nil, booleans: the byte is the value
    } else if (b >= 0x80 && b <= 0x8f) opened = (b & 0x0f) * 2;
    else if (b >= 0x90 && b <= 0x9f) opened = b & 0x0f;
    else if (b >= 0xa0 && b <= 0xbf) blob(b & 0x1f, bounds.maxStrBytes, 'string');
    else {
      switch (b) {
        case 0xcc:
        case 0xd0:
          need(1);
          pos += 1;
          break;
        case 0xcd:
        case 0xd1:
          need(2);
          pos += 2;
          break;
        case 0xce:
        case 0xd2:
        case 0xca:
          need(4);
          pos += 4;
          break;
        case 0xcf:
        case 0xd3:
        case 0xcb:
          need(8);
          pos += 8;
          break;
        case 0xd9:
          need(1);
          blob(bytes[pos++] as number, bounds.maxStrBytes, 'string');
          break;
        case 0xda:
          need(2);
          pos += 2;
          blob(view.getUint16(pos - 2), bounds.maxStrBytes, 'string');
          break;
        case 0xdb:
          need(4);
          pos += 4;
          blob(view.getUint32(pos - 4), bounds.maxStrBytes, 'string');
          break;
        case 0xc4:
          need(1);
          blob(bytes[pos++] as number, bounds.maxBinBytes, 'binary');
          break;
        case 0xc5:
          need(2);
          pos += 2;
          blob(view.getUint16(pos - 2), bounds.maxBinBytes, 'binary');
          break;
        case 0xc6:
          need(4);
          pos += 4;
          blob(view.getUint32(pos - 4), bounds.maxBinBytes, 'binary');
          break;
        case 0xdc:
          need(2);
          pos += 2;
          opened = view.getUint16(pos - 2);
          break;
        case 0xdd:
          need(4);
          pos += 4;
          opened = view.getUint32(pos - 4);
          break;
        case 0xde:
          need(2);
          pos += 2;
          opened = view.getUint16(pos - 2) * 2;
          break;
        case 0xdf:
          need(4);
          pos += 4;
          opened = view.getUint32(pos - 4) * 2;
          break;
        default:
          // 0xc1 (never used) and the extension types.
          throw new MsgpackError(b === 0xc1 ? 'not-msgpack' : 'invalid', `${what}: type byte 0x${b.toString(16)} is not allowed`);
      }
    }
    // This value is one element of the innermost open container.
    if (open.length > 0) (open[open.length - 1] as number)--;
    if (opened > 0) {
      if (open.length + 1 > bounds.maxDepth) throw new MsgpackError('invalid', `${what} nests deeper than ${bounds.maxDepth}`);
      elements += opened;
      if (elements > bounds.maxElements) throw new MsgpackError('invalid', `${what} holds more than ${bounds.maxElements} elements`);
      // Every element takes at least one byte: a length the bytes cannot hold is refused before reading on.
      if (opened > size - pos) throw new MsgpackError('not-msgpack', `${what}: ${opened} elements announced, fewer bytes left`);
      open.push(opened);
      continue;
    }
    while (open.length > 0 && open[open.length - 1] === 0) open.pop();
    if (open.length === 0) return pos;
  }
}
