import { kvKeySeed } from '@spillway/events';
import type { Endpoint, Fleet } from '@spillway/fleet';
import type { KvBlockIndex, KvPod } from './kv-index.js';
import type { PrefixIndex } from './prefix-index.js';

/**
 * Which index said what an endpoint caches: the servers' own KV events (`precise`), this EPP's own
 * picks (`approximate`), or both, the larger counting (`precise+approximate`: a pod whose KV data
 * is partial).
 */
export type CacheIndexSource = 'precise' | 'approximate' | 'precise+approximate';

/**
 * One request's view of both prefix indexes: with the prompt's token ids and complete KV data for a
 * pod, what the pod caches is the precise index's longest leading match (what the server reported
 * holding); for a pod without KV data, or a request without token ids, the approximate index's
 * guess as before. A pod whose KV data is partial (`KvPod.partial`: the relay started after the
 * server had stored blocks it cannot name, or this index's view has a hole) is credited with the
 * larger of the two: the precise match is true but may be short (what the pod held before the
 * relay's view began is unknown there), so it is never priced below what the approximate index
 * alone would say (docs/kv-events.md "After a collector restart"). Per request: `begin`, then
 * `cachedTokens(endpoint)` per candidate (O(1) after begin).
 */
export class PrefixLookup {
  /** The request carried token ids and some pod has KV data. */
  precise = false;
  /** Endpoints of the pool the precise index says hold the prompt's first block, deepest first, and their matched tokens. */
  private readonly holderList: Endpoint[] = [];
  /** Endpoint -> its pod's KV data, kept across requests (no allocation per pick); a stale entry only misses. */
  private readonly podByEndpoint = new WeakMap<Endpoint, KvPod>();
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
    private readonly pool: string,
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
    this.precise = tokenIds !== undefined && tokenIds.length > 0 && this.kv.hasData;
    if (!this.precise) {
      this.clearMatches();
      return Math.min(promptTokens, approxDepth * blockTokens);
    }
    this.seedFor = this.adapters.get(model) === true ? model : '';
    return this.prepare();
  }

  /** Re-keys the lookup when the model turned out (not) to be an adapter; returns the new best cached tokens. */
  rekey(model: string, modelIsAdapter: boolean, bestCachedTokens: number): number {
    if (this.adapters.size >= 1024 && !this.adapters.has(model)) this.adapters.clear();
    this.adapters.set(model, modelIsAdapter);
    if (!this.precise || (modelIsAdapter ? model : '') === this.seedFor) return bestCachedTokens;
    this.seedFor = modelIsAdapter ? model : '';
    return this.prepare();
  }

  /**
   * Prompt tokens `endpoint` caches: the precise match when the index holds the prompt's first
   * block there and the pod's KV data is complete; for a pod without KV data, what the approximate
   * index believes; for a pod whose KV data is partial, the larger of the two. O(1): one lookup in
   * the few matched endpoints, and the pod's KV data only when the approximate index credits it
   * with something.
   */
  cachedTokens(endpoint: Endpoint): number {
    let precise = 0;
    if (this.precise) {
      const pod = this.podByEndpoint.get(endpoint);
      if (pod !== undefined) {
        // A match means the entry is this lookup's own (a stale one matches nothing).
        precise = Math.min(this.promptTokens, this.kv.matchTokensOf(pod));
        if (precise > 0 && !pod.partial) return precise;
      }
    }
    if (this.approxDepth === 0) return precise;
    const blocks = this.approx.matchOf(endpoint);
    if (blocks === 0) return precise;
    // Complete KV data that holds none of the prompt: what the approximate index believes, the pod evicted.
    if (precise === 0 && this.precise && this.kv.podOf(endpoint.zone, endpoint.pod)?.partial === false) return 0;
    return Math.max(precise, Math.min(this.promptTokens, blocks * this.blockTokens));
  }

  /** Prompt tokens the precise index says `endpoint` caches (0 without token ids or KV data). */
  preciseTokensOf(endpoint: Endpoint): number {
    if (!this.precise) return 0;
    const pod = this.podByEndpoint.get(endpoint);
    return pod === undefined ? 0 : Math.min(this.promptTokens, this.kv.matchTokensOf(pod));
  }

  /** Which index answers for `endpoint`. */
  sourceOf(endpoint: Endpoint): CacheIndexSource {
    const pod = this.precise ? this.kv.podOf(endpoint.zone, endpoint.pod) : undefined;
    return pod === undefined ? 'approximate' : pod.partial ? 'precise+approximate' : 'precise';
  }

  /**
   * The pool's endpoints the precise index says hold the prompt's prefix, deepest first (at most
   * `limit`): they join the remote candidates even when the shortlist left them off, so a spilled
   * request reaches the remote pod holding its prefix.
   */
  holders(limit: number): readonly Endpoint[] {
    const list = this.holderList;
    if (list.length > limit) {
      // Sorted only when some must be left out: the deepest matches stay.
      list.sort((a, b) => this.cachedTokens(b) - this.cachedTokens(a));
      list.length = limit;
    }
    return list;
  }

  /** Forgets the request's references to endpoints. */
  end(): void {
    this.clearMatches();
    this.tokenIds = undefined;
  }

  private clearMatches(): void {
    this.holderList.length = 0;
  }

  /** Looks the prompt up in the precise index and resolves the matched pods to the pool's routable endpoints. */
  private prepare(): number {
    this.clearMatches();
    this.kv.prepare(this.tokenIds as ArrayLike<number>, kvKeySeed(this.seedFor));
    for (const pod of this.kv.matched) {
      let endpoint = pod.endpoint;
      if (endpoint === undefined || endpoint.deleted) {
        endpoint = this.fleet.get(this.pool, pod.zone, pod.pod);
        pod.endpoint = endpoint;
        if (endpoint !== undefined) this.podByEndpoint.set(endpoint, pod);
      } else if (this.podByEndpoint.get(endpoint) !== pod) {
        this.podByEndpoint.set(endpoint, pod);
      }
      if (endpoint !== undefined && endpoint.ready && !endpoint.deleted) this.holderList.push(endpoint);
    }
    return this.bestCachedTokens();
  }

  private bestCachedTokens(): number {
    let best = Math.min(this.promptTokens, this.kv.bestTokens);
    if (this.approxDepth > 0) {
      // The approximate depth still counts when some pod it credits has no complete KV data to correct it.
      const holders = this.approx.bestHolders();
      if (holders !== undefined) {
        for (const endpoint of holders) {
          if (this.kv.podOf(endpoint.zone, endpoint.pod)?.partial !== false) {
            best = Math.max(best, Math.min(this.promptTokens, this.approxDepth * this.blockTokens));
            break;
          }
        }
      }
    }
    return best;
  }
}
