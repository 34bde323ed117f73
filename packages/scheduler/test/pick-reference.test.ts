import { parseAddressPattern, type MetricsEvent } from '@spillway/events';
import { Fleet, type Endpoint } from '@spillway/fleet';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { hashPromptBlocks, parseSchedulerConfig, prefixSeed, Scheduler, type SchedulerConfig } from '../src/index.js';
import { POOL, T0 } from './fleet-fixture.js';

/**
 * The pick's hot path is optimised (subset hints resolved once per distinct hint and topology,
 * pricing that reads each input once, prefix matches guessed from the previous candidate, base keys
 * kept between samples). This restates the cost policy's rule plainly — every eligible endpoint
 * priced from scratch by the formula of docs/picking.md, prefix matches counted block by block from
 * what was committed — and checks every pick against it on generated pools and requests: each
 * listed endpoint's key, the primary as the cheapest eligible endpoint, and the counts.
 */
const ZONES = ['a', 'b', 'c', 'd'] as const;
const REGION_OF: Record<string, string | undefined> = { a: 'r1', b: 'r1', c: 'r2', d: undefined };
const BAND = 1e9;
const MODELS = ['m', 'ad1', 'big'] as const;
const SYSTEM = 'system prompt shared by every request, long enough for a few blocks. '.repeat(3);
const PROMPTS = [0, 1, 2, 3].map((i) => `${SYSTEM}user ${i}: ${'words '.repeat(10 + 9 * i)}`);

const podArb = fc.record({
  zone: fc.constantFrom(...ZONES),
  ip: fc.integer({ min: 1, max: 20 }),
  ready: fc.constantFrom(true, true, true, false),
  deleted: fc.constantFrom(false, false, false, true),
  metrics: fc.option(
    fc.record({
      waiting: fc.constantFrom(0, 0, 1, 3, 8),
      running: fc.integer({ min: 0, max: 40 }),
      kv: fc.constantFrom(0.1, 0.5, 0.97, 1),
      age: fc.constantFrom(0, 50, 900, 1500, 4000),
      rates: fc.option(
        fc.record({
          windowMs: fc.constant(2_000),
          requestsPerS: fc.oneof(fc.constant(0), fc.double({ min: 0.01, max: 30, noNaN: true })),
          promptTokensPerS: fc.oneof(fc.constant(0), fc.double({ min: 1, max: 30_000, noNaN: true })),
          generationTokensPerS: fc.double({ min: 0, max: 3_000, noNaN: true }),
          ttftMs: fc.option(fc.double({ min: 1, max: 500, noNaN: true }), { nil: undefined }),
          itlMs: fc.option(fc.double({ min: 1, max: 50, noNaN: true }), { nil: undefined }),
          prefixHitRate: fc.option(fc.double({ min: 0, max: 1, noNaN: true }), { nil: undefined }),
        }),
        { nil: undefined },
      ),
      lora: fc.option(
        fc.record({ max: fc.integer({ min: 0, max: 2 }), running: fc.subarray(['ad1', 'x']), waiting: fc.subarray(['ad1']) }),
        { nil: undefined },
      ),
    }),
    { nil: undefined },
  ),
});

const stepArb = fc.record({
  model: fc.constantFrom(...MODELS),
  prompt: fc.option(fc.constantFrom(...PROMPTS), { nil: undefined }),
  subset: fc.option(fc.array(fc.integer({ min: 1, max: 22 }), { maxLength: 8 }), { nil: undefined }),
  asString: fc.boolean(),
  commit: fc.boolean(),
  advanceMs: fc.constantFrom(0, 1, 7, 40),
  /** A new sample of this pod (its counts as before) just before the pick: the picks it covers become its queue. */
  resample: fc.option(fc.integer({ min: 0, max: 15 }), { nil: undefined, freq: 2 }),
});

const caseArb = fc.record({
  pods: fc.array(podArb, { minLength: 1, maxLength: 16 }),
  mode: fc.constantFrom('strict' as const, 'locality' as const),
  steps: fc.array(stepArb, { minLength: 1, maxLength: 10 }),
  seed: fc.integer(),
});

type Case = typeof caseArb extends fc.Arbitrary<infer T> ? T : never;

const addressOf = (ip: number): string => `10.0.0.${ip}:8000`;

function build(pods: Case['pods']): Fleet {
  const fleet = new Fleet();
  pods.forEach((pod, i) => {
    const name = `p${i}`;
    const at = T0 - 5_000;
    fleet.apply(
      {
        v: 1,
        kind: 'readiness',
        pool: POOL,
        zone: pod.zone,
        region: REGION_OF[pod.zone],
        pod: name,
        address: addressOf(pod.ip),
        ready: pod.ready,
        deleted: pod.deleted,
        observedAt: at,
      },
      at,
    );
    const m = pod.metrics;
    if (m) {
      const sampleAt = T0 - m.age;
      const event = metricsOf(pod, i, sampleAt) as MetricsEvent;
      // Twice when waiting: a queue over two samples (a backlog), as a busy server shows.
      if (m.waiting > 0) fleet.apply({ ...event, observedAt: sampleAt - 100 }, sampleAt - 100);
      fleet.apply(event, sampleAt);
    }
  });
  return fleet;
}

/** Pod i's metrics event observed at `at` (undefined for a pod without metrics). */
function metricsOf(pod: Case['pods'][number], i: number, at: number): MetricsEvent | undefined {
  const m = pod.metrics;
  if (!m) return undefined;
  return {
    v: 1,
    kind: 'metrics',
    pool: POOL,
    zone: pod.zone,
    pod: `p${i}`,
    observedAt: at,
    waitingRequests: m.waiting,
    runningRequests: m.running,
    kvCacheUsage: m.kv,
    ...(m.rates ? { rates: stripUndefined(m.rates) } : {}),
    ...(m.lora ? { lora: m.lora } : {}),
  };
}

function stripUndefined<T extends object>(value: T): T {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as T;
}

/** What the reference remembers: the blocks committed to each endpoint (no eviction in these small runs). */
class ReferenceIndex {
  private readonly held = new Map<Endpoint, Set<number>>();
  add(endpoint: Endpoint, hashes: readonly number[]): void {
    let set = this.held.get(endpoint);
    if (!set) this.held.set(endpoint, (set = new Set()));
    for (const hash of hashes) set.add(hash);
  }
  /** Leading blocks of the prompt the endpoint was sent, counted one by one. */
  match(endpoint: Endpoint, hashes: readonly number[]): number {
    const set = this.held.get(endpoint);
    let count = 0;
    while (set && count < hashes.length && set.has(hashes[count] as number)) count++;
    return count;
  }
  deepest(hashes: readonly number[]): number {
    let best = 0;
    for (const endpoint of this.held.keys()) best = Math.max(best, this.match(endpoint, hashes));
    return best;
  }
}

function promptHashes(config: SchedulerConfig, model: string, prompt: string | undefined): number[] {
  const blockChars = config.prefix.blockTokens * config.prefix.charsPerToken;
  if (prompt === undefined || prompt.length < blockChars) return [];
  const out = new Float64Array(config.prefix.maxBlocks);
  const count = hashPromptBlocks(prompt, prefixSeed(model), blockChars, config.prefix.maxBlocks, out);
  return Array.from(out.subarray(0, count));
}

/** A committed pick as the reference remembers it: where, when, and the prefill it brought. */
interface ReferencePick {
  endpoint: Endpoint;
  at: number;
  prefillTokens: number;
}

/** The endpoint's slots: its learnt batch size when positive, else the configured default. */
function slotsOf(config: SchedulerConfig, endpoint: Endpoint): number {
  return endpoint.batchCapacity !== undefined && endpoint.batchCapacity > 0 ? endpoint.batchCapacity : config.batch.slots;
}

/** The prefill backlog, served one pick after the other (a FIFO server run forward from the oldest pick in the horizon). */
function referenceAheadMs(
  config: SchedulerConfig,
  picks: readonly ReferencePick[],
  endpoint: Endpoint,
  now: number,
  { msPerToken, attention, stepMs, chunkTokens }: { msPerToken: number; attention: number; stepMs: number; chunkTokens: number },
): number {
  // Token k of a charge (counted from 0, nothing cached before it) costs msPerToken · (1 + k / attentionTokens),
  // and each chunk of its prompt one step (a cached prompt one).
  const workOf = (n: number): number =>
    n * msPerToken + (attention > 0 ? (msPerToken * n * n) / (2 * attention) : 0) + Math.max(1, Math.ceil(n / chunkTokens)) * stepMs;
  const mine = picks.filter((p) => p.endpoint === endpoint);
  const recent = mine.filter((p) => p.at >= now - config.backlog.horizonMs).slice(-config.backlog.maxCharges);
  // The latest sample's queue: its waiting requests are the newest picks it covers, all still to
  // prefill then, and `queueHead` of the pick just before them, the one being served then.
  const sampledUntil = (endpoint as unknown as { sampledUntil: number }).sampledUntil;
  const waiting = endpoint.metrics?.waitingRequests ?? 0;
  const covered = mine.filter((p) => p.at <= sampledUntil);
  let queue = waiting > 0 ? covered.slice(-waiting).reduce((sum, p) => sum + workOf(p.prefillTokens), 0) : 0;
  const served = covered[covered.length - waiting - 1];
  if (queue > 0 && served !== undefined) queue += config.backlog.queueHead * workOf(served.prefillTokens);
  let free = Number.NEGATIVE_INFINITY;
  let queueHeld = queue <= 0;
  for (const pick of recent) {
    if (!queueHeld && pick.at > sampledUntil) {
      free = Math.max(free, sampledUntil + queue);
      queueHeld = true;
    }
    free = Math.max(free, pick.at) + workOf(pick.prefillTokens);
  }
  if (!queueHeld) free = Math.max(free, sampledUntil + queue);
  return Math.max(0, free - now);
}

/** The cost policy's key of one endpoint, restated from docs/picking.md without any shortcut. */
function referenceKey(
  world: { config: SchedulerConfig; fleet: Fleet; picks: readonly ReferencePick[] },
  endpoint: Endpoint,
  now: number,
  request: { model: string; promptTokens: number; cached: number; bestCached: number; modelIsAdapter: boolean },
): number {
  const { config, fleet, picks } = world;
  const rates = { ...config.rates.default, ...(config.rates.models[request.model] ?? {}) };
  const metrics = endpoint.metrics;
  const measured = metrics?.rates;
  // The load now: the sample, plus picks it cannot have seen, minus releases since.
  let waiting = 0;
  let backlogged = false;
  if (metrics) {
    const capacity = endpoint.batchCapacity;
    if (capacity !== undefined && capacity > 0) {
      waiting = Math.max(
        0,
        metrics.waitingRequests + metrics.runningRequests + endpoint.unsampledPicks - endpoint.releasedSinceSample + 1 - capacity,
      );
      backlogged = waiting > 0;
    } else {
      waiting =
        metrics.waitingRequests > 0 ? Math.max(0, metrics.waitingRequests + endpoint.unsampledPicks - endpoint.releasedSinceSample) : 0;
      backlogged = metrics.waitingRequests > 0 && endpoint.queuedSamples >= 2;
    }
  }
  const ageMs = metrics ? now - metrics.receivedAt : Number.POSITIVE_INFINITY;
  // Batch fill: the step now, from the idle step (measured as far as trusted) and the fill.
  const batch = config.batch;
  const slots = slotsOf(config, endpoint);
  const sampledRunning = metrics?.runningRequests ?? 0;
  const running = Math.min(slots, Math.max(0, sampledRunning + endpoint.unsampledPicks - endpoint.releasedSinceSample));
  const kv = metrics?.kvCacheUsage ?? 0;
  const slowdown = (r: number): number => 1 + (batch.runningSlowdown * r) / batch.slots + batch.kvSlowdown * kv;
  // The zone's pods, routable and sampled: their use (for displacement) and their measured speed.
  const zonePods = [...(fleet.pool(POOL)?.endpoints() ?? [])].filter(
    (ep) => ep.zone === endpoint.zone && ep.ready && !ep.deleted && ep.address !== undefined && ep.metrics !== undefined,
  );
  let decodeTokens = 0;
  let speedSum = 0;
  for (const ep of zonePods) {
    const r = ep.metrics?.rates;
    if (r?.itlMs === undefined || !(r.itlMs > 0) || !(r.generationTokensPerS > 0)) continue;
    const podSlots = slotsOf(config, ep);
    const podKv = ep.metrics?.kvCacheUsage ?? 0;
    // The speed its inter-token time shows at the window's own fill, less the share of the window its prefills took.
    const windowRunning = Math.min(podSlots, (r.generationTokensPerS * r.itlMs) / 1000);
    const raw = r.itlMs / (1 + (batch.runningSlowdown * windowRunning) / batch.slots + batch.kvSlowdown * podKv) / rates.stepMs;
    const prefillShare = (r.promptTokensPerS * (1 - (r.prefixHitRate ?? 0))) / rates.prefillTokensPerS;
    const tokens = (r.generationTokensPerS * r.windowMs) / 1000;
    decodeTokens += tokens;
    speedSum += tokens * (raw / (1 + prefillShare * raw));
  }
  const trust = Math.min(1, decodeTokens / batch.stepTrustTokens);
  const zoneSpeed = decodeTokens > 0 ? speedSum / decodeTokens : 1;
  const idleStepMs = rates.stepMs * (trust * zoneSpeed + (1 - trust));
  const stepMs = idleStepMs * slowdown(running);
  const msPerToken = (1000 / rates.prefillTokensPerS) * (idleStepMs / rates.stepMs);
  const requestsPerS =
    backlogged && measured !== undefined && measured.requestsPerS > 0
      ? Math.max(measured.requestsPerS, rates.requestsPerS / 4)
      : rates.requestsPerS;
  const perWaitingMs = backlogged ? 1000 / requestsPerS : stepMs;
  const chunkTokens = Math.max(1, batch.stepTokens - running);
  const waitMs =
    waiting * perWaitingMs +
    0.5 * stepMs +
    referenceAheadMs(config, picks, endpoint, now, { msPerToken, attention: rates.attentionTokens, stepMs, chunkTokens });

  const staleAfter = fleet.staleAfterMs;
  const stale = ageMs > staleAfter;
  const uncertaintyMs = stale ? Math.min(config.gaps.maxUncertaintyMs, ((ageMs - staleAfter) / 1000) * config.gaps.uncertaintyMsPerS) : 0;
  const suspect = stale && now - (fleet.pool(POOL)?.zoneLastSampleAt(endpoint.zone) ?? Number.NEGATIVE_INFINITY) <= staleAfter;
  const full = (waiting > 0 && (metrics?.kvCacheUsage ?? 0) >= config.full.kvCacheUsage) || waiting >= config.full.waitingRequests;
  const local = endpoint.zone === 'a';
  const sameRegion = REGION_OF[endpoint.zone] === 'r1';
  const rttMs = local ? 0 : sameRegion ? config.network.sameRegionMs : config.network.crossRegionMs;
  // A zone's use: what its routable, sampled pods hold over their slots.
  const zoneUse = (zone: string): number => {
    const members = [...(fleet.pool(POOL)?.endpoints() ?? [])].filter(
      (ep) => ep.zone === zone && ep.ready && !ep.deleted && ep.address !== undefined && ep.metrics !== undefined,
    );
    const present = members.reduce(
      (n, ep) =>
        n +
        Math.max(0, (ep.metrics?.runningRequests ?? 0) + (ep.metrics?.waitingRequests ?? 0) + ep.unsampledPicks - ep.releasedSinceSample),
      0,
    );
    const zoneSlots = members.reduce((n, ep) => n + slotsOf(config, ep), 0);
    return zoneSlots > 0 ? present / zoneSlots : 0;
  };
  let biasMs = 0;
  let displacementMs = 0;
  if (!local) {
    const use = zoneUse(endpoint.zone);
    // The bias, whole up to a use gap of `from`, gone at `from + width`.
    const { from, width } = config.zoneBiasFade;
    const gap = zoneUse('a') - use - from;
    biasMs = width === 0 || gap <= 0 ? config.zoneBiasMs : config.zoneBiasMs * Math.max(0, 1 - gap / width);
    displacementMs = config.displacement.weight * stepMs * Math.min(use, 2) ** config.displacement.exponent;
  }

  const uncached = Math.max(0, request.promptTokens - request.cached);
  const avoidable = Math.max(0, request.bestCached - request.cached);
  const externality = config.avoidablePrefill.batchWeight * sampledRunning + config.avoidablePrefill.queueWeight * waiting;
  const chunks = Math.max(1, Math.ceil(uncached / chunkTokens));
  // Attention: the uncached tokens sit at positions cached … prompt, each costing msPerToken · position / attentionTokens more.
  const attention = rates.attentionTokens;
  const first = request.promptTokens - uncached;
  const attentionMs = attention > 0 ? (msPerToken * (request.promptTokens ** 2 - first ** 2)) / (2 * attention) : 0;
  const prefillMs = (uncached + avoidable * externality) * msPerToken + attentionMs + chunks * stepMs;
  let loraMs = 0;
  const lora = metrics?.lora;
  if (
    request.modelIsAdapter &&
    lora !== undefined &&
    lora.max !== 0 &&
    !lora.running.includes(request.model) &&
    !lora.waiting.includes(request.model)
  ) {
    loraMs = lora.running.length + lora.waiting.length < lora.max ? rates.loraLoadMs : rates.loraLoadMs + 1000 / requestsPerS;
  }
  const band = (suspect ? BAND : 0) + (full ? 2 * BAND : 0);
  return band + waitMs + prefillMs + loraMs + rttMs + biasMs + displacementMs + uncertaintyMs;
}

describe('the optimised pick equals a plain restatement of the cost rule', () => {
  it('on generated pools, hints and request sequences', () => {
    fc.assert(
      fc.property(caseArb, (c) => {
        const fleet = build(c.pods);
        // refreshMs 0: remote pods are priced exactly, so every eligible endpoint is comparable.
        const input = { subsetMode: c.mode, remote: { refreshMs: 0 } };
        const config = parseSchedulerConfig(input);
        const scheduler = new Scheduler({ fleet, pool: POOL, zone: 'a', region: 'r1', seed: c.seed, config: input });
        const reference = new ReferenceIndex();
        const picks: ReferencePick[] = [];
        let now = T0;
        for (const step of c.steps) {
          now += step.advanceMs;
          const resampled = step.resample === undefined ? undefined : c.pods[step.resample];
          const sample = resampled === undefined ? undefined : metricsOf(resampled, step.resample as number, now);
          if (sample !== undefined) fleet.apply(sample, now);
          const entries = step.subset?.map((ip) => addressOf(ip));
          // A fresh copy of the hint every time, as the EPP decodes it per request.
          const hint = entries === undefined ? undefined : step.asString ? entries.join(',') : entries.map((e) => `${e} `.trim());
          const decision = scheduler.pick({ model: step.model, prompt: step.prompt, subset: hint }, now);

          const patterns = (entries ?? []).map((e) => parseAddressPattern(e)).filter((p) => p !== undefined);
          const inSubset = (ep: Endpoint): boolean => patterns.some((p) => p.key === ep.address);
          const eligible = [...(fleet.pool(POOL)?.endpoints() ?? [])].filter(
            (ep) =>
              ep.ready &&
              !ep.deleted &&
              ep.address !== undefined &&
              (entries === undefined || inSubset(ep) || (c.mode === 'locality' && ep.zone !== 'a')),
          );
          expect(decision.counts.eligible).toBe(eligible.length);
          if (eligible.length === 0) {
            expect(decision.status).toBe(503);
            continue;
          }
          expect(decision.status).toBe('routed');

          const hashes = promptHashes(config, step.model, step.prompt);
          const promptTokens = step.prompt === undefined ? 0 : step.prompt.length / config.prefix.charsPerToken;
          const bestCached = Math.min(promptTokens, reference.deepest(hashes) * config.prefix.blockTokens);
          const modelIsAdapter = eligible.some(
            (ep) => ep.metrics?.lora?.running.includes(step.model) || ep.metrics?.lora?.waiting.includes(step.model),
          );
          const keyOf = (ep: Endpoint): number =>
            referenceKey({ config, fleet, picks }, ep, now, {
              model: step.model,
              promptTokens,
              cached: Math.min(promptTokens, reference.match(ep, hashes) * config.prefix.blockTokens),
              bestCached,
              modelIsAdapter,
            });
          const keys = eligible.map(keyOf);
          // Close, not equal: the backlog is worked out in absolute times (ms since the epoch, whose
          // last bit is 2^-12 ms), forward here and newest first in the fleet, which round differently.
          for (const entry of decision.entries) expect(entry.key).toBeCloseTo(keyOf(entry.endpoint), 3);
          expect(decision.entries[0]?.key).toBeCloseTo(Math.min(...keys), 3);
          expect(decision.counts.full).toBe(keys.filter((k) => k >= 2 * BAND).length);

          if (step.commit) {
            scheduler.commit(decision, now);
            const primary = decision.entries[0]?.endpoint;
            if (primary) {
              const cached = Math.min(promptTokens, reference.match(primary, hashes) * config.prefix.blockTokens);
              picks.push({
                endpoint: primary,
                at: now,
                prefillTokens: promptTokens > 0 ? Math.max(0, promptTokens - cached) : config.rates.default.promptTokens,
              });
            }
            if (primary && hashes.length > 0) reference.add(primary, hashes);
          }
        }
      }),
      { numRuns: 300, seed: 20261130 },
    );
  });
});
