import type { Endpoint, PoolView, PrefillAhead, PrefillRate } from '@spillway/fleet';
import type { CandidateSet } from './candidates.js';
import type { CacheIndexSource } from './kv-lookup.js';
import type { Tier } from './network.js';

/** What pricing one request needs to know, set once per pick and reused. */
export interface PricingContext {
  now: number;
  /** +1 per pick (and per explain): what is computed once per pick is keyed by it. */
  pickSeq: number;
  pool: PoolView;
  topologyVersion: number;
  /** Target model after rewrite: rate defaults and LoRA affinity. */
  model: string;
  /**
   * Some candidate runs or is loading `model` as a LoRA adapter. Servers list adapters, not their
   * base model, so until one holds it the model is taken for the base model (or an adapter no one
   * holds yet, which costs the same load everywhere) and no adapter cost applies.
   */
  modelIsAdapter: boolean;
  /** The prompt's length in tokens (estimated from its characters); 0 when unknown. */
  promptTokens: number;
  /** Prompt tokens cached at the candidate holding the longest prefix (0 when none is). */
  bestCachedTokens: number;
  /** Hashed prompt blocks, and tokens per block. */
  prefixBlocks: number;
  blockTokens: number;
  /** Leading prompt blocks this endpoint is believed to cache (approximate index). */
  prefixMatch(endpoint: Endpoint): number;
  /** Prompt tokens this endpoint caches: the precise block index when it has the pod's KV data and the request its token ids, else the approximate index. */
  cachedTokens(endpoint: Endpoint): number;
  /** Which index cachedTokens() answers from for this endpoint (for explain; not on the pricing path). */
  cacheSource(endpoint: Endpoint): CacheIndexSource;
  /**
   * What is left at `now` of the prefills of the requests charged to `endpoint` just before (this
   * EPP's and its peers', config `backlog`), worked off at `rate`: ms returned, and in `out`.
   */
  prefillAhead(endpoint: Endpoint, rate: PrefillRate, out: PrefillAhead): number;
  /** The fail-open pass: penalised or silent endpoints are candidates and must rank last. */
  includeExcluded: boolean;
  isExcluded(endpoint: Endpoint): boolean;
}

/** The cost components of one listed endpoint (cost policy), in milliseconds. */
export interface EntryCost {
  readonly totalMs: number;
  /** Expected wait before the request's prefill starts: the queue ahead, and the prefills of requests picked just before it. */
  readonly waitMs: number;
  /** The request's own prefill: its uncached prompt tokens at the endpoint's prefill rate. */
  readonly prefillMs: number;
  readonly loraMs: number;
  readonly rttMs: number;
  readonly biasMs: number;
  /** Outside the EPP's zone: the receiving zone's own demand for the room the request takes (config `displacement`). */
  readonly displacementMs: number;
  /** How much the wait estimate may be off because the latest sample is stale. */
  readonly uncertaintyMs: number;
  /** The endpoint's step now (batch fill and KV use applied), and how far its measured step is trusted (0–1; config `batch`). */
  readonly stepMs: number;
  readonly stepTrust: number;
  /** Requests running there now (the sample's, plus picks since, minus completions seen), of its batch slots, and its KV use. */
  readonly running: number;
  readonly slots: number;
  readonly kvUse: number;
  /** The prefill backlog: what is left of the prefills of the requests charged just before (part of the wait), in ms and tokens. */
  readonly aheadMs: number;
  readonly aheadTokens: number;
  /** The endpoint's prefill time per uncached token (the configured rate, scaled by its step speed). */
  readonly prefillMsPerToken: number;
  /** Outside the EPP's zone: the share of the zone's batch slots filled (what displacement is priced from); 0 at home. */
  readonly zoneUse: number;
  /** Prompt tokens the prefix index believes the endpoint caches. */
  readonly cachedTokens: number;
  /** The index that said so: `precise` (the servers' KV events) or `approximate` (this EPP's picks). */
  readonly cacheIndex: CacheIndexSource;
  /** No sample within the staleness limit; suspect: stale while its zone-mates' samples arrive. */
  readonly stale: boolean;
  readonly suspect: boolean;
  /** Past a hard limit (KV cache full with a queue, or the queue at the engine's limit). */
  readonly full: boolean;
  /** Penalised or silent, listed only because nothing else was eligible. */
  readonly excluded: boolean;
}

/** What the weighted policy records for one listed endpoint. */
export interface EntryScore {
  /** Weighted sum of the scorers of the Gateway API Inference Extension's EPP (now in llm-d), higher is better. */
  readonly score: number;
  readonly saturated: boolean;
  readonly stale: boolean;
  readonly suspect: boolean;
  readonly excluded: boolean;
}

/**
 * A pricing policy turns candidates into ranking keys (lower is better). Keys at or above
 * `limitBand` belong to endpoints past a hard limit; the list builder and the shed rule read only
 * keys, so both policies share one ranking and one list.
 */
export interface PricingPolicy {
  readonly limitBand: number;
  /** Keys for candidates[0..count) into `keys`; each one's expected wait (for shedding) into `waits`. */
  price(ctx: PricingContext, candidates: CandidateSet, keys: Float64Array, waits: Float64Array): void;
  /** The request-independent part of an endpoint's key: ranks the remote shortlist. */
  baseKey(ctx: PricingContext, endpoint: Endpoint, tier: Tier): number;
  /** A sheddable request gets 429 (the best key and the candidates' waits are given). */
  shouldShed(bestKey: number, waits: Float64Array, count: number): boolean;
  /** Why a listed endpoint ranks where it does, for the decision record. */
  explain(ctx: PricingContext, endpoint: Endpoint, tier: Tier): EntryCost | EntryScore;
}

/** Offsets that put endpoints past a limit, suspect or excluded behind every ordinary one. */
export const BAND = 1e9;
