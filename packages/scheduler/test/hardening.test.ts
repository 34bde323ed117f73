// Regression tests for the hardening review (docs/hardening.md): hostile subset hints, and passive
// health on a failed primary.
import { describe, expect, it } from 'vitest';
import { Scheduler } from '@spillway/scheduler';
import { MAX_SUBSET_ENTRIES, MAX_SUBSET_ENTRY_CHARS } from '../src/subset.js';
import { buildFleet, POOL, T0, threeZones, type PodSpec } from './fleet-fixture.js';

const fourEqual: PodSpec[] = [0, 1, 2, 3].map((i) => ({ pod: `e${i}`, zone: 'a', address: `10.0.0.${i + 1}:8000` }));

describe('subset hint bounds', () => {
  it('ignores and counts an entry longer than the cap, and still reads the valid ones', () => {
    const scheduler = new Scheduler({ fleet: buildFleet(fourEqual), pool: POOL, zone: 'a' });
    const long = `10.0.0.1:8000${' '.repeat(MAX_SUBSET_ENTRY_CHARS)}`;
    const huge = '1'.repeat(1_000_000);
    for (const subset of [[long, huge, '10.0.0.2:8000'], `${long},${huge},10.0.0.2:8000`]) {
      const decision = scheduler.pick({ model: 'llama', subset }, T0);
      expect(decision.status).toBe('routed');
      expect(decision.entries.map((e) => e.address)).toEqual(['10.0.0.2:8000']);
      expect(decision.counts).toMatchObject({ subsetEntries: 3, subsetIgnored: 2 });
    }
  });

  it('accepts the longest valid entry (IPv6 with an IPv4 tail, bracketed, with a port, padded)', () => {
    const address = '[ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255]:65535';
    const scheduler = new Scheduler({ fleet: buildFleet([{ pod: 'v6', zone: 'a', address }]), pool: POOL, zone: 'a' });
    const entry = `   ${address}   `;
    expect(entry.length).toBeLessThanOrEqual(MAX_SUBSET_ENTRY_CHARS);
    expect(scheduler.pick({ model: 'llama', subset: [entry] }, T0).status).toBe('routed');
  });

  it('reads at most MAX_SUBSET_ENTRIES entries of a hint and counts the rest as ignored', () => {
    const scheduler = new Scheduler({ fleet: buildFleet(fourEqual), pool: POOL, zone: 'a' });
    const junk = Array.from({ length: MAX_SUBSET_ENTRIES }, (_, i) => `10.9.${(i >> 8) & 255}.${i & 255}:1`);
    for (const subset of [[...junk, '10.0.0.1:8000'], [...junk, '10.0.0.1:8000'].join(',')]) {
      const decision = scheduler.pick({ model: 'llama', subset }, T0);
      // The real entry is past the cap: nothing readable matches, a 503 rather than the whole pool.
      expect(decision.status).toBe(503);
      expect(decision.counts).toMatchObject({
        subsetEntries: MAX_SUBSET_ENTRIES + 1,
        subsetIgnored: 1,
        subsetUnmatched: MAX_SUBSET_ENTRIES,
      });
    }
  });

  it('keeps resolving correctly while hostile unique entries churn the parse cache', () => {
    const scheduler = new Scheduler({ fleet: buildFleet(fourEqual), pool: POOL, zone: 'a' });
    for (let round = 0; round < 40; round++) {
      const subset = Array.from({ length: 1000 }, (_, i) => `10.${round}.${(i >> 8) & 255}.${i & 255}:${1 + round}`);
      subset.push(`10.0.0.${1 + (round % 4)}:8000`);
      const decision = scheduler.pick({ model: 'llama', subset }, T0);
      expect(decision.entries.map((e) => e.address)).toEqual([`10.0.0.${1 + (round % 4)}:8000`]);
    }
  });
});

describe('passive health on a failed primary', () => {
  it('reportFailed penalises the primary like a served-elsewhere report, until the penalty expires', () => {
    const pods = threeZones();
    const fleet = buildFleet(pods);
    const scheduler = new Scheduler({ fleet, pool: POOL, zone: 'a', region: 'r1', config: { penaltyMs: 5000 } });
    const decision = scheduler.pick({ model: 'llama' }, T0);
    const primary = decision.entries[0]?.endpoint;
    expect(primary?.pod).toBe('a0');
    scheduler.commit(decision, T0);
    expect(scheduler.reportFailed(decision, T0 + 5)).toBe(true);
    expect(scheduler.isPenalised(primary!, T0 + 4000)).toBe(true);
    expect(scheduler.pick({ model: 'llama' }, T0 + 4000).entries.map((e) => e.endpoint.pod)).not.toContain('a0');
    expect(scheduler.isPenalised(primary!, T0 + 5005)).toBe(false);
    scheduler.release(decision);
  });

  it('penalises nothing without a primary or with penalties off', () => {
    const fleet = buildFleet(fourEqual);
    const off = new Scheduler({ fleet, pool: POOL, zone: 'a', config: { penaltyMs: 0 } });
    expect(off.reportFailed(off.pick({ model: 'llama' }, T0), T0)).toBe(false);
    const on = new Scheduler({ fleet, pool: POOL, zone: 'a' });
    const rejected = on.pick({ model: 'llama', subset: [] }, T0);
    expect(rejected.status).toBe(503);
    expect(on.reportFailed(rejected, T0)).toBe(false);
  });
});
