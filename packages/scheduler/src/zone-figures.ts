import type { Endpoint, MetricsSample, PoolView } from '@spillway/fleet';
import type { SchedulerConfig, ServiceRates } from './config.js';

type BatchConfig = SchedulerConfig['batch'];
type MeasuredRates = NonNullable<MetricsSample['rates']>;

/**
 * What the cost reads of a zone as a whole (picking v3, docs/picking.md):
 * - `use`: the share of its batch slots its requests fill (running and waiting, by the samples
 *   plus the picks and completions since), over its routable pods with a sample — what a request
 *   sent there from another zone displaces;
 * - `speed` and `trust`: how much slower than configured its pods step, measured from their
 *   inter-token times, and how far that reading is trusted (0–1, by the decode tokens behind it).
 *   One figure per zone, not per pod: a zone's pods run one kind of hardware (a node pool), and a
 *   single pod's reading swings with its own mix of prefills and decodes, which priced per pod is
 *   noise that scatters requests between equal pods.
 */
export interface ZoneFigures {
  use: number;
  speed: number;
  trust: number;
}

interface Cached extends ZoneFigures {
  at: number;
  pickSeq: number;
  version: number;
}

/** Zones whose figures are kept at once per model's rates (the pool's zones; a bound, not a tuning). */
const MAX_ZONES_TRACKED = 256;

/**
 * Each zone's figures, by the model's rates (the speed is relative to them), recomputed (a scan of
 * the zone) at most every `remote.refreshMs` — with `refreshMs: 0`, once per pick — and whenever the
 * topology changes.
 */
export class ZoneFiguresCache {
  private readonly byRates = new WeakMap<ServiceRates, Map<string, Cached>>();

  constructor(private readonly config: SchedulerConfig) {}

  of(pool: PoolView, zone: string, rates: ServiceRates, at: { now: number; pickSeq: number; topologyVersion: number }): ZoneFigures {
    let zones = this.byRates.get(rates);
    if (zones === undefined) {
      zones = new Map();
      this.byRates.set(rates, zones);
    }
    let entry = zones.get(zone);
    const refreshMs = this.config.remote.refreshMs;
    if (
      entry !== undefined &&
      entry.version === at.topologyVersion &&
      (refreshMs > 0 ? at.now - entry.at < refreshMs : entry.pickSeq === at.pickSeq)
    ) {
      return entry;
    }
    if (entry === undefined) {
      if (zones.size >= MAX_ZONES_TRACKED) zones.clear();
      entry = { use: 0, speed: 1, trust: 0, at: at.now, pickSeq: at.pickSeq, version: at.topologyVersion };
      zones.set(zone, entry);
    }
    zoneFiguresOf(pool, zone, this.config.batch, rates, entry);
    entry.at = at.now;
    entry.pickSeq = at.pickSeq;
    entry.version = at.topologyVersion;
    return entry;
  }
}

/** The zone's figures (see ZoneFigures), into `out`. */
export function zoneFiguresOf(pool: PoolView, zone: string, batch: BatchConfig, rates: ServiceRates, out: ZoneFigures): ZoneFigures {
  let present = 0;
  let slots = 0;
  let tokens = 0;
  let weighted = 0;
  for (const endpoint of pool.readyInZone(zone)) {
    const metrics = endpoint.metrics;
    if (metrics === undefined) continue;
    present += Math.max(0, metrics.runningRequests + metrics.waitingRequests + endpoint.unsampledPicks - endpoint.releasedSinceSample);
    const podSlots = slotsOf(endpoint, batch.slots);
    slots += podSlots;
    const measured = metrics.rates;
    if (measured?.itlMs === undefined || !(measured.itlMs > 0)) continue;
    const decodeTokens = (measured.generationTokensPerS * measured.windowMs) / 1000;
    if (!(decodeTokens > 0)) continue;
    tokens += decodeTokens;
    weighted += decodeTokens * measuredSpeed(measured, podSlots, metrics.kvCacheUsage, batch, rates);
  }
  out.use = slots > 0 ? present / slots : 0;
  out.speed = tokens > 0 ? weighted / tokens : 1;
  out.trust = Math.min(1, tokens / batch.stepTrustTokens);
  return out;
}

/**
 * How much slower than configured a pod steps, from its window's inter-token time. The time is
 * first divided by the batch's slowdown at the window's own fill (its decode tokens per second
 * times that time are the requests it ran on average: Little's law). A step that carries a prefill
 * chunk is longer for every decode in it, so the mean also holds the window's prefills: a pod
 * prefilling documents looks several times slower than it is. The window's uncached prompt tokens
 * say how much of its time went to prefill — a share `a` of a second at the configured speed,
 * `a × s` at speed `s` — so with a raw ratio r = measured ÷ configured step, r = s ÷ (1 − a·s),
 * that is s = r ÷ (1 + a·r).
 */
export function measuredSpeed(measured: MeasuredRates, slots: number, kvUse: number, batch: BatchConfig, rates: ServiceRates): number {
  const itlMs = measured.itlMs ?? rates.stepMs;
  const windowRunning = Math.min(slots, (measured.generationTokensPerS * itlMs) / 1000);
  const raw = itlMs / stepSlowdown(batch, windowRunning, kvUse) / rates.stepMs;
  const prefillShare = (measured.promptTokensPerS * (1 - (measured.prefixHitRate ?? 0))) / rates.prefillTokensPerS;
  return raw / (1 + prefillShare * raw);
}

/**
 * How much slower than idle a step is with `running` requests in the batch and the KV cache this
 * full. Per running request, not per share of the endpoint's slots: a step's work is its tokens
 * (one decode each) and the context they attend to, whatever the endpoint's limit.
 */
export function stepSlowdown(batch: BatchConfig, running: number, kvUse: number): number {
  return 1 + (batch.runningSlowdown * running) / batch.slots + batch.kvSlowdown * kvUse;
}

/** The endpoint's batch slots: its learnt batch size (a positive one), else the configured default. */
export function slotsOf(endpoint: Endpoint, defaultSlots: number): number {
  const capacity = endpoint.batchCapacity;
  return capacity !== undefined && capacity > 0 ? capacity : defaultSlots;
}
