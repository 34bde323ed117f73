import { describe, expect, it } from 'vitest';
import { OTHER_ZONE, SpillMatrix } from '../src/telemetry/spill-matrix.js';

const T0 = 1_764_420_000_000;

describe('SpillMatrix', () => {
  it('counts requests from each gateway zone to each serving zone, per second over the window', () => {
    const matrix = new SpillMatrix(T0 - 120_000);
    for (let i = 0; i < 30; i++) matrix.record('a', 'a', T0 + i * 100);
    for (let i = 0; i < 12; i++) matrix.record('a', 'b', T0 + i * 250);
    matrix.record('b', 'c', T0 + 500);
    const snapshot = matrix.snapshot(T0 + 3_500);
    expect(snapshot.windowS).toBe(60);
    expect(snapshot.zones).toEqual(['a', 'b', 'c']);
    expect(snapshot.perS.map((row) => row.map((v) => v * 60))).toEqual([
      [30, 12, 0],
      [0, 0, 1],
      [0, 0, 0],
    ]);
    // Per second into each zone, oldest first; the last entry is the current second.
    const intoB = snapshot.series[1] ?? [];
    expect(intoB).toHaveLength(60);
    expect(intoB.slice(-4)).toEqual([4, 4, 4, 0]);
  });

  it('forgets seconds older than the window, also in a slot reused since', () => {
    const matrix = new SpillMatrix(T0 - 120_000, 10);
    matrix.record('a', 'b', T0);
    matrix.record('a', 'b', T0 + 9_000);
    expect((matrix.snapshot(T0 + 9_500).perS[0]?.[1] ?? 0) * 10).toBe(2);
    expect((matrix.snapshot(T0 + 10_500).perS[0]?.[1] ?? 0) * 10).toBe(1);
    // T0 + 10 s falls in the slot of T0: the old count is gone, not added to.
    matrix.record('a', 'b', T0 + 10_000);
    expect((matrix.snapshot(T0 + 10_500).perS[0]?.[1] ?? 0) * 10).toBe(2);
    expect(matrix.snapshot(T0 + 60_000).perS[0]?.[1]).toBe(0);
  });

  it('averages over its age while younger than the window', () => {
    const matrix = new SpillMatrix(T0);
    for (let i = 0; i < 20; i++) matrix.record('a', 'b', T0 + i * 200);
    const snapshot = matrix.snapshot(T0 + 4_000);
    expect(snapshot.windowS).toBe(4);
    expect(snapshot.perS[0]?.[1]).toBe(5);
  });

  it('counts zones past its capacity together as (other), so hostile names cannot grow it', () => {
    const matrix = new SpillMatrix(T0 - 120_000, 60, 4);
    for (const zone of ['a', 'b', 'c', 'd', 'e', 'f']) matrix.record('a', zone, T0);
    const snapshot = matrix.snapshot(T0);
    expect(snapshot.zones).toEqual(['a', 'b', 'c', OTHER_ZONE]);
    expect((snapshot.perS[0]?.[3] ?? 0) * 60).toBe(3);
  });

  it('refuses a window or capacity it cannot work with', () => {
    expect(() => new SpillMatrix(T0, 0)).toThrow(/window/);
    expect(() => new SpillMatrix(T0, 1.5)).toThrow(/window/);
    expect(() => new SpillMatrix(T0, 60, 1)).toThrow(/maxZones/);
  });
});
