import { Rng } from '@spillway/engine';
import { hashPromptBlocks, prefixSeed } from '@spillway/scheduler';
import { ApproxPrefixIndex, PickLedger, ScrapedView } from './reference-state.js';
import { MODEL, unavailable, type EppRouter, type Route, type RouteAsk, type RouterContext, type ScrapeSample } from './routers.js';
import type { SimRequest } from './workload.js';

/**
 * The reference EPP's pick, as its code makes it (the Gateway API Inference Extension's EPP, now in
 * llm-d; behaviour and sources in docs/whatif.md), with the variations of its deployments:
 * - admission: a sheddable request (priority < 0) gets 429 when the pool is saturated — the
 *   average over its pods of max(waiting / 5, KV / 0.8), a pod whose metrics are older than
 *   200 ms counting 1 (the utilization detector's defaults);
 * - the default profile: queue (min–max normalised waiting), KV (1 − use) and prefix (leading
 *   blocks held / prompt blocks) scorers weighted 2, 2, 3; the max-score picker with a random
 *   tie-break; ONE endpoint per answer (maxNumOfEndpoints 1);
 * - its state: its own scrapes, no accounting of its own picks between them, the approximate
 *   prefix LRU updated with every pick (reference-state.ts).
 * The deployments add `countsPicks` (reference-plus), `failover` (zonal, regional: a saturated
 * pool defers to the gateway's next priority), and llm-d's `capacityFilter` and topology scorer
 * (llm-d-topology). Where the servers serve LoRA adapters, the lora-affinity scorer (weight 1, as
 * in the reference's own configurations with it) is on, as an operator serving adapters enables it.
 */
export interface ReferenceProfile {
  /** Picks since the last scrape count as waiting (in-flight accounting): `reference-plus`. */
  readonly countsPicks: boolean;
  /** A saturated pool answers `defer` when the gateway has another to fail over to. */
  readonly failover: boolean;
  /**
   * llm-d's utilization detector as a filter before scoring: keep pods with fresh metrics, queue
   * < 5 and KV < 0.8; when none pass, keep them all (fail-open).
   */
  readonly capacityFilter: boolean;
  /**
   * llm-d's topology scorer (multicluster-topology-scorer over the zone field) and its weight: the
   * gateway's zone scores 1, its region's other zones `sameRegion`, other regions 0. Weight 0: none.
   */
  readonly topology: { readonly weight: number; readonly sameRegion: number };
}

export const REFERENCE_WEIGHTS = { queue: 2, kvCache: 2, prefix: 3, lora: 1 } as const;
/** The utilization detector's defaults. */
export const SATURATION = { queue: 5, kv: 0.8, staleMs: 200 } as const;
/** The approximate prefix producer's defaults: 16-token blocks of 4 characters, at most 256 of a prompt. */
const BLOCK_CHARS = 64;
const MAX_BLOCKS = 256;

export class ReferenceRouter implements EppRouter {
  private readonly view = new ScrapedView();
  private readonly ledger = new PickLedger();
  private readonly prefix = new ApproxPrefixIndex();
  private readonly rng: Rng;
  private readonly seed = prefixSeed(MODEL);
  private readonly hashes = new Float64Array(MAX_BLOCKS);
  private readonly scores: number[] = [];
  private readonly pool: number[] = [];

  constructor(
    private readonly ctx: RouterContext,
    private readonly profile: ReferenceProfile,
  ) {
    this.rng = new Rng(ctx.seed ^ 0x9e1f);
  }

  route(request: SimRequest, ask: RouteAsk, now: number): Route {
    const candidates = this.ctx.scope.filter((r) => this.ctx.isReady(r));
    if (candidates.length === 0) return unavailable(this);
    const saturation = this.saturation(candidates, now);
    if (request.priority < 0 && saturation >= 1) return { status: 429, list: [], router: this, token: undefined };
    if (this.profile.failover && ask.mayDefer && saturation >= 1) return { status: 'defer', list: [], router: this, token: undefined };
    const pool = this.filtered(candidates, now);
    const blocks = hashPromptBlocks(request.prompt, this.seed, BLOCK_CHARS, MAX_BLOCKS, this.hashes);
    const best = this.pick(pool, blocks, ask.gatewayZone, request.lora);
    // PreRequest: the prefix index learns the pick (an LRU sized from the server's cache, auto-tune);
    // reference-plus counts it until a scrape does.
    const capacity = this.ctx.engines[this.ctx.replicas[best]?.zoneIndex ?? 0]?.numBlocks ?? 31_250;
    this.prefix.insert(best, this.hashes, blocks, capacity);
    if (this.profile.countsPicks) this.ledger.record(best, now + this.transitMs(ask.gatewayZone, best));
    return { status: 'routed', list: [best], router: this, token: undefined };
  }

  served(): void {}
  release(): void {}

  applyScrape(replica: number, sample: ScrapeSample, now: number): void {
    this.view.apply(replica, sample, now);
    this.ledger.cover(replica, sample.readAt);
  }

  isStale(replica: number, now: number, limitMs: number): boolean {
    return !this.view.fresh(replica, now, limitMs);
  }

  /** The pool's saturation: the mean over its pods of max(waiting / 5, KV / 0.8), stale pods counting 1. */
  saturation(candidates: readonly number[], now: number): number {
    let sum = 0;
    for (const r of candidates) {
      const m = this.view.get(r);
      sum += now - m.updatedAt > SATURATION.staleMs ? 1 : Math.max(m.waiting / SATURATION.queue, m.kvUsage / SATURATION.kv);
    }
    return sum / candidates.length;
  }

  private filtered(candidates: readonly number[], now: number): readonly number[] {
    if (!this.profile.capacityFilter) return candidates;
    const pool = this.pool;
    pool.length = 0;
    for (const r of candidates) {
      const m = this.view.get(r);
      if (now - m.updatedAt <= SATURATION.staleMs && m.waiting < SATURATION.queue && m.kvUsage < SATURATION.kv) pool.push(r);
    }
    return pool.length > 0 ? pool : candidates;
  }

  private waiting(replica: number): number {
    return this.view.get(replica).waiting + (this.profile.countsPicks ? this.ledger.pending(replica) : 0);
  }

  /** The weighted scorers over the pool and the max-score picker (ties broken at random). */
  private pick(pool: readonly number[], blocks: number, gatewayZone: number, adapter: string | undefined): number {
    let min = Number.POSITIVE_INFINITY;
    let max = Number.NEGATIVE_INFINITY;
    for (const r of pool) {
      const q = this.waiting(r);
      if (q < min) min = q;
      if (q > max) max = q;
    }
    const span = max - min;
    const scores = this.scores;
    let bestScore = Number.NEGATIVE_INFINITY;
    for (let i = 0; i < pool.length; i++) {
      const r = pool[i] as number;
      const queue = span > 0 ? (max - this.waiting(r)) / span : 1;
      const kv = 1 - this.view.get(r).kvUsage;
      const prefix = blocks > 0 ? this.prefix.match(r, this.hashes, blocks) / blocks : 0;
      const score =
        REFERENCE_WEIGHTS.queue * clamp(queue) +
        REFERENCE_WEIGHTS.kvCache * clamp(kv) +
        REFERENCE_WEIGHTS.prefix * clamp(prefix) +
        (this.ctx.servesLora ? REFERENCE_WEIGHTS.lora * this.loraAffinity(r, adapter) : 0) +
        this.topology(r, gatewayZone);
      scores[i] = score;
      if (score > bestScore) bestScore = score;
    }
    // Shuffle, then stable sort by score: the first of the best is a uniform draw among them.
    let ties = 0;
    let chosen = pool[0] as number;
    for (let i = 0; i < pool.length; i++) {
      if ((scores[i] as number) < bestScore) continue;
      ties++;
      if (this.rng.int(ties) === 0) chosen = pool[i] as number;
    }
    return chosen;
  }

  /**
   * The lora-affinity scorer: 1 when the target model (the adapter, or the base model) is running,
   * 0.8 when the server has room for another adapter, 0.6 when it is waiting, else 0.
   */
  private loraAffinity(replica: number, adapter: string | undefined): number {
    const lora = this.view.get(replica).lora;
    if (!lora) return 0;
    const model = adapter ?? MODEL;
    if (lora.running.includes(model)) return 1;
    if (lora.running.length + lora.waiting.length < lora.max) return 0.8;
    return lora.waiting.includes(model) ? 0.6 : 0;
  }

  private topology(replica: number, gatewayZone: number): number {
    const { weight, sameRegion } = this.profile.topology;
    if (weight === 0) return 0;
    const info = this.ctx.replicas[replica];
    if (!info) return 0;
    if (info.zoneIndex === gatewayZone) return weight;
    return info.region === this.ctx.regionOf(gatewayZone) ? weight * sameRegion : 0;
  }

  /** From this pick until the request reaches the pod: the answer to the gateway, then the request. */
  private transitMs(gatewayZone: number, replica: number): number {
    const podZone = this.ctx.replicas[replica]?.zoneIndex ?? gatewayZone;
    return this.ctx.network.oneWay(this.ctx.zoneIndex, gatewayZone) + this.ctx.network.oneWay(gatewayZone, podZone);
  }
}

const clamp = (v: number): number => (v > 1 ? 1 : v >= 0 ? v : 0);
