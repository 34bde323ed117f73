import { textBlockHashes } from '@spillway/engine';
import type { Fleet } from '@spillway/fleet';
import { describe, expect, it } from 'vitest';
import { resolveScenario, runScenario, runStrategy, type ResolvedScenario, type RunResult } from '../src/index.js';
import { EventQueue } from '../src/queue.js';
import { POOL } from '../src/routers.js';
import { ArrivalStream, constantRate, PrefixGroups, type WorkloadSpec } from '../src/workload.js';
import { parse, smallScenario } from './helpers.js';

/** Whole simulations: generous on a busy machine. */
const SIM_TIMEOUT_MS = 180_000;

const resolve = (overrides: Record<string, unknown> = {}, options = {}): ResolvedScenario =>
  resolveScenario(parse(smallScenario(overrides)), options);
const spec = (s: ResolvedScenario, name: string) => {
  const found = s.strategies.find((x) => x.name === name);
  if (!found) throw new Error(`no strategy ${name}`);
  return found;
};
const run = (s: ResolvedScenario, name: string, seed = 7): RunResult => runStrategy(s, spec(s, name), seed);

const SHARED_PREFIX: WorkloadSpec = {
  parts: [
    { weight: 1, spec: { kind: 'shared-prefix', groups: 8, prefixTokens: [400, 1200], questionTokens: [20, 200], outputTokens: 50 } },
  ],
  sheddableShare: 0,
};

describe('building blocks', () => {
  it('event queue pops in time order, equal times in insertion order', () => {
    const q = new EventQueue<{ id: number }>();
    const times = [5, 1, 3, 3, 0, 9, 1, 3];
    times.forEach((t, i) => q.push(t, { id: i }));
    const out: [number, number][] = [];
    for (let e = q.pop(); e; e = q.pop()) out.push([e.at, e.event.id]);
    expect(out).toEqual([
      [0, 4],
      [1, 1],
      [1, 6],
      [3, 2],
      [3, 3],
      [3, 7],
      [5, 0],
      [9, 5],
    ]);
  });

  it('shared-prefix block hashes equal the engine hashes of the whole prompt, and groups share a prefix', () => {
    const part = SHARED_PREFIX.parts[0]?.spec;
    if (part?.kind !== 'shared-prefix') throw new Error('unreachable');
    const groups = new PrefixGroups(part, 3);
    const stream = new ArrivalStream({
      workload: SHARED_PREFIX,
      groups: [groups],
      schedule: constantRate(10),
      gateway: 0,
      gateways: 1,
      seed: 3,
      endMs: 60_000,
    });
    const seen = new Map<number, number[]>();
    for (let i = 0; i < 40; i++) {
      const r = stream.next();
      if (!r) break;
      expect(r.blockHashes).toEqual(textBlockHashes(r.prompt));
      const other = seen.get(r.group);
      if (other) {
        const shared = Math.floor(groups.prompt(r.group).length / 64);
        expect(r.blockHashes?.slice(0, shared)).toEqual(other.slice(0, shared));
      }
      seen.set(r.group, r.blockHashes ?? []);
    }
  });

  it('arrivals follow the rate schedule and depend on the seed only', () => {
    const w: WorkloadSpec = {
      parts: [{ weight: 1, spec: { kind: 'sharegpt', inputMean: 250, outputMean: 225, sigma: 0.8, inputMax: 2048, outputMax: 1024 } }],
      sheddableShare: 0.25,
    };
    const schedule = { startsMs: [0, 10_000, 20_000], rates: [50, 0, 200] };
    const a = new ArrivalStream({ workload: w, groups: [undefined], schedule, gateway: 1, gateways: 3, seed: 5, endMs: 30_000 });
    const b = new ArrivalStream({ workload: w, groups: [undefined], schedule, gateway: 1, gateways: 3, seed: 5, endMs: 30_000 });
    const counts = [0, 0, 0];
    let sheddable = 0;
    for (let r = a.next(); r; r = a.next()) {
      expect(b.next()).toEqual(r);
      (counts as number[])[Math.floor(r.arrivalAt / 10_000)]! += 1;
      if (r.priority < 0) sheddable++;
    }
    expect(counts[0]).toBeGreaterThan(400);
    expect(counts[0]).toBeLessThan(600);
    expect(counts[1]).toBe(0);
    expect(counts[2]).toBeGreaterThan(1700);
    expect(sheddable / (counts[0]! + counts[2]!)).toBeGreaterThan(0.2);
    expect(sheddable / (counts[0]! + counts[2]!)).toBeLessThan(0.3);
  });
});

describe('routing simulation: determinism and conservation', () => {
  it(
    'the same file and seed give byte-identical JSON; another seed differs',
    async () => {
      const s = resolve({ strategies: ['spillway', 'least-queue'] }, { seeds: [3] });
      const a = JSON.stringify(await runScenario(s, { workers: 0 }));
      const b = JSON.stringify(await runScenario(s, { workers: 0 }));
      expect(b).toBe(a);
      const c = JSON.stringify(await runScenario({ ...s, seeds: [4] }, { workers: 0 }));
      const ra = (JSON.parse(a) as { results: RunResult[] }).results[0] as RunResult;
      const rc = (JSON.parse(c) as { results: RunResult[] }).results[0] as RunResult;
      expect(rc.arrivals).not.toBe(ra.arrivals);
      expect(rc.ttftMs.p90).not.toBe(ra.ttftMs.p90);
    },
    SIM_TIMEOUT_MS,
  );

  it(
    'loses no request: served + 429 + 503 + aborted = arrivals, for every strategy and every fault window',
    () => {
      const s = resolve({
        durationS: 12,
        warmupS: 2,
        load: { clusterFraction: 0.9 },
        workload: { kind: 'sharegpt', sheddableShare: 0.3 },
        faults: [
          { atS: 3, kind: 'replica-down', zone: 'zone-a', count: 1 },
          { atS: 4, kind: 'collector-down', zone: 'zone-b' },
          { atS: 6, kind: 'nats-down' },
          { atS: 7, kind: 'epp-restart', zone: 'zone-c' },
          { atS: 8, kind: 'nats-up' },
          { atS: 9, kind: 'replica-up', zone: 'zone-a', count: 1 },
          { atS: 10, kind: 'collector-up', zone: 'zone-b' },
        ],
      });
      for (const strategy of s.strategies) {
        const r = runStrategy(s, strategy, 7);
        expect(r.arrivals, strategy.name).toBeGreaterThan(500);
        expect(r.served + r.rejected429 + r.rejected503 + r.aborted, strategy.name).toBe(r.arrivals);
        expect(r.windows).toHaveLength(4);
        for (const w of r.windows) {
          expect(w.served + w.rejected429 + w.rejected503 + w.aborted, `${strategy.name} ${w.name}`).toBe(w.arrivals);
          if (w.before) expect(w.before.served + w.before.rejected429 + w.before.rejected503 + w.before.aborted).toBe(w.before.arrivals);
        }
        const byZone = Object.values(r.arrivalsByZone).reduce((a, b) => a + b, 0);
        expect(byZone).toBe(r.arrivals);
        expect(Object.values(r.servedByZone).reduce((a, b) => a + b, 0)).toBe(r.served);
      }
    },
    SIM_TIMEOUT_MS,
  );
});

describe('routing simulation: sanity', () => {
  it(
    'with N equal zones, random sends (N−1)/N of its requests across zones; zone-local none',
    () => {
      for (const zones of [3, 4]) {
        const s = resolve({
          durationS: 20,
          load: { clusterFraction: 0.5 },
          zones: Array.from({ length: zones }, (_, i) => ({ zone: `z${i}`, region: 'r1', replicas: 2 })),
        });
        const random = run(s, 'random');
        expect(Math.abs(random.crossZoneShare - (zones - 1) / zones), `${zones} zones: ${random.crossZoneShare}`).toBeLessThan(0.02);
        expect(run(s, 'zone-local').crossZoneShare).toBe(0);
      }
    },
    SIM_TIMEOUT_MS,
  );

  it(
    'balanced load: Spillway stays in its zone; one zone at 150 %: it spills, zone-local queues without bound',
    () => {
      // Two replicas a zone: a burst that fills both makes another zone faster by more than the zone
      // bias now and then (a few % of requests, more when the EPPs share state and so also see the
      // other zones' spills into theirs; under 1 % with four a zone, BENCHMARKS.md), against two
      // thirds for zone-unaware routing.
      const balanced = resolve({ load: { clusterFraction: 0.6 } });
      expect(run(balanced, 'spillway').crossZoneShare).toBeLessThan(0.1);
      expect(run(balanced, 'random').crossZoneShare).toBeGreaterThan(0.5);
      const hot = resolve({ durationS: 20, load: { clusterFraction: 0.8, zoneFractions: { 'zone-a': 1.5 } } });
      const spill = run(hot, 'spillway');
      const local = run(hot, 'zone-local');
      expect(spill.crossZoneShare).toBeGreaterThan(0.05);
      expect(spill.rejected503).toBe(0);
      expect(local.crossZoneShare).toBe(0);
      expect(local.unbounded).toBe(true);
      expect(local.queueGrowthPerS).toBeGreaterThan(5);
      expect(spill.unbounded).toBe(false);
      expect(spill.ttftMs.p90).toBeLessThan(local.ttftMs.p90 / 3);
    },
    SIM_TIMEOUT_MS,
  );

  it(
    'a collector-down window shows stale metrics for that zone only, and resumes after',
    () => {
      const s = resolve({
        durationS: 14,
        faults: [
          { atS: 5, kind: 'collector-down', zone: 'zone-b' },
          { atS: 10, kind: 'collector-up', zone: 'zone-b' },
        ],
      });
      for (const name of ['spillway', 'least-queue']) {
        const w = run(s, name).windows[0];
        expect(w?.name).toBe('collector-down zone-b');
        // Stale 1 s after the last sample: 4 of the window's 5 s.
        expect(w?.staleShareByZone['zone-b']).toBeGreaterThan(0.7);
        expect(w?.staleShareByZone['zone-a']).toBe(0);
        expect(w?.staleShareByZone['zone-c']).toBe(0);
        expect(w?.before?.served).toBeGreaterThan(0);
      }
    },
    SIM_TIMEOUT_MS,
  );

  it(
    'nats-down stops every event delivery until nats-up',
    () => {
      const s = resolve({
        durationS: 14,
        faults: [
          { atS: 5, kind: 'nats-down' },
          { atS: 10, kind: 'nats-up' },
        ],
      });
      const w = run(s, 'spillway').windows[0];
      expect(w?.name).toBe('nats-down');
      expect(w?.eventsDelivered).toBe(0);
      for (const zone of ['zone-a', 'zone-b', 'zone-c']) expect(w?.staleShareByZone[zone]).toBeGreaterThan(0.7);
    },
    SIM_TIMEOUT_MS,
  );

  it(
    'epp-restart replays the view: the new fleet holds every pod with the last event the stream kept',
    () => {
      const s = resolve({ durationS: 10, faults: [{ atS: 5, kind: 'epp-restart', zone: 'zone-a' }], epps: { sharing: false } });
      let checked = 0;
      runStrategy(s, spec(s, 'spillway'), 7, {
        onEppRestart: ({ at, zone, before, after }) => {
          expect(zone).toBe('zone-a');
          expect(after).not.toBe(before);
          const pods = s.zones.flatMap((z) => Array.from({ length: z.replicas }, (_, k) => ({ zone: z.zone, pod: `vllm-${z.zone}-${k}` })));
          expect(pods).toHaveLength(6);
          for (const { zone: podZone, pod } of pods) {
            const old = before.get(POOL, podZone, pod);
            const replayed = after.get(POOL, podZone, pod);
            expect(replayed?.ready, pod).toBe(true);
            expect(replayed?.address).toBe(old?.address);
            // The replay holds the last sample published (the old fleet may lag it by the delivery delay).
            expect(replayed?.metrics?.observedAt).toBeGreaterThanOrEqual(old?.metrics?.observedAt ?? Infinity);
            expect(at - (replayed?.metrics?.observedAt ?? 0)).toBeLessThan(s.signals.sampleEveryMs + 1);
            // In-flight accounting starts empty.
            expect(replayed?.inFlight).toBe(0);
          }
          checked++;
        },
      });
      expect(checked).toBe(1);
    },
    SIM_TIMEOUT_MS,
  );

  it(
    'an EPP restarting while NATS is down starts empty and replays when NATS returns',
    () => {
      const s = resolve({
        durationS: 10,
        faults: [
          { atS: 4, kind: 'nats-down' },
          { atS: 5, kind: 'epp-restart', zone: 'zone-a' },
          { atS: 7, kind: 'nats-up' },
        ],
      });
      let empty = false;
      let replayed = 0;
      runStrategy(s, spec(s, 'spillway'), 7, {
        onEppRestart: ({ after }) => void (empty = after.pool(POOL) === undefined),
        onNatsUp: ({ fleets }) =>
          void (replayed = s.zones
            .flatMap((z) => Array.from({ length: z.replicas }, (_, k) => (fleets[0] as Fleet).get(POOL, z.zone, `vllm-${z.zone}-${k}`)))
            .filter((e) => e?.ready).length),
      });
      expect(empty).toBe(true);
      expect(replayed).toBe(6);
    },
    SIM_TIMEOUT_MS,
  );

  it(
    'two EPPs per zone: both are used, and the reference strategy stays one pool-wide picker',
    () => {
      const s = resolve({ epps: { perZone: 2 }, durationS: 10 });
      const r = run(s, 'spillway');
      expect(r.served).toBeGreaterThan(0);
      expect(r.crossZoneShare).toBeLessThan(0.05);
      expect(run(s, 'reference').served).toBeGreaterThan(0);
    },
    SIM_TIMEOUT_MS,
  );

  it(
    'sharing state: two EPPs per zone keep prefix affinity as one picker does; without it they dilute it',
    () => {
      const s = resolve({
        epps: { perZone: 2 },
        durationS: 20,
        load: { clusterFraction: 0.8 },
        workload: { kind: 'shared-prefix', groups: 24, prefixTokens: [2000, 6000], questionTokens: [200, 1200], outputTokens: 200 },
        strategies: ['spillway', { name: 'spillway-unshared', kind: 'spillway', sharing: false }],
      });
      const shared = run(s, 'spillway');
      const alone = run(s, 'spillway-unshared');
      // Unshared, each EPP's index holds half the placements: groups spread over more replicas, caches thrash, queues grow.
      // Unshared TTFT swings with the seed (seeds 1–3 and 7: p90 190–1,320 ms, p99 650–1,910) against
      // shared's p90 105–125 and p99 160–260: these margins hold for every one of them.
      expect(shared.prefixHitShare).toBeGreaterThan(alone.prefixHitShare + 0.02);
      expect(shared.ttftMs.p90).toBeLessThan(alone.ttftMs.p90 * 0.75);
      expect(shared.ttftMs.p99).toBeLessThan(alone.ttftMs.p99 / 2);
      expect(shared.rejected503).toBe(0);
    },
    SIM_TIMEOUT_MS,
  );

  it(
    'sharing state: a restarted EPP warm-starts from its peers (their requests in flight), and starts empty without sharing',
    () => {
      const faults = [{ atS: 5, kind: 'epp-restart', zone: 'zone-a' }];
      const inFlightAfter = (sharing: boolean): number => {
        const s = resolve({ durationS: 8, faults, epps: { perZone: 2, sharing } });
        let total = -1;
        runStrategy(s, spec(s, 'spillway'), 7, {
          onEppRestart: ({ after }) => {
            if (total >= 0) return; // the zone's second EPP restarts too; the first is enough
            total = 0;
            for (const pod of after.pool(POOL)?.endpoints() ?? []) total += pod.inFlight;
          },
        });
        return total;
      };
      expect(inFlightAfter(false)).toBe(0);
      expect(inFlightAfter(true)).toBeGreaterThan(0);
    },
    SIM_TIMEOUT_MS,
  );

  it(
    'sheddable requests: the reference rule sheds only when the pool is saturated',
    () => {
      const idle = resolve({ workload: { kind: 'sharegpt', sheddableShare: 0.5 }, load: { clusterFraction: 0.3 }, durationS: 10 });
      expect(run(idle, 'reference').rejected429).toBe(0);
      const over = resolve({ workload: { kind: 'sharegpt', sheddableShare: 0.5 }, load: { clusterFraction: 1.6 }, durationS: 20 });
      expect(run(over, 'reference').rejected429).toBeGreaterThan(0);
    },
    SIM_TIMEOUT_MS,
  );
});
