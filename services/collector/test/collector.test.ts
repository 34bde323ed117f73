import { afterEach, describe, expect, it } from 'vitest';
import { eventually } from '@spillway/testkit';
import { metricsEventSchema, readinessEventSchema } from '@spillway/events';
import { startFakeModelServer, vllmCounters, vllmExposition, vllmPrefill, type FakeModelServer } from './helpers/model-server.js';
import { startTestCollector, type TestCollector } from './helpers/collector.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()?.();
});

async function servers(n: number, exposition = vllmExposition(0, 0, 0)): Promise<FakeModelServer[]> {
  const list = await Promise.all(Array.from({ length: n }, () => startFakeModelServer(exposition)));
  cleanups.push(async () => void (await Promise.all(list.map((s) => s.close()))));
  return list;
}

async function collector(entries: unknown, extra: string[] = []): Promise<TestCollector> {
  const c = await startTestCollector(entries, extra);
  cleanups.push(() => c.running.stop());
  return c;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('collector over HTTP endpoints (in-process, memory sink)', () => {
  it('publishes readiness and metrics that follow each server, all valid v1 events', async () => {
    const [a, b] = await servers(2);
    a!.exposition = vllmExposition(3, 4, 0.5);
    b!.exposition = vllmExposition(0, 1, 0.125);
    const c = await collector([
      { pod: 'vllm-a-0', address: a!.address, engine: 'vllm', labels: { app: 'llama' } },
      { pod: 'vllm-b-0', address: b!.address, zone: 'zone-b', region: 'r2' },
    ]);
    await eventually(() => {
      expect(c.sink.lastReadiness('vllm-a-0')).toMatchObject({
        pool: 'llama',
        zone: 'zone-a',
        region: 'r1',
        address: a!.address,
        ready: true,
        engine: 'vllm',
        labels: { app: 'llama' },
      });
      // b names no engine: detected from its metrics and announced in its readiness.
      expect(c.sink.lastReadiness('vllm-b-0')).toMatchObject({ zone: 'zone-b', region: 'r2', ready: true, engine: 'vllm' });
      expect(c.sink.metricsOf('vllm-a-0').at(-1)).toMatchObject({ waitingRequests: 3, runningRequests: 4, kvCacheUsage: 0.5 });
      expect(c.sink.metricsOf('vllm-b-0').at(-1)).toMatchObject({
        zone: 'zone-b',
        waitingRequests: 0,
        runningRequests: 1,
        kvCacheUsage: 0.125,
      });
    });
    a!.exposition = vllmExposition(9, 8, 0.75);
    await eventually(() =>
      expect(c.sink.metricsOf('vllm-a-0').at(-1)).toMatchObject({ waitingRequests: 9, runningRequests: 8, kvCacheUsage: 0.75 }),
    );
    for (const e of c.sink.readiness) expect(readinessEventSchema.safeParse(e).success).toBe(true);
    for (const e of c.sink.metrics) expect(metricsEventSchema.safeParse(e).success).toBe(true);
    expect(await c.metric('spillway_collector_events_published_total', { kind: 'metrics' })).toBeGreaterThan(0);
    expect(await c.metric('spillway_collector_endpoints', { state: 'ready' })).toBe(2);
  });

  it('a hung server does not slow the others, and its ticks are skipped, not piled up', async () => {
    const [a, b, hung] = await servers(3, vllmExposition(1, 1, 0.1));
    // A long scrape timeout keeps the hung scrape in flight for the whole window.
    const c = await collector(
      [
        { pod: 'a', address: a!.address },
        { pod: 'b', address: b!.address },
        { pod: 'hung', address: hung!.address },
      ],
      ['--scrape-timeout-ms', '5000', '--probe-interval-ms', '0'],
    );
    await eventually(() => expect(c.sink.metricsOf('hung').length).toBeGreaterThan(0));
    const count = (pod: string) => c.sink.metricsOf(pod).length;
    const before = { a: count('a'), b: count('b') };
    await sleep(500);
    const healthyWindow = { a: count('a') - before.a, b: count('b') - before.b };

    hung!.stall = true;
    await sleep(100); // let the hung scrape start
    const stalledFrom = { a: count('a'), b: count('b'), hung: count('hung') };
    await sleep(500);
    const stalledWindow = { a: count('a') - stalledFrom.a, b: count('b') - stalledFrom.b, hung: count('hung') - stalledFrom.hung };

    expect(healthyWindow.a).toBeGreaterThan(5);
    // Same window length: the healthy endpoints keep (at least half) their sample rate.
    expect(stalledWindow.a).toBeGreaterThanOrEqual(healthyWindow.a / 2);
    expect(stalledWindow.b).toBeGreaterThanOrEqual(healthyWindow.b / 2);
    expect(stalledWindow.hung).toBe(0);
    expect(await c.metric('spillway_collector_scrapes_skipped_total')).toBeGreaterThan(0);
    expect(hung!.scrapes).toBeLessThanOrEqual(stalledFrom.hung + 2);
  });

  it('a killed server: probing turns readiness false and its metrics stop; a restart brings both back', async () => {
    const [a, b] = await servers(2, vllmExposition(2, 2, 0.2));
    const c = await collector([
      { pod: 'a', address: a!.address },
      { pod: 'b', address: b!.address },
    ]);
    await eventually(() => expect(c.sink.metricsOf('b').length).toBeGreaterThan(3));
    await b!.close();
    await eventually(() => expect(c.sink.lastReadiness('b')).toMatchObject({ ready: false }));
    expect(c.sink.lastReadiness('b')?.deleted).toBeUndefined();
    const stoppedAt = c.sink.metricsOf('b').length;
    const aBefore = c.sink.metricsOf('a').length;
    await eventually(() => expect(c.sink.metricsOf('a').length).toBeGreaterThan(aBefore + 10));
    expect(c.sink.metricsOf('b').length).toBe(stoppedAt);
    expect(await c.metric('spillway_collector_endpoints', { state: 'not-ready' })).toBe(1);
    expect(await c.metric('spillway_collector_probe_failures_total')).toBeGreaterThan(0);

    const revived = await startFakeModelServer(vllmExposition(5, 6, 0.6), b!.port);
    cleanups.push(() => revived.close());
    await eventually(() => {
      expect(c.sink.lastReadiness('b')).toMatchObject({ ready: true });
      expect(c.sink.metricsOf('b').at(-1)).toMatchObject({ waitingRequests: 5, runningRequests: 6, kvCacheUsage: 0.6 });
    });
  });

  it('malformed expositions are rejected with counted errors and never published; good ones resume', async () => {
    const [a] = await servers(1, vllmExposition(1, 1, 0.1));
    // A short back-off cap keeps the failing endpoint tried often enough to count each kind.
    const c = await collector([{ pod: 'a', address: a!.address, engine: 'vllm' }], ['--scrape-backoff-max-ms', '100']);
    await eventually(() => expect(c.sink.metricsOf('a').length).toBeGreaterThan(0));
    const bad = [
      vllmExposition(1, 1, 1.7),
      vllmExposition(-1, 1, 0.1),
      'vllm:num_requests_waiting{engine="0" 1\n',
      vllmExposition(1, 1, 0.1).replace(/vllm:num_requests_running[^\n]*\n/, ''),
    ];
    for (const text of bad) {
      a!.exposition = text;
      const failures = await c.metric('spillway_collector_scrape_failures_total');
      await eventually(async () => expect(await c.metric('spillway_collector_scrape_failures_total')).toBeGreaterThan(failures + 3));
    }
    expect(await c.metric('spillway_collector_scrape_failures_total', { reason: 'invalid' })).toBeGreaterThan(0);
    expect(await c.metric('spillway_collector_scrape_failures_total', { reason: 'parse' })).toBeGreaterThan(0);
    expect(await c.metric('spillway_collector_endpoints', { state: 'scrape-failing' })).toBe(1);
    for (const e of c.sink.metricsOf('a')) {
      expect(e.kvCacheUsage).toBeLessThanOrEqual(1);
      expect(e.waitingRequests).toBeGreaterThanOrEqual(0);
    }
    a!.exposition = vllmExposition(4, 4, 0.4);
    await eventually(() => expect(c.sink.metricsOf('a').at(-1)).toMatchObject({ waitingRequests: 4, kvCacheUsage: 0.4 }));
    await eventually(async () => expect(await c.metric('spillway_collector_endpoints', { state: 'scrape-failing' })).toBe(0));
  });

  it('an exposition over --scrape-max-bytes fails as too-large, is backed off at once, exponentially, and recovers when it shrinks', async () => {
    const [a, b] = await servers(2, vllmExposition(1, 1, 0.1));
    const c = await collector(
      [
        { pod: 'a', address: a!.address, engine: 'vllm' },
        { pod: 'b', address: b!.address, engine: 'vllm' },
      ],
      ['--scrape-max-bytes', String(64 * 1024), '--scrape-backoff-max-ms', '400'],
    );
    await eventually(() => expect(c.sink.metricsOf('a').length).toBeGreaterThan(0));
    a!.exposition = vllmExposition(1, 1, 0.1) + `# HELP padding ${'x'.repeat(100)}\n`.repeat(1_000);
    await eventually(async () => expect(await c.metric('spillway_collector_scrape_failures_total', { reason: 'too-large' })).toBe(1));
    // One attempt over budget is enough to back off; the neighbour is unaffected.
    expect(await c.metric('spillway_collector_endpoints', { state: 'scrape-failing' })).toBe(1);
    const scrapes = a!.scrapes;
    const bBefore = c.sink.metricsOf('b').length;
    await sleep(1_000);
    // Back-off of 50, 100, 200, 400, 400 ms (probe interval doubling, capped) instead of a scrape every 20 ms.
    expect(a!.scrapes - scrapes).toBeLessThanOrEqual(6);
    expect(c.sink.metricsOf('b').length).toBeGreaterThan(bBefore + 10);
    a!.exposition = vllmExposition(2, 2, 0.2);
    await eventually(() => expect(c.sink.metricsOf('a').at(-1)).toMatchObject({ waitingRequests: 2 }));
    expect(await c.metric('spillway_collector_endpoints', { state: 'scrape-failing' })).toBe(0);
  });

  it('service rates from the server’s counters; resets, NaN, negative and absurd counters never make an invalid event', async () => {
    const [a] = await servers(1);
    const c = await collector([{ pod: 'a', address: a!.address, engine: 'vllm' }], ['--rates-window-ms', '400']);
    // Counters grow with the wall clock: 1000 prompt tokens, 100 generated and 10 requests a second.
    const started = Date.now();
    const growing = (): string => {
      const s = (Date.now() - started) / 1000;
      return vllmExposition(1, 1, 0.1) + vllmCounters(1e6 + 1000 * s, 1e5 + 100 * s, 1e4 + 10 * s);
    };
    const timer = setInterval(() => (a!.exposition = growing()), 5);
    cleanups.push(async () => clearInterval(timer));
    await eventually(() => {
      const rates = c.sink.metricsOf('a').at(-1)?.rates;
      expect(rates?.promptTokensPerS).toBeGreaterThan(500);
      expect(rates?.promptTokensPerS).toBeLessThan(2000);
      expect(rates?.requestsPerS).toBeGreaterThan(5);
    });

    // A restarted server: counters start again from zero. Counted, and rates resume afterwards.
    clearInterval(timer);
    a!.exposition = vllmExposition(1, 1, 0.1) + vllmCounters(5, 1, 0);
    await eventually(async () =>
      expect(await c.metric('spillway_collector_rates_omitted_total', { reason: 'counter-reset' })).toBeGreaterThan(0),
    );
    for (const bad of [vllmCounters('NaN', 1, 0), vllmCounters(5, -3, 0), vllmCounters(5, 1, '+Inf')]) {
      a!.exposition = vllmExposition(1, 1, 0.1) + bad;
      const before = await c.metric('spillway_collector_rates_omitted_total', { reason: 'invalid-counter' });
      await eventually(async () =>
        expect(await c.metric('spillway_collector_rates_omitted_total', { reason: 'invalid-counter' })).toBeGreaterThan(before),
      );
    }
    a!.exposition = vllmExposition(1, 1, 0.1) + vllmCounters(5, 1, 0);
    await sleep(300);
    a!.exposition = vllmExposition(1, 1, 0.1) + vllmCounters(1e300, 1, 0);
    await eventually(async () =>
      expect(await c.metric('spillway_collector_rates_omitted_total', { reason: 'out-of-range' })).toBeGreaterThan(0),
    );

    // Every sample was published, gauges intact, and every one is a valid v1 event.
    const published = c.sink.metricsOf('a');
    for (const event of published) expect(metricsEventSchema.safeParse(event).success).toBe(true);
    expect(published.at(-1)).toMatchObject({ waitingRequests: 1, runningRequests: 1 });
    expect(await c.metric('spillway_collector_scrape_failures_total')).toBe(0);
  });

  it('prefill time and prefill rate from vLLM’s request_prefill_time_seconds; a broken prefill histogram costs only them', async () => {
    const [a] = await servers(1);
    const c = await collector([{ pod: 'a', address: a!.address, engine: 'vllm' }], ['--rates-window-ms', '400']);
    // 1000 prompt tokens and 10 requests a second, each of 100 tokens prefilled in 50 ms: 2,000 tokens/s of prefill.
    const started = Date.now();
    let prefill: (s: number) => string = (s) => vllmPrefill(1e3 + 0.5 * s, 2e4 + 10 * s);
    const growing = (): string => {
      const s = (Date.now() - started) / 1000;
      return vllmExposition(1, 1, 0.1) + vllmCounters(1e6 + 1000 * s, 1e5 + 100 * s, 1e4 + 10 * s) + prefill(s);
    };
    a!.exposition = growing();
    const timer = setInterval(() => (a!.exposition = growing()), 5);
    cleanups.push(async () => clearInterval(timer));
    await eventually(() => {
      const rates = c.sink.metricsOf('a').at(-1)?.rates;
      expect(rates?.prefillMs).toBeCloseTo(50, 6);
      expect(rates?.prefillTokensPerS).toBeCloseTo(2_000, 3);
      expect(rates?.promptTokensPerS).toBeGreaterThan(500);
    });

    // NaN in the sum: the series is ignored and counted; the other rates keep coming.
    prefill = (s) => vllmPrefill('NaN', 2e4 + 10 * s);
    const invalidBefore = await c.metric('spillway_collector_rates_omitted_total', { reason: 'invalid-counter' });
    await eventually(async () => {
      expect(await c.metric('spillway_collector_rates_omitted_total', { reason: 'invalid-counter' })).toBeGreaterThan(invalidBefore);
      const rates = c.sink.metricsOf('a').at(-1)?.rates;
      expect(rates).not.toHaveProperty('prefillMs');
      expect(rates).not.toHaveProperty('prefillTokensPerS');
      expect(rates?.requestsPerS).toBeGreaterThan(5);
    });

    // The sum dropping (a negative observation) while everything else grows: no reset, no rate lost but prefill's.
    prefill = (s) => vllmPrefill(1e3 + 0.5 * s - 500, 2e4 + 10 * s);
    const resetsBefore = await c.metric('spillway_collector_rates_omitted_total', { reason: 'counter-reset' });
    const dropAt = c.sink.metricsOf('a').length;
    await eventually(() => {
      const rates = c.sink.metricsOf('a').at(-1)?.rates;
      expect(rates?.prefillMs).toBeCloseTo(50, 6);
    });
    const after = c.sink.metricsOf('a').slice(dropAt);
    // While the window spanned the drop: samples with every other rate but no prefill.
    expect(after.some((e) => e.rates !== undefined && e.rates.requestsPerS > 5 && e.rates.prefillMs === undefined)).toBe(true);
    expect(await c.metric('spillway_collector_rates_omitted_total', { reason: 'counter-reset' })).toBe(resetsBefore);
    for (const e of c.sink.metricsOf('a')) expect(metricsEventSchema.safeParse(e).success).toBe(true);
  });

  it('while disconnected, samples are dropped (not queued); after reconnecting readiness is re-published and samples are fresh', async () => {
    const [a] = await servers(1, vllmExposition(1, 1, 0.1));
    const c = await collector([{ pod: 'a', address: a!.address }]);
    await eventually(() => expect(c.sink.metricsOf('a').length).toBeGreaterThan(0));
    c.sink.connected = false;
    await eventually(async () =>
      expect(await c.metric('spillway_collector_events_dropped_total', { kind: 'metrics', reason: 'disconnected' })).toBeGreaterThan(5),
    );
    const readinessBefore = c.sink.readiness.length;
    const reconnectedAt = Date.now();
    const metricsBefore = c.sink.metrics.length;
    c.sink.reconnect();
    await eventually(() => {
      expect(c.sink.readiness.length).toBeGreaterThan(readinessBefore);
      expect(c.sink.metrics.length).toBeGreaterThan(metricsBefore);
    });
    // Nothing from the outage was replayed: every sample after reconnecting was taken after it.
    for (const e of c.sink.metrics.slice(metricsBefore)) expect(e.observedAt).toBeGreaterThanOrEqual(reconnectedAt - 25);
  });

  it('re-publishes readiness periodically with a fresh observedAt', async () => {
    const [a] = await servers(1);
    const c = await collector([{ pod: 'a', address: a!.address }], ['--readiness-republish-ms', '100']);
    await eventually(() => expect(c.sink.readiness.filter((e) => e.pod === 'a').length).toBeGreaterThan(3));
    const times = c.sink.readiness.filter((e) => e.pod === 'a').map((e) => e.observedAt);
    expect(new Set(times).size).toBeGreaterThan(1);
  });

  it('endpoints file edits add and remove endpoints; a removed one gets a tombstone; a bad edit keeps the last list', async () => {
    const [a, b] = await servers(2, vllmExposition(1, 2, 0.3));
    const c = await collector([{ pod: 'a', address: a!.address }]);
    await eventually(() => expect(c.sink.metricsOf('a').length).toBeGreaterThan(0));

    c.writeEndpoints(`- pod: a\n  address: ${a!.address}\n- pod: b\n  address: ${b!.address}\n  zone: zone-b\n`);
    await eventually(() => expect(c.sink.metricsOf('b').length).toBeGreaterThan(0));
    expect(c.sink.lastReadiness('b')).toMatchObject({ ready: true, zone: 'zone-b' });

    c.writeEndpoints([{ pod: 'b', address: b!.address, zone: 'zone-b' }]);
    await eventually(() =>
      expect(c.sink.lastReadiness('a')).toMatchObject({ ready: false, deleted: true, address: a!.address, zone: 'zone-a' }),
    );
    const aCount = c.sink.metricsOf('a').length;

    c.writeEndpoints('- pod: b\n  address: not-an-address\n');
    await eventually(async () => expect(await c.metric('spillway_collector_source_errors_total', { source: 'file' })).toBe(1));
    const bCount = c.sink.metricsOf('b').length;
    await eventually(() => expect(c.sink.metricsOf('b').length).toBeGreaterThan(bCount + 5));
    expect(c.sink.lastReadiness('b')?.deleted).toBeUndefined();
    expect(c.sink.metricsOf('a').length).toBe(aCount);
  });

  it('an address change re-targets probing and scraping; a zone change tombstones the old subject', async () => {
    const [a, a2] = await servers(2);
    a!.exposition = vllmExposition(1, 0, 0.1);
    a2!.exposition = vllmExposition(7, 0, 0.7);
    const c = await collector([{ pod: 'a', address: a!.address }]);
    await eventually(() => expect(c.sink.metricsOf('a').at(-1)?.waitingRequests).toBe(1));
    c.writeEndpoints([{ pod: 'a', address: a2!.address, zone: 'zone-c' }]);
    await eventually(() => {
      const tomb = c.sink.readiness.find((e) => e.pod === 'a' && e.deleted);
      expect(tomb).toMatchObject({ zone: 'zone-a', ready: false });
      expect(c.sink.lastReadiness('a')).toMatchObject({ zone: 'zone-c', address: a2!.address, ready: true });
      expect(c.sink.metricsOf('a').at(-1)).toMatchObject({ zone: 'zone-c', waitingRequests: 7 });
    });
  });
});
