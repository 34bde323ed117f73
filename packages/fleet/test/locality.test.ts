/** Distance between zones and priorities by distance (spillway-xds's EDS, the rendered Envoy configs' EPP and xDS clusters). */
import { describe, expect, it } from 'vitest';
import { distanceOf, prioritiesOf } from '@spillway/fleet';

const zoneA = { zone: 'zone-a', region: 'r1' };

describe('priorities by distance', () => {
  it('own zone 0, same region 1, beyond 2; an unknown region is beyond', () => {
    expect(distanceOf(zoneA, { zone: 'zone-a', region: 'r1' })).toBe(0);
    expect(distanceOf(zoneA, { zone: 'zone-b', region: 'r1' })).toBe(1);
    expect(distanceOf(zoneA, { zone: 'zone-c', region: 'r2' })).toBe(2);
    expect(distanceOf(zoneA, { zone: 'zone-d', region: undefined })).toBe(2);
    expect(distanceOf({ zone: 'zone-a', region: undefined }, { zone: 'zone-b', region: undefined })).toBe(2);
  });

  it('numbers only the levels present, so they are contiguous from 0', () => {
    const places = [
      { zone: 'zone-a', region: 'r1' },
      { zone: 'zone-b', region: 'r1' },
      { zone: 'zone-c', region: 'r2' },
    ];
    expect(prioritiesOf(zoneA, places)).toEqual([0, 1, 2]);
    // zone-c's gateway: no other zone in r2, so the r1 zones are the next level, 1 (not 2).
    expect(prioritiesOf({ zone: 'zone-c', region: 'r2' }, places)).toEqual([1, 1, 0]);
    // A zone with no pods of its own: the nearest level present is 0.
    expect(prioritiesOf({ zone: 'zone-x', region: 'r1' }, places)).toEqual([0, 0, 1]);
  });
});
