// A warm-start answer is split into parts a receiver accepts: at most MAX_STATE_ENTRIES entries
// each (in `entries` and in `lifecycle` alike), whatever how small the entries are.
import { describe, expect, it } from 'vitest';
import { decodeStateBatch, encodeStateBatch, MAX_STATE_ENTRIES, STATE_PICK, STATE_STARTED, type StateEntry } from '@spillway/events';
import { snapshotParts } from '../src/shared-state/receiver.js';

describe('snapshot parts', () => {
  it('hold at most MAX_STATE_ENTRIES entries each, and every part decodes', () => {
    // Short names: about 51 bytes an entry, so the byte target alone would pack over 10,000 into a part.
    const entries: StateEntry[] = [];
    for (let id = 1; id <= 12_000; id++) {
      entries.push([STATE_PICK, id, 'a', 'p1', 1_764_420_000_000, []]);
      if (id % 2 === 0) entries.push([STATE_STARTED, id, 1_764_420_000_010, 100, 0]);
    }
    const parts = snapshotParts(entries, 64 * 1024 * 1024);
    expect(parts.flat()).toEqual(entries);
    for (const [i, part] of parts.entries()) {
      expect(part.length).toBeLessThanOrEqual(MAX_STATE_ENTRIES);
      const batch = {
        v: 1 as const,
        pool: 'l',
        zone: 'a',
        epp: 'e',
        seq: 1,
        sentAt: 1,
        entries: part,
        snapshot: { last: i === parts.length - 1 },
      };
      expect(decodeStateBatch(encodeStateBatch(batch)).ok).toBe(true);
    }
  });
});
