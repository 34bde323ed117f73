/**
 * Pre-token → token ids, bounded in bytes. Counted per entry: the key (2 bytes a UTF-16 unit), the
 * ids (4 bytes each) and a fixed overhead for the Map slot and the objects. Words longer than
 * `MAX_KEY_CHARS` are not cached (rare, and one would cost as much as many short ones).
 *
 * Eviction is oldest-inserted first (a Map iterates in insertion order): a hit costs one lookup and
 * no reordering, which is what keeps the hit path cheap. Words that keep recurring are re-inserted
 * soon after an eviction; the vocabulary of real text is small enough that the default bound rarely
 * evicts at all.
 */
export const MAX_KEY_CHARS = 256;
const ENTRY_OVERHEAD_BYTES = 96;

export class PieceCache {
  private readonly map = new Map<string, Uint32Array>();
  private bytes = 0;

  constructor(private readonly maxBytes: number) {}

  get(key: string): Uint32Array | undefined {
    return this.map.get(key);
  }

  set(key: string, ids: Uint32Array): void {
    if (key.length > MAX_KEY_CHARS || this.map.has(key)) return;
    const size = entryBytes(key, ids);
    if (size > this.maxBytes) return;
    while (this.bytes + size > this.maxBytes) {
      const oldest = this.map.entries().next();
      if (oldest.done) break;
      const [oldKey, oldIds] = oldest.value;
      this.map.delete(oldKey);
      this.bytes -= entryBytes(oldKey, oldIds);
    }
    // A pre-token is a slice of the prompt; V8 may keep it as a view into the whole prompt string.
    // Storing a copy keeps the cache from holding prompts alive beyond its byte bound.
    this.map.set(ownCopy(key), ids);
    this.bytes += size;
  }

  stats(): { entries: number; bytes: number; maxBytes: number } {
    return { entries: this.map.size, bytes: this.bytes, maxBytes: this.maxBytes };
  }
}

function entryBytes(key: string, ids: Uint32Array): number {
  return ENTRY_OVERHEAD_BYTES + 2 * key.length + ids.byteLength;
}

/** A string with its own storage (flattening a concatenation copies the characters). */
function ownCopy(key: string): string {
  return (' ' + key).slice(1);
}
