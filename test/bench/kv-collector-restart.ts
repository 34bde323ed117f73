/**
 * The prefix-cache hit rate around a collector restart, with precise routing (docs/kv-events.md,
 * "After a collector restart"). A measurement, not a test: it prints a table.
 *
 *   node --conditions=@spillway/source --import tsx test/bench/kv-collector-restart.ts [--seeds 1,2,3]
 *
 * spillway-whatif cannot run this yet: its collector keeps its block map through a `collector-down`
 * fault (the relay object lives on), so a restarted collector there knows every block at once, which
 * a real one does not. Until the simulation resets a zone's relays when its collector comes back
 * (what this script does, per recovery mode), this script runs the same ingredients on their own:
 * the engine model (`@spillway/engine`, prefix cache and block events), the content keys and block
 * index (`@spillway/events`, `@spillway/scheduler`), a relay per replica that turns the engine's
 * stores and evictions into keyed batches, and a router that sends each request to the replica with
 * the longest precise match unless it is busier than the least loaded by a batch slot or more.
 *
 * Recovery modes at the restart (the collector is down `DOWN_S`, then starts):
 * - `none`: no restart (the reference);
 * - `fresh`: no replay socket: every pod starts afresh, blocks cached before are unknown until stored again;
 * - `tail`: a replay socket whose buffer holds the last `TAIL_S` seconds of batches: afresh, then those replayed;
 * - `full`: a replay buffer reaching back to the server's start: nothing is lost.
 */
import { blockHashes, Engine, Rng, type EngineRequest, type Sequence } from '@spillway/engine';
import { KV_CLEARED, KV_REMOVED, KV_STORED, kvBlockKeys, type KvEvent } from '@spillway/events';
import { KvBlockIndex } from '@spillway/scheduler';

const REPLICAS = 8;
const BLOCK = 16;
const CONTEXTS = 200;
const CONTEXT_TOKENS = 2048;
const QUESTION_TOKENS = 64;
const OUTPUT_TOKENS = 64;
const RPS = 40;
const RESTART_S = 90;
const DOWN_S = 5;
const TAIL_S = 30;
const END_S = 150;
const WINDOW_S = 10;
const FLUSH_MS = 20;

type Mode = 'none' | 'fresh' | 'tail' | 'full';

interface Req extends EngineRequest {
  readonly tokens: number[];
  readonly keys: number[];
}

/** One replica's collector side: server hash -> content key, and the stores of the recent past (for a tail replay). */
class Relay {
  readonly keyOf = new Map<number, number>();
  events: KvEvent[] = [];
  /** (time, hashes, keys) of every store and (time, hashes) of every eviction, for the replay buffer. */
  readonly log: Array<{ at: number; stored?: Array<[number, number]>; evicted?: number }> = [];
  down = false;
  stored(at: number, hashes: ArrayLike<number>, keys: readonly number[], from: number, to: number): void {
    const pairs: Array<[number, number]> = [];
    for (let i = from; i < to; i++) pairs.push([hashes[i] as number, keys[i] as number]);
    this.log.push({ at, stored: pairs });
    if (this.down) return;
    for (const [h, k] of pairs) this.keyOf.set(h, k);
    this.events.push([KV_STORED, pairs.map(([, k]) => k)]);
  }
  evicted(at: number, hash: number): void {
    this.log.push({ at, evicted: hash });
    if (this.down) return;
    const key = this.keyOf.get(hash);
    if (key === undefined) return;
    this.keyOf.delete(hash);
    this.events.push([KV_REMOVED, [key]]);
  }
  /** The collector starts again: afresh, then (tail) the buffered batches since `since` replayed. */
  restart(since: number): void {
    this.down = false;
    this.keyOf.clear();
    this.events = [[KV_CLEARED]];
    const stored: number[] = [];
    for (const entry of this.log) {
      if (entry.at < since) continue;
      if (entry.stored) for (const [h, k] of entry.stored) this.keyOf.set(h, k);
      if (entry.evicted !== undefined) this.keyOf.delete(entry.evicted);
    }
    for (const k of this.keyOf.values()) stored.push(k);
    if (stored.length > 0) this.events.push([KV_STORED, stored]);
  }
}

function zipf(rng: Rng, n: number, s: number, cdf: number[]): number {
  if (cdf.length === 0) {
    let sum = 0;
    for (let i = 1; i <= n; i++) cdf.push((sum += 1 / i ** s));
    for (let i = 0; i < n; i++) cdf[i] = (cdf[i] as number) / sum;
  }
  const u = rng.next();
  let lo = 0;
  let hi = n - 1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if ((cdf[mid] as number) < u) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

function run(mode: Mode, seed: number): number[] {
  const rng = new Rng(seed);
  const index = new KvBlockIndex('llama');
  const relays = Array.from({ length: REPLICAS }, () => new Relay());
  const hits: number[] = [];
  const queries: number[] = [];
  let now = 0;
  const engines = relays.map(
    (relay, r) =>
      new Engine<Req>(
        { preset: 'llama-8b-h100', mode: 'step', seed: seed * 31 + r, numBlocks: 7000, maxNumSeqs: 64 },
        {
          onBlocksStored: (s, from, to, at) => relay.stored(at, s.request.blockHashes as ArrayLike<number>, s.request.keys, from, to),
          onBlockEvicted: (h) => relay.evicted(now, h),
          onToken: (s: Sequence<Req>) => {
            if (s.generated !== 1) return;
            const w = Math.floor(s.submittedAt / 1000 / WINDOW_S);
            hits[w] = (hits[w] ?? 0) + s.cachedTokens;
            queries[w] = (queries[w] ?? 0) + s.request.promptTokens;
          },
        },
      ),
  );
  const contexts = Array.from({ length: CONTEXTS }, (_, c) =>
    Array.from({ length: CONTEXT_TOKENS }, (_, i) => (c * 7919 + i * 104_729) % 151_000),
  );
  const cdf: number[] = [];
  // Per pod, +1 per batch (a jump would be a gap to the index).
  const seqs = relays.map(() => 0);
  let nextArrival = 0;
  let nextFlush = 0;
  let restarted = false;
  while (now < END_S * 1000) {
    const nextEngine = Math.min(...engines.map((e) => e.nextEventAt()));
    now = Math.min(nextArrival, nextFlush, nextEngine);
    for (const e of engines) e.advance(now);
    if (mode !== 'none' && !restarted && now >= (RESTART_S - DOWN_S) * 1000) for (const r of relays) r.down = true;
    if (mode !== 'none' && !restarted && now >= RESTART_S * 1000) {
      restarted = true;
      const since = mode === 'full' ? 0 : mode === 'tail' ? now - TAIL_S * 1000 : Number.POSITIVE_INFINITY;
      for (const r of relays) r.restart(since);
    }
    if (now === nextFlush) {
      nextFlush += FLUSH_MS;
      relays.forEach((r, i) => {
        if (r.down || r.events.length === 0) return;
        index.applyBatch(
          { v: 1, pool: 'llama', zone: 'z', pod: `p${i}`, seq: ++(seqs[i] as number), observedAt: now, blockSize: BLOCK, events: r.events },
          now,
        );
        r.events = [];
      });
    }
    if (now === nextArrival) {
      nextArrival += (-Math.log(1 - rng.next()) / RPS) * 1000;
      const context = contexts[zipf(rng, CONTEXTS, 1.1, cdf)] as number[];
      const tokens = [...context, ...Array.from({ length: QUESTION_TOKENS }, () => Math.floor(rng.next() * 151_000))];
      const keys = kvBlockKeys(tokens, BLOCK);
      index.prepare(tokens, 0);
      const loads = engines.map((e) => e.stats().running + e.stats().waiting);
      const least = Math.min(...loads);
      let best = -1;
      let bestTokens = -1;
      for (const pod of index.matched) {
        const r = Number(pod.pod.slice(1));
        const t = index.matchTokensOf(pod);
        if (t > bestTokens && (loads[r] as number) <= least + 1) {
          best = r;
          bestTokens = t;
        }
      }
      if (best < 0) best = loads.indexOf(least);
      const req: Req = {
        promptTokens: tokens.length,
        outputTokens: OUTPUT_TOKENS,
        blockHashes: blockHashes(tokens, BLOCK, 0),
        tokens,
        keys,
      };
      (engines[best] as Engine<Req>).submit(req, now);
    }
  }
  return hits.map((h, w) => h / (queries[w] as number));
}

const seeds = (process.argv.find((a) => a.startsWith('--seeds='))?.slice(8) ?? '1,2,3').split(',').map(Number);
const modes: Mode[] = ['none', 'fresh', 'tail', 'full'];
const windows = Array.from({ length: END_S / WINDOW_S }, (_, w) => w);
const median = (v: number[]) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)] as number;
const table = modes.map((m) => {
  const runs = seeds.map((s) => run(m, s));
  return windows.map((w) => median(runs.map((r) => r[w] ?? Number.NaN)));
});
const first = (RESTART_S - 20) / WINDOW_S;
console.log(
  `Prefix-cache hit rate (cached / prompt tokens), median of seeds ${seeds.join(',')}; collector down ${DOWN_S} s, back at ${RESTART_S} s`,
);
console.log(['window (s)', ...modes].join(' | '));
for (let w = first; w < windows.length; w++)
  console.log(
    [`${w * WINDOW_S}-${(w + 1) * WINDOW_S}`, ...modes.map((_, m) => `${(((table[m] as number[])[w] ?? 0) * 100).toFixed(1)} %`)].join(
      ' | ',
    ),
  );
