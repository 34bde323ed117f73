// Envoy's priority load, rule by rule (services/gateway/src/priority-lb.ts), checked against the
// examples of Envoy's own documentation (arch_overview/upstream/load_balancing: "Priority levels",
// "Panic threshold"), with 100 hosts per level so healthy counts are percentages.
import { describe, expect, it } from 'vitest';
import { choosePriority, priorityLoads, PriorityRoundRobin } from '../src/priority-lb.js';

const levels = (...healthyPercent: number[]) => healthyPercent.map((healthy) => ({ hosts: 100, healthy }));

describe('priority load (overprovisioning factor 1.4)', () => {
  it.each([
    [
      [100, 100],
      [100, 0],
    ],
    [
      [72, 72],
      [100, 0],
    ],
    [
      [71, 71],
      [99, 1],
    ],
    [
      [50, 50],
      [70, 30],
    ],
    [
      [25, 100],
      [35, 65],
    ],
    [
      [25, 25],
      [50, 50],
    ],
    [
      [0, 100],
      [0, 100],
    ],
    [
      [20, 100],
      [28, 72],
    ],
    [
      [0, 0, 100],
      [0, 0, 100],
    ],
    [
      [50, 10, 100],
      [70, 14, 16],
    ],
  ])('healthy %j of the levels gives loads %j', (healthy, load) => {
    expect(priorityLoads(levels(...healthy)).load).toEqual(load);
  });

  it('a level with no hosts takes nothing; the loads always sum to 100', () => {
    expect(priorityLoads([{ hosts: 0, healthy: 0 }, ...levels(100)]).load).toEqual([0, 100]);
    for (const healthy of [
      [1, 2, 3],
      [33, 33, 33],
      [99, 1, 0],
      [10, 10, 10],
    ]) {
      expect(priorityLoads(levels(...healthy)).load.reduce((a, b) => a + b, 0)).toBe(100);
    }
  });
});

describe('panic', () => {
  it('never while the total availability is 100, whatever one level holds', () => {
    expect(priorityLoads(levels(10, 100)).panic).toEqual([false, false]);
  });

  it('below 100, a level whose healthy share is under the threshold is in panic', () => {
    // 40 % and 30 %: total availability 98; both under 50 %, so every level is: total panic.
    const loads = priorityLoads(levels(40, 30));
    expect(loads.panic).toEqual([true, true]);
    // Total panic: the load follows the host counts, not the health.
    expect(loads.load).toEqual([50, 50]);
    // 60 % and 0 %: total 84; only the empty-of-health level panics, P0 keeps its share of 84.
    expect(priorityLoads(levels(60, 0))).toEqual({ load: [100, 0], panic: [false, true] });
  });

  it('total panic splits by host counts: one of one host unhealthy in each of two levels of 1 and 3 hosts', () => {
    expect(
      priorityLoads([
        { hosts: 1, healthy: 0 },
        { hosts: 3, healthy: 0 },
      ]),
    ).toEqual({ load: [25, 75], panic: [true, true] });
  });

  it('with the threshold at 0 and nothing healthy, priority 0 takes the load and is not in panic (no host to give)', () => {
    expect(priorityLoads(levels(0, 0), 0)).toEqual({ load: [100, 0], panic: [false, false] });
  });
});

describe('choosePriority', () => {
  it('maps hash % 100 + 1 onto the cumulative loads', () => {
    expect([0, 69, 70, 99].map((hash) => choosePriority([70, 30], hash))).toEqual([0, 0, 1, 1]);
    expect(choosePriority([0, 0, 100], 5)).toBe(2);
  });
});

describe('PriorityRoundRobin', () => {
  it('takes priority 0 while it is healthy, the next level when it is not, and back', () => {
    const healthy = new Set(['a1', 'a2', 'b1', 'c1']);
    const lb = new PriorityRoundRobin([['a1', 'a2'], ['b1'], ['c1']], (host) => healthy.has(host), { random: () => 0.5 });
    const picks = (n: number) => Array.from({ length: n }, () => lb.pick());
    expect(new Set(picks(6))).toEqual(new Set(['a1', 'a2']));
    healthy.delete('a1');
    // 1 of 2 healthy: health 70, so 70 % of the picks stay (random 0.5 lands there) on a2 only.
    expect(new Set(picks(4))).toEqual(new Set(['a2']));
    healthy.delete('a2');
    expect(picks(3)).toEqual(['b1', 'b1', 'b1']);
    healthy.delete('b1');
    expect(picks(2)).toEqual(['c1', 'c1']);
    healthy.add('a1');
    healthy.add('a2');
    expect(new Set(picks(4))).toEqual(new Set(['a1', 'a2']));
  });

  it('spreads a partly available level over the next by the random number, as Envoy does', () => {
    const healthy = new Set(['a1', 'b1']);
    let r = 0;
    // Uniform random numbers: the share of picks per level follows the loads (70 / 30).
    const lb = new PriorityRoundRobin([['a1', 'a2'], ['b1']], (host) => healthy.has(host), { random: () => ((r = (r + 0.37) % 1), r) });
    const counts = new Map<string, number>();
    for (let i = 0; i < 1000; i++) {
      const host = lb.pick() as string;
      counts.set(host, (counts.get(host) ?? 0) + 1);
    }
    expect(counts.get('a2')).toBeUndefined();
    expect((counts.get('a1') ?? 0) / 1000).toBeGreaterThan(0.6);
    expect((counts.get('a1') ?? 0) / 1000).toBeLessThan(0.8);
  });

  it('round-robins within a level, separately for its healthy hosts and for all of them (panic)', () => {
    const healthy = new Set(['a', 'b', 'c']);
    const lb = new PriorityRoundRobin([['a', 'b', 'c']], (host) => healthy.has(host), { random: () => 0 });
    expect([lb.pick(), lb.pick(), lb.pick(), lb.pick()]).toEqual(['a', 'b', 'c', 'a']);
    healthy.clear();
    // Total panic: every host, from the panic source's own position.
    expect([lb.pick(), lb.pick(), lb.pick()]).toEqual(['a', 'b', 'c']);
    expect(new PriorityRoundRobin([['a']], () => false, { panicThreshold: 0 }).pick()).toBeUndefined();
    expect(new PriorityRoundRobin([], () => true).pick()).toBeUndefined();
  });
});
