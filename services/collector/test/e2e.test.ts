import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { decodeEvent, subjectFor, type MetricsEvent, type ReadinessEvent } from '@spillway/events';
import { eventually, freePort, startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { extractSample } from '../src/scrape.js';
import { spawnCollector, spawnSim, type Child, type SimChild } from './helpers/processes.js';

/**
 * Real processes: a private nats-server, three `spillway-sim` processes and the
 * `spillway-collector` binary (build first: `npx tsc -b services/sim services/collector`).
 */
describe('spillway-collector against spillway-sim processes and nats-server', () => {
  let nats: NatsServerHandle;
  let nc: NatsConnection;
  let sims: Record<'a' | 'b' | 'c', SimChild>;
  let collector: Child;
  let file: string;
  let metricsPort: number;
  const readiness = new Map<string, ReadinessEvent[]>();
  const metrics = new Map<string, MetricsEvent[]>();
  const bad: string[] = [];

  const last = <T>(map: Map<string, T[]>, pod: string): T | undefined => map.get(pod)?.at(-1);
  const count = (pod: string): number => metrics.get(pod)?.length ?? 0;

  beforeAll(async () => {
    nats = await startNatsServer({ forcePrivate: true });
    nc = await connect({ servers: nats.url });
    const sub = nc.subscribe('spillway.v1.>');
    void (async () => {
      for await (const msg of sub) {
        const decoded = decodeEvent(msg.data, msg.subject);
        if (!decoded.ok) {
          bad.push(`${msg.subject}: ${decoded.error.message}`);
          continue;
        }
        // KV snapshots are the KV relay's (kv-relay.test.ts).
        if (decoded.event.kind === 'kv') continue;
        const map: Map<string, (ReadinessEvent | MetricsEvent)[]> = decoded.event.kind === 'readiness' ? readiness : metrics;
        const list = map.get(decoded.event.pod) ?? [];
        list.push(decoded.event);
        map.set(decoded.event.pod, list);
      }
    })();
    const [a, b, c] = await Promise.all([
      // a runs slowly so requests stay running long enough to be seen.
      spawnSim(['--time-scale', '0.05', '--model', 'm']),
      spawnSim(['--engine-metrics', 'sglang']),
      spawnSim(['--admin']),
    ]);
    sims = { a: a!, b: b!, c: c! };
    file = join(mkdtempSync(join(tmpdir(), 'spillway-e2e-')), 'endpoints.yaml');
    writeFileSync(
      file,
      [
        `- { pod: sim-a, address: "${a!.address}", engine: vllm }`,
        `- { pod: sim-b, address: "${b!.address}", zone: zone-b }`,
        `- { pod: sim-c, address: "${c!.address}" }`,
      ].join('\n'),
    );
    metricsPort = await freePort();
    collector = spawnCollector([
      '--pool',
      'llama',
      '--zone',
      'zone-a',
      '--region',
      'r1',
      '--endpoints',
      file,
      '--nats',
      nats.url,
      '--sample-interval-ms',
      '50',
      '--scrape-timeout-ms',
      '2000',
      '--probe-interval-ms',
      '100',
      '--probe-timeout-ms',
      '300',
      '--endpoints-poll-ms',
      '50',
      '--metrics-port',
      String(metricsPort),
      '--log-level',
      'warn',
    ]);
  });

  afterAll(async () => {
    await collector?.kill();
    await Promise.all(Object.values(sims ?? {}).map((s) => s.kill('SIGKILL')));
    await nc?.close();
    await nats?.stop();
  });

  it('publishes readiness (stored in the stream) and metrics for every simulator', async () => {
    await eventually(() => {
      expect(last(readiness, 'sim-a')).toMatchObject({
        ready: true,
        zone: 'zone-a',
        region: 'r1',
        address: sims.a.address,
        engine: 'vllm',
      });
      expect(last(readiness, 'sim-b')).toMatchObject({ ready: true, zone: 'zone-b', engine: 'sglang' });
      expect(last(readiness, 'sim-c')).toMatchObject({ ready: true, engine: 'vllm' });
      for (const pod of ['sim-a', 'sim-b', 'sim-c']) expect(count(pod)).toBeGreaterThan(2);
    }, 15_000);
    const jsm = await jetstreamManager(nc);
    const stored = await jsm.streams.getMessage('SPILLWAY', {
      last_by_subj: subjectFor({ pool: 'llama', zone: 'zone-a', pod: 'sim-a', kind: 'readiness' }),
    });
    const event = decodeEvent(stored!.data);
    expect(event.ok && event.event.kind === 'readiness' && event.event.ready).toBe(true);
    expect(stored!.header?.get('Nats-Msg-Id')).toBeTruthy();
    expect(bad).toEqual([]);
  });

  it('metrics on NATS match the simulator’s own /metrics under load', async () => {
    const body = JSON.stringify({ model: 'm', prompt: 'hello '.repeat(200), max_tokens: 400 });
    const requests = Array.from({ length: 6 }, () =>
      fetch(`${sims.a.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body })
        .then((r) => r.text())
        .catch(() => ''),
    );
    await eventually(async () => {
      const own = extractSample(await (await fetch(`${sims.a.url}/metrics`)).text(), 'vllm').sample;
      const seen = last(metrics, 'sim-a');
      expect(own.runningRequests + own.waitingRequests).toBeGreaterThan(0);
      expect(seen?.runningRequests).toBe(own.runningRequests);
      expect(seen?.waitingRequests).toBe(own.waitingRequests);
      expect(seen?.kvCacheUsage).toBeGreaterThan(0);
      expect(Math.abs((seen?.kvCacheUsage ?? 0) - own.kvCacheUsage)).toBeLessThan(0.05);
    }, 15_000);
    void Promise.all(requests);
  });

  it('service rates under load are plausible against the simulator’s own counters', { timeout: 60_000 }, async () => {
    // Closed-loop load, 4 at a time, on sim-c (vLLM names) and sim-b (SGLang names).
    let running = true;
    const lane = async (url: string, n: number): Promise<void> => {
      for (let i = 0; running; i++) {
        const body = JSON.stringify({
          model: 'meta-llama/Llama-3.1-8B-Instruct',
          prompt: `lane ${n} request ${i} `.repeat(20),
          max_tokens: 24,
        });
        await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body })
          .then((r) => r.text())
          .catch(() => '');
      }
    };
    const lanes = [0, 1, 2, 3].flatMap((n) => [lane(sims.c.url, n), lane(sims.b.url, n)]);
    const own = async (url: string) => ({
      at: Date.now(),
      counters: extractSample(await (await fetch(`${url}/metrics`)).text(), undefined).counters.counters,
    });
    try {
      await new Promise((r) => setTimeout(r, 1_500));
      const [c0, b0] = await Promise.all([own(sims.c.url), own(sims.b.url)]);
      await new Promise((r) => setTimeout(r, 3_000));
      const [c1, b1] = await Promise.all([own(sims.c.url), own(sims.b.url)]);
      for (const [pod, before, after] of [
        ['sim-c', c0, c1],
        ['sim-b', b0, b1],
      ] as const) {
        const seconds = (after.at - before.at) / 1000;
        const truth = {
          promptTokensPerS: (after.counters.promptTokens! - before.counters.promptTokens!) / seconds,
          generationTokensPerS: (after.counters.generationTokens! - before.counters.generationTokens!) / seconds,
          requestsPerS: (after.counters.requests! - before.counters.requests!) / seconds,
          ttftMs: (after.counters.ttft!.sumMs - before.counters.ttft!.sumMs) / (after.counters.ttft!.count - before.counters.ttft!.count),
        };
        // The published samples whose window lies inside the measured interval.
        const inside = (metrics.get(pod) ?? []).filter(
          (e) => e.rates && e.observedAt - e.rates.windowMs >= before.at - 200 && e.observedAt <= after.at,
        );
        expect(inside.length).toBeGreaterThan(5);
        const mean = (f: (r: NonNullable<MetricsEvent['rates']>) => number | undefined): number => {
          const values = inside.map((e) => f(e.rates!)).filter((v): v is number => v !== undefined);
          return values.reduce((a, b) => a + b, 0) / values.length;
        };
        expect(truth.requestsPerS).toBeGreaterThan(2);
        const published = Object.fromEntries(Object.keys(truth).map((key) => [key, mean((r) => r[key as keyof typeof truth])]));
        console.log(`rates ${pod}: published ${JSON.stringify(published)} simulator ${JSON.stringify(truth)}`);
        for (const [key, value] of Object.entries(truth) as [keyof typeof truth, number][]) {
          const seen = published[key]!;
          expect(seen, `${pod} ${key}: published ${seen}, simulator ${value}`).toBeGreaterThan(value * 0.5);
          expect(seen, `${pod} ${key}: published ${seen}, simulator ${value}`).toBeLessThan(value * 2);
        }
        for (const e of inside) {
          expect(e.rates!.windowMs).toBeGreaterThanOrEqual(1_000);
          expect(e.rates!.windowMs).toBeLessThanOrEqual(2_600);
          expect(e.rates!.prefixHitRate).toBeGreaterThanOrEqual(0);
          expect(e.rates!.queueMs).toBeGreaterThanOrEqual(0);
          expect(e.rates!.itlMs).toBeGreaterThan(0);
        }
        if (pod === 'sim-c') {
          // vLLM's names: request_prefill_time_seconds, read back as prefill time and prefill rate.
          const p0 = before.counters.prefill!;
          const p1 = after.counters.prefill!;
          const hitRate =
            (after.counters.prefixHits! - before.counters.prefixHits!) / (after.counters.prefixQueries! - before.counters.prefixQueries!);
          const prefill = {
            prefillMs: (p1.sumMs - p0.sumMs) / (p1.count - p0.count),
            prefillTokensPerS:
              ((after.counters.promptTokens! - before.counters.promptTokens!) * (1 - hitRate) * 1000) / (p1.sumMs - p0.sumMs),
          };
          for (const [key, value] of Object.entries(prefill) as [keyof typeof prefill, number][]) {
            const seen = mean((r) => r[key]);
            console.log(`rates ${pod}: ${key} published ${seen} simulator ${value}`);
            expect(value).toBeGreaterThan(0);
            expect(seen, `${pod} ${key}: published ${seen}, simulator ${value}`).toBeGreaterThan(value * 0.5);
            expect(seen, `${pod} ${key}: published ${seen}, simulator ${value}`).toBeLessThan(value * 2);
          }
        } else {
          // SGLang exports no prefill time: the fields are absent, never made up.
          expect(after.counters.prefill).toBeUndefined();
          for (const e of inside) expect(e.rates).not.toHaveProperty('prefillMs');
        }
      }
    } finally {
      running = false;
      await Promise.all(lanes);
    }
    expect(bad).toEqual([]);
  });

  it('a hung simulator does not slow the others', async () => {
    const window = async (): Promise<{ a: number; b: number; c: number }> => {
      const start = { a: count('sim-a'), b: count('sim-b'), c: count('sim-c') };
      await new Promise((r) => setTimeout(r, 1_000));
      return { a: count('sim-a') - start.a, b: count('sim-b') - start.b, c: count('sim-c') - start.c };
    };
    const healthy = await window();
    const res = await fetch(`${sims.c.url}/admin/fault`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"stall":true}',
    });
    expect(res.ok).toBe(true);
    await new Promise((r) => setTimeout(r, 200));
    const stalled = await window();
    expect(healthy.a).toBeGreaterThan(5);
    expect(stalled.a).toBeGreaterThanOrEqual(healthy.a / 2);
    expect(stalled.b).toBeGreaterThanOrEqual(healthy.b / 2);
    expect(stalled.c).toBe(0);
    // Its probes time out too: readiness goes false.
    await eventually(() => expect(last(readiness, 'sim-c')).toMatchObject({ ready: false }), 10_000);
  });

  it('a killed simulator: readiness false through probing, and its metrics stop', async () => {
    await sims.b.kill('SIGKILL');
    await eventually(() => expect(last(readiness, 'sim-b')).toMatchObject({ ready: false, zone: 'zone-b' }), 10_000);
    const frozen = count('sim-b');
    const a = count('sim-a');
    await eventually(() => expect(count('sim-a')).toBeGreaterThan(a + 10), 10_000);
    expect(count('sim-b')).toBe(frozen);
  });

  it('editing the endpoints file removes an endpoint with a tombstone', async () => {
    writeFileSync(file, `- { pod: sim-a, address: "${sims.a.address}", engine: vllm }\n`);
    await eventually(() => {
      expect(last(readiness, 'sim-b')).toMatchObject({ ready: false, deleted: true, zone: 'zone-b' });
      expect(last(readiness, 'sim-c')).toMatchObject({ ready: false, deleted: true });
    }, 10_000);
  });

  it('serves its own Prometheus metrics', async () => {
    const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    expect(text).toMatch(/spillway_collector_events_published_total\{kind="metrics"\} [1-9]/);
    expect(text).toMatch(/spillway_collector_events_published_total\{kind="readiness"\} [1-9]/);
    expect(text).toMatch(/spillway_collector_scrape_failures_total\{reason="(timeout|connect)"\} [1-9]/);
    expect(text).toContain('spillway_collector_scrape_duration_seconds_bucket');
    expect(text).toMatch(/spillway_collector_endpoints\{state="ready"\} 1/);
  });

  it('survives a NATS outage and resumes with fresh samples and re-published readiness', async () => {
    await nats.kill();
    const downAt = Date.now();
    await new Promise((r) => setTimeout(r, 500));
    await nats.restart();
    await nc.close();
    nc = await connect({ servers: nats.url });
    const seen: (ReadinessEvent | MetricsEvent)[] = [];
    const sub = nc.subscribe('spillway.v1.llama.>');
    void (async () => {
      for await (const msg of sub) {
        const decoded = decodeEvent(msg.data, msg.subject);
        if (decoded.ok && decoded.event.kind !== 'kv') seen.push(decoded.event);
      }
    })();
    await eventually(() => {
      expect(seen.some((e) => e.kind === 'metrics' && e.pod === 'sim-a')).toBe(true);
    }, 15_000);
    // Nothing sampled during the outage was sent afterwards.
    const firstMetrics = seen.find((e) => e.kind === 'metrics');
    expect(firstMetrics!.observedAt).toBeGreaterThan(downAt + 400);
    // Readiness is back in the stream (re-published on reconnect).
    const jsm = await jetstreamManager(nc);
    await eventually(async () => {
      const stored = await jsm.streams.getMessage('SPILLWAY', {
        last_by_subj: subjectFor({ pool: 'llama', zone: 'zone-a', pod: 'sim-a', kind: 'readiness' }),
      });
      const event = decodeEvent(stored!.data);
      expect(event.ok && event.event.observedAt > downAt).toBe(true);
    }, 15_000);
    expect(collector.proc.exitCode).toBeNull();
  });
});
