/**
 * Pre-token → token ids, bounded in bytes. Counted per entry: the key (2 bytes a UTF-16 unit), the
 * ids (4 bytes each) and a fixed overhead for the Map slot and the objects. Words longer than
 * `MAX_KEY_CHARS` are not cached (rare, and one would cost as much as many short ones).
 *
 * Looked up by a range of the text (`lookup(text, start, end)`), not by a string: slicing each
 * pre-token out of the prompt to use it as a Map key allocated a string per token, and with the
 * regex's match arrays that garbage filled V8's young generation every few dozen requests (each
 * scavenge a ~1 ms pause). Entries are kept in a Map by a 30-bit hash of their characters (a small
 * integer key: no string is built or hashed by V8) and confirmed by comparing the characters; keys
 * with the same hash are chained.
 *
 * Eviction is oldest-inserted first (a Map iterates in insertion order; a chain goes with its first
 * entry): a hit costs one lookup and no reordering, which is what keeps the hit path cheap. Words
 * that keep recurring are re-inserted soon after an eviction; the vocabulary of real text is small
 * enough that the default bound rarely evicts at all.
 */
export const MAX_KEY_CHARS = 256;
const ENTRY_OVERHEAD_BYTES = 96;

interface Entry {
  readonly key: string;
  readonly ids: Uint32Array;
  next: Entry | undefined;
}

export class PieceCache {
  private readonly map = new Map<number, Entry>();
  private bytes = 0;
  private entries = 0;

  constructor(private readonly maxBytes: number) {}

  get(key: string): Uint32Array | undefined {
    return this.lookup(key, 0, key.length);
  }

  /** The ids of `text.slice(start, end)`, without making that string. */
  lookup(text: string, start: number, end: number): Uint32Array | undefined {
    if (end - start > MAX_KEY_CHARS) return undefined;
    for (let e = this.map.get(hashRange(text, start, end)); e !== undefined; e = e.next)
      if (sameRange(e.key, text, start, end)) return e.ids;
    return undefined;
  }

  set(key: string, ids: Uint32Array): void {
    if (key.length > MAX_KEY_CHARS || this.get(key) !== undefined) return;
    const size = entryBytes(key, ids);
    if (size > this.maxBytes) return;
    while (this.bytes + size > this.maxBytes) {
      const oldest = this.map.entries().next();
      if (oldest.done) break;
      const [hash, chain] = oldest.value;
      this.map.delete(hash);
      for (let e: Entry | undefined = chain; e !== undefined; e = e.next) {
        this.bytes -= entryBytes(e.key, e.ids);
        this.entries--;
      }
    }
    const hash = hashRange(key, 0, key.length);
    const head = this.map.get(hash);
    // A pre-token is a slice of the prompt; V8 may keep it as a view into the whole prompt string.
    // Storing a copy keeps the cache from holding prompts alive beyond its byte bound.
    const entry: Entry = { key: ownCopy(key), ids, next: undefined };
    if (head === undefined) this.map.set(hash, entry);
    else {
      let last = head;
      while (last.next !== undefined) last = last.next;
      last.next = entry;
    }
    this.bytes += size;
    this.entries++;
  }

  stats(): { entries: number; bytes: number; maxBytes: number } {
    return { entries: this.entries, bytes: this.bytes, maxBytes: this.maxBytes };
  }
}

/** FNV-1a over the UTF-16 units, kept to 30 bits so that V8 holds it as a small integer. */
export function hashRange(text: string, start: number, end: number): number {
  let h = 0x811c9dc5;
  for (let i = start; i < end; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  return (h ^ (h >>> 30)) & 0x3fffffff;
}

function sameRange(key: string, text: string, start: number, end: number): boolean {
  if (key.length !== end - start) return false;
  for (let i = 0; i < key.length; i++) if (key.charCodeAt(i) !== text.charCodeAt(start + i)) return false;
  return true;
}

function entryBytes(key: string, ids: Uint32Array): number {
  return ENTRY_OVERHEAD_BYTES + 2 * key.length + ids.byteLength;
}

/** A string with its own storage (flattening a concatenation copies the characters). */
function ownCopy(key: string): string {
  return (' ' + key).slice(1);
}
