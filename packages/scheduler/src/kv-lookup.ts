import { kvKeySeed } from '@spillway/events';
import type { Endpoint, Fleet } from '@spillway/fleet';
import type { KvBlockIndex } from './kv-index.js';
import type { PrefixIndex } from './prefix-index.js';

/** Which index said what an endpoint caches: the servers' own KV events, or this EPP's own picks. */
export type CacheIndexSource = 'precise' | 'approximate';

/**
 * One request's view of both prefix indexes: with the prompt's token ids and KV data for a pod, what
 * the pod caches is the precise index's longest leading match (what the server reported holding);
 * for a pod without KV data, or a request without token ids, the approximate index's guess as
 * before. Per request: `begin`, then `cachedTokens(endpoint)` per candidate (O(1) after begin).
 */
export class PrefixLookup {
  /** The request carried token ids and some pod has KV data. */
  precise = false;
  /** Which index answered the last cachedTokens() call. */
  source: CacheIndexSource = 'approximate';
  /** Pods holding the prompt's first block, deepest first, resolved to endpoints of the pool (see holders()). */
  private readonly holderList: Endpoint[] = [];
  private approxDepth = 0;
  private blockTokens = 16;
  private promptTokens = 0;
  private tokenIds: ArrayLike<number> | undefined;
  private seedFor = '';
  /** Models last seen held as a LoRA adapter (their blocks are keyed with the adapter's seed); bounded. */
  private readonly adapters = new Map<string, boolean>();

  constructor(
    private readonly kv: KvBlockIndex,
    private readonly approx: PrefixIndex,
    private readonly fleet: Fleet,
  ) {}

  /**
   * Readies the lookup; returns the prompt tokens cached at the best candidate (the deepest precise
   * match, or the approximate depth when a pod without KV data holds it). `modelIsAdapter` is the
   * guess before candidates are known (the model held as an adapter at its previous pick); `rekey`
   * corrects it once they are.
   */
  begin(tokenIds: ArrayLike<number> | undefined, model: string, promptTokens: number, approxDepth: number, blockTokens: number): number {
    this.approxDepth = approxDepth;
    this.blockTokens = blockTokens;
    this.promptTokens = promptTokens;
    this.tokenIds = tokenIds;
    this.holderList.length = 0;
    this.precise = tokenIds !== undefined && tokenIds.length > 0 && this.kv.hasData;
    if (!this.precise) return Math.min(promptTokens, approxDepth * blockTokens);
    this.seedFor = this.adapters.get(model) === true ? model : '';
    this.kv.prepare(tokenIds as ArrayLike<number>, kvKeySeed(this.seedFor));
    return this.bestCachedTokens();
  }

  /** Re-keys the lookup when the model turned out (not) to be an adapter; returns the new best cached tokens. */
  rekey(model: string, modelIsAdapter: boolean, bestCachedTokens: number): number {
    if (this.adapters.size >= 1024 && !this.adapters.has(model)) this.adapters.clear();
    this.adapters.set(model, modelIsAdapter);
    if (!this.precise || (modelIsAdapter ? model : '') === this.seedFor) return bestCachedTokens;
    this.seedFor = modelIsAdapter ? model : '';
    this.holderList.length = 0;
    this.kv.prepare(this.tokenIds as ArrayLike<number>, kvKeySeed(this.seedFor));
    return this.bestCachedTokens();
  }

  /** Prompt tokens `endpoint` caches, by the precise index when it has the pod's KV data. */
  cachedTokens(endpoint: Endpoint): number {
    if (this.precise) {
      const pod = this.kv.podOf(endpoint.zone, endpoint.pod);
      if (pod !== undefined) {
        this.source = 'precise';
        return Math.min(this.promptTokens, this.kv.matchTokensOf(pod));
      }
    }
    this.source = 'approximate';
    return this.approxDepth === 0 ? 0 : Math.min(this.promptTokens, this.approx.matchOf(endpoint) * this.blockTokens);
  }

  /** Which index would answer for `endpoint` (without looking up its match). */
  sourceOf(endpoint: Endpoint): CacheIndexSource {
    return this.precise && this.kv.podOf(endpoint.zone, endpoint.pod) !== undefined ? 'precise' : 'approximate';
  }

  /**
   * The pool's endpoints the precise index says hold the prompt's prefix, deepest first (at most
   * `limit`): they join the remote candidates even when the shortlist left them off, so a spilled
   * request reaches the remote pod holding its prefix.
   */
  holders(pool: string, limit: number): readonly Endpoint[] {
    const out = this.holderList;
    if (!this.precise || out.length > 0) return out;
    for (const pod of this.kv.matched) {
      if (out.length >= limit) break;
      const endpoint = this.fleet.get(pool, pod.zone, pod.pod);
      if (endpoint !== undefined && endpoint.ready && !endpoint.deleted) out.push(endpoint);
    }
    return out;
  }

  /** Forgets the request's references to endpoints. */
  end(): void {
    this.holderList.length = 0;
    this.tokenIds = undefined;
  }

  private bestCachedTokens(): number {
    let best = Math.min(this.promptTokens, this.kv.bestTokens);
    if (this.approxDepth > 0) {
      // The approximate depth still counts when some pod it credits has no KV data to correct it.
      const holders = this.approx.bestHolders();
      if (holders !== undefined) {
        for (const endpoint of holders) {
          if (this.kv.podOf(endpoint.zone, endpoint.pod) === undefined) {
            best = Math.max(best, Math.min(this.promptTokens, this.approxDepth * this.blockTokens));
            break;
          }
        }
      }
    }
    return best;
  }
}
