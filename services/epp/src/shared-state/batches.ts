import {
  MAX_STATE_ENTRIES,
  MAX_STATE_ENTRY_HASHES,
  MAX_STATE_HASHES,
  STATE_PICK,
  STATE_PLACEMENT,
  type StateEntry,
} from '@spillway/events';
import { entryBytes } from './outbox.js';

/** Block hashes an entry carries (picks and placements; none for the other kinds). */
function hashCount(entry: StateEntry): number {
  if (entry[0] === STATE_PICK) return entry[5].length;
  if (entry[0] === STATE_PLACEMENT) return entry[3].length;
  return 0;
}

/**
 * An entry as one batch may carry it: a pick with more than MAX_STATE_ENTRY_HASHES hashes (a prompt
 * of more blocks than that) keeps its first ones, the prompt's beginning, which is what a peer's
 * prefix index matches first; a placement list that long becomes several placements of the same
 * endpoint, oldest first as before. Anything else is itself.
 */
function fitting(entry: StateEntry): StateEntry[] {
  if (entry[0] === STATE_PICK && entry[5].length > MAX_STATE_ENTRY_HASHES) {
    return [[STATE_PICK, entry[1], entry[2], entry[3], entry[4], entry[5].slice(0, MAX_STATE_ENTRY_HASHES)]];
  }
  if (entry[0] === STATE_PLACEMENT && entry[3].length > MAX_STATE_ENTRY_HASHES) {
    const out: StateEntry[] = [];
    for (let i = 0; i < entry[3].length; i += MAX_STATE_ENTRY_HASHES) {
      out.push([STATE_PLACEMENT, entry[1], entry[2], entry[3].slice(i, i + MAX_STATE_ENTRY_HASHES)]);
    }
    return out;
  }
  return [entry];
}

/**
 * This EPP's entries cut into batches every receiver accepts (the decode bounds of
 * packages/events/src/state.ts): at most MAX_STATE_ENTRIES entries and MAX_STATE_HASHES block
 * hashes each, and about `targetBytes` (estimated as the outbox does; an entry larger than that
 * goes alone). Order is kept, so a moved charge's release still comes before its new pick. Always
 * at least one batch, empty when there are no entries (a heartbeat, or an empty snapshot).
 */
export function stateBatches(entries: readonly StateEntry[], targetBytes: number): StateEntry[][] {
  const batches: StateEntry[][] = [];
  let current: StateEntry[] = [];
  let bytes = 0;
  let hashes = 0;
  for (const original of entries) {
    for (const entry of fitting(original)) {
      const size = entryBytes(entry);
      const count = hashCount(entry);
      const full = current.length >= MAX_STATE_ENTRIES || hashes + count > MAX_STATE_HASHES || bytes + size > targetBytes;
      if (full && current.length > 0) {
        batches.push(current);
        current = [];
        bytes = 0;
        hashes = 0;
      }
      current.push(entry);
      bytes += size;
      hashes += count;
    }
  }
  batches.push(current);
  return batches;
}
