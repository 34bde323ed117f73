import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { loadScenario, resolveScenario, schedulerConfigFor, strategySpecs } from '../src/index.js';
import { parse, problems, smallScenario } from './helpers.js';

const SCENARIOS = fileURLToPath(new URL('../../../infra/scenarios/', import.meta.url));

describe('scenario file: validation', () => {
  it('accepts a minimal file and fills the defaults', () => {
    const s = parse(smallScenario());
    expect(s.signals).toMatchObject({ sampleEveryMs: 100, delayMs: [5, 20], lossRate: 0, staleAfterMs: 1000, sharingDelayMs: [1, 3] });
    // Sharing is the product's default: the scheduler-based strategies run with it unless told otherwise.
    // So are response headers only (the shipped Envoy config): the EPPs see a request start, not its end.
    expect(s.epps).toEqual({ perZone: 1, spread: 'round-robin', sharing: true, batchMs: 5, responseBody: 'none' });
    expect(s.signals).toMatchObject({ scrapeEveryMs: 50, scrapeMs: [1, 5] });
    expect(s.network).toMatchObject({ sameRegionMs: 1, crossRegionMs: 30 });
    // A restarted collector recovers nothing unless the servers have a replay socket (vLLM's default).
    expect(s.signals).toMatchObject({ kvReplay: 'none', kvReplayTailS: 30 });
  });

  it("the servers' replay socket: a scenario field, overridden per strategy; a restart's recovery window", () => {
    const file = parse(
      smallScenario({
        signals: { kvReplay: 'tail', kvReplayTailS: 60 },
        faults: [
          { atS: 5, kind: 'collector-down', zone: 'zone-b' },
          { atS: 8, kind: 'collector-up', zone: 'zone-b', windowS: 4 },
        ],
        strategies: ['spillway-precise', { name: 'precise-full', kind: 'spillway-precise', kvReplay: 'full' }],
      }),
    );
    const s = resolveScenario(file);
    expect(s.signals).toMatchObject({ kvReplay: 'tail', kvReplayTailS: 60 });
    expect(s.strategies.map((x) => x.kvReplay)).toEqual([undefined, 'full']);
    expect(s.windows.map((w) => [w.name, w.fromMs, w.toMs])).toEqual([
      ['collector-down zone-b', 5000, 8000],
      ['collector-up zone-b', 8000, 12_000],
    ]);
    expect(problems(smallScenario({ signals: { kvReplay: 'some' } }))[0]).toMatch(/^signals\.kvReplay: /);
    expect(problems(smallScenario({ strategies: [{ name: 'p', kind: 'spillway-precise', kvReplay: 'all' }] }))[0]).toMatch(
      /^strategies\.0/,
    );
  });

  // Each bad value is rejected with a message naming the field at fault.
  const cases: [string, Record<string, unknown>, RegExp][] = [
    ['negative duration', { durationS: -1 }, /^durationS: /],
    ['warm-up not before the end', { warmupS: 20 }, /^warmupS: must be less than durationS/],
    ['zero replicas', { zones: [{ zone: 'zone-a', region: 'r1', replicas: 0 }] }, /^zones\.0\.replicas: /],
    [
      'a zone listed twice',
      {
        zones: [
          { zone: 'a', region: 'r', replicas: 1 },
          { zone: 'a', region: 'r', replicas: 1 },
        ],
      },
      /^zones\.1\.zone: zone a is listed twice/,
    ],
    ['misspelt key', { duration: 10 }, /duration/],
    ['unknown preset', { engine: { preset: 'gpt-9' } }, /^engine\.preset: /],
    [
      'engine value the engine refuses',
      { engine: { maxNumSeqs: 100_000, maxNumBatchedTokens: 8192 } },
      /^engine\.maxNumBatchedTokens: .*maxNumSeqs/,
    ],
    ['jitter out of range', { engine: { jitter: 0.9 } }, /^engine\.jitter: /],
    ['unknown workload kind', { workload: { kind: 'chatbot' } }, /^workload\.kind: /],
    [
      'prefix range reversed',
      { workload: { kind: 'shared-prefix', groups: 4, prefixTokens: [500, 100], questionTokens: [10, 20] } },
      /^workload\.prefixTokens: /,
    ],
    ['load with neither fraction nor rps', { load: {} }, /^load: needs clusterFraction/],
    ['load with both', { load: { clusterFraction: 0.5, rps: 10 } }, /^load: give either clusterFraction or rps/],
    [
      'zone shares not summing to 1',
      { load: { clusterFraction: 0.5, zoneShares: { 'zone-a': 0.5, 'zone-b': 0.2, 'zone-c': 0.2 } } },
      /^load\.zoneShares: must sum to 1, got 0\.9/,
    ],
    [
      'zone share of an unknown zone',
      { load: { clusterFraction: 0.5, zoneShares: { 'zone-a': 0.5, 'zone-x': 0.5 } } },
      /^load\.zoneShares\.zone-x: unknown zone zone-x/,
    ],
    ['timeline out of order', { load: { clusterFraction: 0.5, timeline: [{ atS: 9 }, { atS: 5 }] } }, /^load\.timeline\.1\.atS: /],
    ['delay range reversed', { signals: { delayMs: [20, 5] } }, /^signals\.delayMs: /],
    ['loss rate of 1', { signals: { lossRate: 1 } }, /^signals\.lossRate: /],
    ['sharing delay range reversed', { signals: { sharingDelayMs: [5, 1] } }, /^signals\.sharingDelayMs: /],
    ['a batch interval out of range', { epps: { perZone: 2, batchMs: -1 } }, /^epps\.batchMs: /],
    ['sharing that is not a boolean', { strategies: [{ name: 's', kind: 'spillway', sharing: 'yes' }] }, /^strategies\.0/],
    [
      'fault naming an unknown zone',
      { faults: [{ atS: 5, kind: 'collector-down', zone: 'zone-x' }] },
      /^faults\.0\.zone: unknown zone zone-x/,
    ],
    ['fault after the end', { faults: [{ atS: 99, kind: 'nats-down' }] }, /^faults\.0\.atS: must be before durationS/],
    [
      'replica-down with too many replicas',
      { faults: [{ atS: 5, kind: 'replica-down', zone: 'zone-a', count: 3 }] },
      /^faults\.0\.count: zone zone-a has 2 replicas/,
    ],
    [
      'replica-down naming an unknown pod',
      { faults: [{ atS: 5, kind: 'replica-down', zone: 'zone-a', pods: ['vllm-zone-a-7'] }] },
      /^faults\.0\.pods\.0: unknown pod vllm-zone-a-7/,
    ],
    [
      'replica-down with neither count nor pods',
      { faults: [{ atS: 5, kind: 'replica-down', zone: 'zone-a' }] },
      /^faults\.0: replica-down needs either count or pods/,
    ],
    ['unknown fault kind', { faults: [{ atS: 5, kind: 'gpu-melt' }] }, /^faults\.0\.kind: /],
    [
      'epp-restart of an EPP that does not exist',
      { faults: [{ atS: 5, kind: 'epp-restart', zone: 'zone-a', index: 1 }] },
      /^faults\.0\.index: zone zone-a has 1 EPP/,
    ],
    ['unknown strategy', { strategies: ['random', 'magic'] }, /^strategies\.1: a strategy is one of random, round-robin/],
    ['a reference zone that does not exist', { epps: { referenceZone: 'zone-x' } }, /^epps\.referenceZone: unknown zone zone-x/],
    ['scrape interval of zero', { signals: { scrapeEveryMs: 0 } }, /^signals\.scrapeEveryMs: /],
    ['scrape time range reversed', { signals: { scrapeMs: [9, 1] } }, /^signals\.scrapeMs: /],
    [
      'bursts as long as their period',
      { load: { clusterFraction: 0.5, bursts: { everyS: 5, lengthS: 5, factor: 2 } } },
      /^load\.bursts\.lengthS: must be less than everyS/,
    ],
    [
      'bursts of an unknown zone',
      { load: { clusterFraction: 0.5, bursts: { everyS: 5, lengthS: 1, factor: 2, zones: ['zone-x'] } } },
      /^load\.bursts\.zones\.0: unknown zone zone-x/,
    ],
    [
      'a diurnal lag of an unknown zone',
      { load: { clusterFraction: 0.5, diurnal: { periodS: 60, amplitude: 0.3, lagS: { 'zone-x': 5 } } } },
      /^load\.diurnal\.lagS\.zone-x: unknown zone/,
    ],
    ['a diurnal amplitude of 1', { load: { clusterFraction: 0.5, diurnal: { periodS: 60, amplitude: 1 } } }, /^load\.diurnal\.amplitude: /],
    ['a LoRA share above 1', { workload: { kind: 'sharegpt', lora: { adapters: 4, share: 1.5 } } }, /^workload\.lora\.share: /],
    ['an input limit below 4 tokens', { workload: { kind: 'sharegpt', inputMax: 2 } }, /^workload\.inputMax: /],
    ['a sweep of an unknown field', { sweep: { zoneBais: [0, 8] } }, /^sweep\.zoneBais: .*zoneBais/],
    ['a sweep of two fields', { sweep: { zoneBiasMs: [0], shedAboveMs: [1] } }, /^sweep: sweep one scheduler config field/],
    ['a sweep value the scheduler refuses', { sweep: { maxEndpoints: [0, 3] } }, /^sweep\.maxEndpoints: /],
    ['strategy listed twice', { strategies: ['random', 'random'] }, /^strategies\.1: strategy random is listed twice/],
    [
      'config for a strategy not in the list',
      { strategies: ['random'], config: { spillway: { queueThreshold: 2 } } },
      /^config\.spillway: no strategy named spillway/,
    ],
    ['bad scheduler config value', { config: { spillway: { queueThreshold: 0 } } }, /^config\.spillway\.queueThreshold: /],
    ['misspelt scheduler config key', { config: { spillway: { queueThreshhold: 2 } } }, /^config\.spillway: .*queueThreshhold/],
    [
      'bad variant config',
      { strategies: [{ name: 'spillway-q0', kind: 'spillway', config: { kvThreshold: 2 } }] },
      /^strategies\.0\.config\.kvThreshold: /,
    ],
    ['seed and seeds together', { seeds: [1, 2] }, /^seeds: give either seed or seeds/],
  ];
  it.each(cases)('rejects %s, naming the field', (_title, override, pattern) => {
    const found = problems(smallScenario(override));
    expect(found.length).toBeGreaterThan(0);
    expect(
      found.some((m) => pattern.test(m)),
      `${found.join('\n')}\ndoes not match ${pattern}`,
    ).toBe(true);
  });

  it('resolves zone fractions: the hot zone at 150 % of its capacity, the others share the rest', () => {
    const s = resolveScenario(parse(smallScenario({ load: { clusterFraction: 0.9, zoneFractions: { 'zone-a': 1.5 } } })));
    const zoneCap = 2 * (s.capacity.perReplica[0] as number);
    const [a, b, c] = s.rates.map((r) => r.rates[0] as number);
    expect(a).toBeCloseTo(1.5 * zoneCap, 6);
    expect(b).toBeCloseTo(c as number, 6);
    expect((a as number) + (b as number) + (c as number)).toBeCloseTo(0.9 * s.capacity.clusterRps, 6);
    // zone-a cannot serve a third of its arrivals: overflow = (1.5 − 1) × cap / (0.9 × 3 × cap), and
    // the others have room for it (0.6 × cap each), so all of it is required spill.
    expect(s.spill.overflowShare).toBeCloseTo(0.5 / 2.7, 3);
    expect(s.spill.requiredShare).toBeCloseTo(0.5 / 2.7, 3);
    // Equal utilisation (0.9 everywhere) moves zone-a's arrivals above 0.9 × cap: (1.5 − 0.9) / 2.7.
    expect(s.spill.equalUtilisationShare).toBeCloseTo(0.6 / 2.7, 3);
    expect(s.spill.meanLoad).toBeCloseTo(0.9, 6);
    expect(s.spill.peakLoad).toBeCloseTo(0.9, 6);
  });

  it('replicas are full size by default (the preset batch and KV cache); shrinking them is a field of the file', () => {
    const full = resolveScenario(parse(smallScenario({ engine: { preset: 'llama-8b-h100' } })));
    expect(full.engines[0]).toMatchObject({ maxNumSeqs: 256, numBlocks: 28_000, mode: 'step' });
    const shrunk = resolveScenario(parse(smallScenario({ engine: { preset: 'llama-8b-h100', maxNumSeqs: 64, numBlocks: 7000 } })));
    expect(shrunk.engines[0]).toMatchObject({ maxNumSeqs: 64, numBlocks: 7000 });
    // A zone's own engine: another preset, full size too.
    const mixed = resolveScenario(
      parse(smallScenario({ engine: {}, zones: [{ zone: 'zone-a', region: 'r1', replicas: 1, engine: { preset: 'llama-8b-a100' } }] })),
    );
    expect(mixed.engines[0]).toMatchObject({ maxNumSeqs: 256, numBlocks: 26_000 });
  });

  it('the pool-wide reference runs in the first zone unless epps.referenceZone says otherwise', () => {
    expect(resolveScenario(parse(smallScenario())).epps.referenceZone).toBe(0);
    expect(resolveScenario(parse(smallScenario({ epps: { referenceZone: 'zone-c' } }))).epps.referenceZone).toBe(2);
  });

  it('rejects zone fractions that ask for more than the cluster load', () => {
    expect(() => resolveScenario(parse(smallScenario({ load: { clusterFraction: 0.3, zoneFractions: { 'zone-a': 1.5 } } })))).toThrow(
      /zoneFractions.*more than the cluster load/,
    );
  });

  it('one place builds each strategy scheduler config: kind settings, then the file overrides', () => {
    const [spill, local, ref, variant] = strategySpecs(
      ['spillway', 'zone-local', 'reference', { name: 'spillway-q2', kind: 'spillway', config: { queueThreshold: 2 } }],
      {
        spillway: { weights: { prefixCache: 6 } },
        'spillway-q2': { crossZoneFallbacks: 2 },
      },
    );
    // Spillway is handed the scenario's round trips as an operator would configure them.
    const ctx = {
      zones: [
        { zone: 'a', region: 'r1' },
        { zone: 'b', region: 'r2' },
      ],
      rttMs: [
        [0, 30],
        [30, 0],
      ],
    };
    const network = { rttMs: { a: { b: 30 }, b: { a: 30 } } };
    const off = { flowControl: { enabled: false } };
    expect(schedulerConfigFor(spill!, ctx)).toEqual({ subsetMode: 'locality', network, weights: { prefixCache: 6 }, ...off });
    expect(schedulerConfigFor(local!, ctx)).toEqual({ subsetMode: 'strict', crossZoneFallbacks: 0, ...off });
    // The reference family is not Spillway's scheduler: no scheduler config.
    expect(schedulerConfigFor(ref!, ctx)).toEqual({});
    expect(schedulerConfigFor(variant!, ctx)).toEqual({
      subsetMode: 'locality',
      network,
      queueThreshold: 2,
      crossZoneFallbacks: 2,
      ...off,
    });
  });

  it('every shipped scenario file is valid', () => {
    const files = readdirSync(SCENARIOS).filter((f) => f.endsWith('.yaml'));
    expect(files.length).toBeGreaterThanOrEqual(13);
    for (const f of files) expect(() => loadScenario(join(SCENARIOS, f)), f).not.toThrow();
  });
});

describe('scenario file: overrides', () => {
  it('--duration drops the faults the shorter run no longer reaches', () => {
    const file = parse(
      smallScenario({
        durationS: 30,
        faults: [
          { atS: 5, kind: 'nats-down' },
          { atS: 8, kind: 'nats-up' },
          { atS: 20, kind: 'collector-down', zone: 'zone-a' },
        ],
      }),
    );
    const short = resolveScenario(file, { durationS: 10 });
    expect(short.faults.map((f) => f.kind)).toEqual(['nats-down', 'nats-up']);
    expect(short.windows.map((w) => [w.name, w.fromMs, w.toMs])).toEqual([['nats-down', 5000, 8000]]);
    expect(resolveScenario(file).windows).toHaveLength(2);
  });
});
