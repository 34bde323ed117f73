// The service rates Spillway's EPPs see in the routing simulation: what the zone's collector would
// compute from the simulated server's counters, prefill time and prefill rate included (vLLM's
// request_prefill_time_seconds, which spillway-sim exposes from the same engine stats).
import { textBlockHashes, type Sequence } from '@spillway/engine';
import { Fleet } from '@spillway/fleet';
import { describe, expect, it } from 'vitest';
import { resolveScenario } from '../src/index.js';
import { Network } from '../src/network.js';
import { EventQueue } from '../src/queue.js';
import { ReplicaSet, type SimEngineRequest } from '../src/replicas.js';
import { POOL } from '../src/routers.js';
import { SignalBus } from '../src/signals.js';
import type { SimEvent } from '../src/events.js';
import { parse, smallScenario } from './helpers.js';

describe('routing simulation: the rates in the metrics events', () => {
  it('carry prefill time and uncached prompt tokens per second of it, as the collector computes them', () => {
    const s = resolveScenario(
      parse(smallScenario({ engine: { preset: 'llama-8b-h100', mode: 'step', maxNumSeqs: 16, numBlocks: 7000 } })),
      {},
    );
    const replicas = new ReplicaSet(s, 7, undefined, { onFinish: () => {} });
    const fleet = new Fleet();
    const bus = new SignalBus(s, 7, {
      queue: new EventQueue<SimEvent>(),
      replicas,
      network: new Network(s.zones.map(() => s.zones.map(() => 0))),
      epps: [{ index: 0, zoneIndex: 0, fleet }],
      onDelivered: () => {},
    });
    const r = replicas.get(0);
    const engine = r.engine!;
    const blockSize = engine.config.blockSize;
    // 20 requests a second for 6 s; every other one shares a 1,024-token system prompt.
    const system = 'You are a helpful assistant. '.repeat(170);
    const seqs: Sequence<SimEngineRequest>[] = [];
    const events = [];
    for (let t = 0, i = 0; t <= 6_000; t += 50, i++) {
      if (t % 100 === 0) {
        engine.advance(t);
        bus.publishMetrics(r, t, false);
        const stored = bus.stream.get(`${r.info.pod}/metrics`)?.event;
        if (stored?.kind === 'metrics') events.push({ at: t, rates: stored.rates, stats: engine.stats() });
      }
      const question = `question ${i} `.repeat(20 + (i % 7) * 30);
      const prompt = i % 2 === 0 ? system + question : question;
      const promptTokens = Math.ceil(prompt.length / 4);
      const request = { promptTokens, outputTokens: 40, blockHashes: textBlockHashes(prompt, blockSize) } as unknown as SimEngineRequest;
      seqs.push(engine.submit(request, t));
    }

    // The EPP's view holds the last sample with both fields, and they are the ones published.
    const seen = fleet.get(POOL, r.info.zone, r.info.pod)?.metrics?.rates;
    expect(seen?.prefillMs).toBeGreaterThan(0);
    expect(seen?.prefillTokensPerS).toBeGreaterThan(0);
    expect(seen).toEqual(events.at(-1)?.rates);

    // Each published pair, against the window it covers: the mean of the requests' own prefill times
    // (scheduled → first token) whose first token fell in it, and the uncached prompt tokens counted
    // there over that prefill time.
    let checked = 0;
    for (const e of events) {
      const rates = e.rates;
      if (rates?.prefillMs === undefined) continue;
      const from = e.at - rates.windowMs;
      const base = events.find((x) => x.at === from);
      if (!base) continue;
      const inWindow = seqs.filter((q) => q.firstTokenAt > from && q.firstTokenAt <= e.at);
      const prefillMs = inWindow.reduce((sum, q) => sum + (q.firstTokenAt - q.admittedAt), 0);
      expect(rates.prefillMs).toBeCloseTo(prefillMs / inWindow.length, 6);
      const prompt = e.stats.promptTokens - base.stats.promptTokens;
      const hitRate = (e.stats.prefixHitTokens - base.stats.prefixHitTokens) / (e.stats.prefixQueryTokens - base.stats.prefixQueryTokens);
      expect(rates.prefixHitRate).toBeCloseTo(hitRate, 9);
      expect(hitRate).toBeGreaterThan(0.1);
      expect(rates.prefillTokensPerS).toBeCloseTo((prompt * (1 - hitRate) * 1000) / prefillMs, 3);
      checked++;
    }
    expect(checked).toBeGreaterThan(30);
  });
});
