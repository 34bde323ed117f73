/** infra/demo/report.ts: attribution of outcomes and the printed tables. */
import { describe, expect, it } from 'vitest';
import {
  emptyWindow,
  formatPrefixCache,
  formatSummary,
  formatTick,
  mergeWindows,
  percentile,
  prefixCacheDelta,
  prefixCacheFromMetrics,
  record,
  shortZone,
  tickHeader,
  zonePodsFromMetrics,
  type ZoneWindow,
} from '../../infra/demo/report.js';

// eslint-disable-next-line no-control-regex
const strip = (s: string) => s.replace(/\x1b\[[0-9;]*m/g, '');
const plain = { color: false };
const color = { color: true };

function windowOf(zone: string, outcomes: Parameters<typeof record>[2][]): ZoneWindow {
  const w = emptyWindow();
  for (const o of outcomes) record(w, zone, o);
  return w;
}

describe('percentile', () => {
  it('is the nearest rank, undefined for no values', () => {
    expect(percentile([], 50)).toBeUndefined();
    expect(percentile([7], 99)).toBe(7);
    const values = Array.from({ length: 100 }, (_, i) => 100 - i); // 100..1, unsorted
    expect(percentile(values, 50)).toBe(50);
    expect(percentile(values, 99)).toBe(99);
    expect(percentile(values, 100)).toBe(100);
    expect(percentile(values, 0)).toBe(1);
  });
});

describe('record', () => {
  it('attributes successes to the serving zone and counts failures by kind', () => {
    const w = windowOf('zone-a', [
      { status: 200, attempts: 1, ttftMs: 40, servedZone: 'zone-a' },
      { status: 200, attempts: 2, ttftMs: 90, servedZone: 'zone-b' },
      { status: 200, attempts: 1, ttftMs: 50, servedZone: 'zone-c' },
      { status: 200, attempts: 1, servedZone: 'zone-a', broken: true },
      { status: 429, attempts: 1 },
      { status: 503, attempts: 3 },
      { status: 500, attempts: 3 },
      { status: 0, attempts: 0 },
    ]);
    expect(w).toMatchObject({ finished: 8, ok: 3, inZone: 1, spilled: 2, fallbacks: 3, s429: 1, s503: 1, errors: 3 });
    expect(w.ttfts).toEqual([40, 90, 50]);
    expect(w.servedBy).toEqual({ 'zone-a': 1, 'zone-b': 1, 'zone-c': 1 });
  });

  it('merges windows by adding every count', () => {
    const a = windowOf('zone-a', [{ status: 200, attempts: 1, ttftMs: 10, servedZone: 'zone-a' }]);
    const b = windowOf('zone-a', [
      { status: 200, attempts: 2, ttftMs: 20, servedZone: 'zone-b' },
      { status: 429, attempts: 1 },
    ]);
    b.shed = 2;
    const sum = mergeWindows(mergeWindows(emptyWindow(), a), b);
    expect(sum).toMatchObject({ finished: 3, ok: 2, inZone: 1, spilled: 1, fallbacks: 1, s429: 1, shed: 2, ttfts: [10, 20] });
    expect(sum.servedBy).toEqual({ 'zone-a': 1, 'zone-b': 1 });
  });
});

describe('formatTick', () => {
  const rows = [
    {
      zone: 'zone-a',
      window: windowOf('zone-a', [
        { status: 200, attempts: 1, ttftMs: 41.4, servedZone: 'zone-a' },
        { status: 200, attempts: 2, ttftMs: 812.6, servedZone: 'zone-b' },
        { status: 429, attempts: 1 },
      ]),
      pods: { saturated: 3, ready: 3 },
    },
    { zone: 'zone-b', window: emptyWindow() },
  ];

  it('prints one line per zone, the time and phase on the first, aligned under the header', () => {
    const lines = formatTick(12.02, 'overload', rows, 0.5, plain);
    expect(lines).toHaveLength(2);
    const header = tickHeader(plain);
    expect(header.split(/\s+/).filter(Boolean)).toEqual([
      't',
      'phase',
      'zone',
      'sat/rdy',
      'req/s',
      'p50ms',
      'p99ms',
      'in-zone',
      'spilled',
      'fallbk',
      '429',
      '503',
      'err',
      'shed',
    ]);
    expect(lines[0]!.split(/\s+/).filter(Boolean)).toEqual([
      '12',
      'overload',
      'zone-a',
      '3/3',
      '6.0',
      '41',
      '813',
      '50%',
      '1',
      '1',
      '1',
      '0',
      '0',
      '0',
    ]);
    expect(lines[1]!.split(/\s+/).filter(Boolean)).toEqual(['zone-b', '?', '0.0', '-', '-', '-', '0', '0', '0', '0', '0', '0']);
    // Right-aligned numbers end where their column titles end.
    expect(lines[0]!.indexOf('813') + 3).toBe(header.indexOf('p99ms') + 5);
    expect(lines[1]!.length).toBe(lines[0]!.length);
    for (const line of [header, ...lines]) expect(line.length).toBeLessThanOrEqual(100);
  });

  it('has no escape codes without color, and the same text with them stripped', () => {
    const without = formatTick(3, 'balanced', rows, 1, plain);
    const withColor = formatTick(3, 'balanced', rows, 1, color);
    expect([...without, tickHeader(plain)].join('')).not.toContain('\x1b');
    expect(withColor.join('')).toContain('\x1b[');
    expect(withColor.map(strip)).toEqual(without);
    expect(strip(tickHeader(color))).toBe(tickHeader(plain));
  });
});

describe('zonePodsFromMetrics', () => {
  const text = [
    '# HELP spillway_zone_ready_pods Ready pods per zone in this EPP view.',
    '# TYPE spillway_zone_ready_pods gauge',
    'spillway_zone_ready_pods{zone="zone-a"} 3',
    'spillway_zone_ready_pods{zone="zone-aa"} 7',
    'spillway_zone_ready_pods{pool="llama",zone="zone-c"} 2',
    'spillway_zone_saturated_pods{zone="zone-a"} 2',
    'spillway_zone_saturated_pods{zone="zone-c"} 0',
  ].join('\n');

  it("reads a zone's ready and saturated pods from an EPP's metrics", () => {
    expect(zonePodsFromMetrics(text, 'zone-a')).toEqual({ ready: 3, saturated: 2 });
    expect(zonePodsFromMetrics(text, 'zone-c')).toEqual({ ready: 2, saturated: 0 });
  });

  it('reads a zone without series (no ready pod) as 0/0', () => {
    expect(zonePodsFromMetrics(text, 'zone-b')).toEqual({ ready: 0, saturated: 0 });
  });
});

describe('formatSummary', () => {
  it('names every phase once, one line per phase and zone, with where requests were served', () => {
    const zones = ['zone-a', 'zone-b', 'zone-c'];
    const served = (zone: string) => ({ status: 200, attempts: 1, ttftMs: 50, servedZone: zone });
    const rows = ['balanced', 'overload'].flatMap((phase) =>
      zones.map((zone) => ({
        phase,
        zone,
        seconds: 10,
        window: windowOf(
          zone,
          phase === 'overload' && zone === 'zone-a'
            ? [served('zone-a'), served('zone-b'), served('zone-b'), served('zone-c')]
            : [served(zone)],
        ),
      })),
    );
    const lines = formatSummary(rows, zones, plain);
    expect(lines).toHaveLength(1 + rows.length);
    expect(lines[0]).toContain('served a/b/c');
    expect(lines.filter((l) => l.startsWith('balanced'))).toHaveLength(1);
    expect(lines.filter((l) => l.startsWith('overload'))).toHaveLength(1);
    const overloadA = lines[4]!.split(/\s+/).filter(Boolean);
    expect(overloadA).toEqual(['overload', 'zone-a', '4', '0.4', '100%', '50', '50', '25%', '3', '0', '0', '0', '0', '1/2/1']);
    for (const line of lines) expect(line.length).toBeLessThanOrEqual(100);
    expect(formatSummary(rows, zones, color).map(strip)).toEqual(lines);
  });

  it('shortens zone names for the served-in column', () => {
    expect(shortZone('zone-a')).toBe('a');
    expect(shortZone('eu-west-1a')).toBe('eu-west-1a');
  });
});

describe("the model servers' prefix-cache hit rate", () => {
  it("sums vLLM's counters over series, and counts a restarted or silent server right", () => {
    const text = [
      '# TYPE vllm:prefix_cache_hits_total counter',
      'vllm:prefix_cache_hits_total{model_name="llama"} 300',
      'vllm:prefix_cache_queries_total{model_name="llama"} 1000',
      'vllm:prefix_cache_queries_total{model_name="other"} 24',
      'vllm:prefix_cache_hits_totalx 5',
    ].join('\n');
    expect(prefixCacheFromMetrics(text)).toEqual({ hits: 300, queries: 1024 });
    const before = [{ hits: 10, queries: 100 }, { hits: 50, queries: 500 }, undefined, { hits: 1, queries: 2 }];
    // grew; restarted (counters reset: counted from zero); started since; killed (no reading).
    const after = [{ hits: 40, queries: 200 }, { hits: 5, queries: 20 }, { hits: 7, queries: 9 }, undefined];
    expect(prefixCacheDelta(before, after)).toEqual({ hits: 30 + 5 + 7, queries: 100 + 20 + 9 });
  });

  it('prints the rate and which routing produced it', () => {
    expect(formatPrefixCache({ hits: 805, queries: 1000 }, true)).toMatch(
      /: 80\.5% of prompt tokens were cached \(805 of 1000\); EPPs routed by the servers' KV events \(precise\)\.$/,
    );
    expect(formatPrefixCache({ hits: 0, queries: 0 }, false)).toMatch(/: n\/a .*\(approximate\); compare with --kv-events\.$/);
  });
});
