import { decodeVllmSeq, encodeVllmKvBatch, encodeVllmSeq, VLLM_END_SEQ, VLLM_MEDIUM_GPU, type VllmKvEventInput } from '@spillway/events';
import type { Logger } from 'pino';
import { Publisher, Router } from 'zeromq';

export interface KvEventsOptions {
  /** PUB endpoint, bound: `tcp://*:5557` as vLLM's default (`tcp://127.0.0.1:*` picks a free port). */
  endpoint: string;
  /** The data-parallel rank this publisher speaks for (each batch says it, as vLLM's do). */
  dataParallelRank: number;
  /** vLLM's struct encoding: `map` (the newest vLLM) or `array` (`array_like` structs of earlier releases). */
  layout: 'map' | 'array';
  /** Optional ROUTER replay endpoint, bound (vLLM's `replay_endpoint`). */
  replayEndpoint?: string | undefined;
  /** First frame of every message (vLLM's `topic`, default empty). */
  topic: string;
  /** A batch is sent once it holds this many events. */
  batchMaxEvents: number;
  /** 0: one batch per engine step (as vLLM); more: gather the events of this many ms into one batch. */
  batchMs: number;
  /** Batches kept for replay (vLLM's `buffer_steps`); also bounded to `replayBufferBytes`. */
  replayBuffer: number;
  replayBufferBytes: number;
  /**
   * A hybrid-attention model: a second KV-cache group (group 1, `sliding_window`, this window in
   * tokens) beside the full-attention group 0, as vLLM's hybrid KV-cache manager keeps one group
   * per attention type. Undefined: one full-attention group.
   */
  slidingWindow?: number | undefined;
  /** A CPU offload tier of this many blocks (vLLM's offloading connector, CPU medium). Undefined: none. */
  offloadBlocks?: number | undefined;
}

export interface KvEventCounters {
  batches: number;
  events: number;
  bytes: number;
  replays: number;
  replayedBatches: number;
  badReplayRequests: number;
  sendErrors: number;
  /** Batches dropped unsent because the socket could not keep up (their sequence numbers are skipped). */
  droppedBatches: number;
}

/** What `stored` reports: blocks `[from, to)` of a request's `tokens`, keyed by the engine's `hashes`. */
export interface StoredBlocks {
  tokens: ArrayLike<number>;
  hashes: ArrayLike<number>;
  from: number;
  to: number;
  blockSize: number;
  /** The adapter the blocks belong to (vLLM numbers adapters 1, 2, ... in load order). */
  lora: { id: number; name: string } | null;
  /** The request's `cache_salt` (vLLM hashes it into the first block; null without one). */
  salt: string | null;
}

/** vLLM's `kv_cache_spec_kind` of a full-attention group and of a sliding-window one (`vllm/v1/kv_cache_interface.py`). */
const FULL_ATTENTION = 'full_attention';
const SLIDING_WINDOW = 'sliding_window';
/** vLLM's medium of its CPU offload tier (`vllm/v1/kv_offload`, `Medium.CPU`). */
const MEDIUM_CPU = 'CPU';
/** The groups' indices: the full-attention group first, as vLLM orders a hybrid model's groups here. */
const FULL_GROUP = 0;
const WINDOW_GROUP = 1;

/**
 * What vLLM hashes into a block besides its tokens (`vllm/v1/core/kv_cache_utils.py`
 * `generate_block_hash_extra_keys`): the LoRA name, then multimodal inputs (none here), then the
 * request's cache salt on the prompt's first block only; null when there is nothing.
 */
function extraKeysOf(lora: string | null, salt: string | null, block: number): string[] | null {
  const keys: string[] = [];
  if (lora !== null) keys.push(lora);
  if (salt !== null && block === 0) keys.push(salt);
  return keys.length > 0 ? keys : null;
}

/** Evictions coalesced into one BlockRemoved event at most (decoders bound hashes per event). */
const MAX_HASHES_PER_EVENT = 4096;

/** Bytes of batches waiting for the socket; past this the oldest are dropped (a subscriber sees a gap). */
const MAX_OUTBOX_BYTES = 16 * 1024 * 1024;

/**
 * Publishes the engine's block stores and evictions as vLLM does (`@spillway/events` vllm-kv for
 * the layout): multipart `[topic, seq, payload]` on a ZeroMQ PUB socket, and an optional ROUTER
 * socket answering replay requests `[identity, "", start_seq]` with every buffered batch from
 * `start_seq` on, then `[seq=-1, ""]`.
 */
export class KvEventPublisher {
  readonly counters: KvEventCounters = {
    batches: 0,
    events: 0,
    bytes: 0,
    replays: 0,
    replayedBatches: 0,
    badReplayRequests: 0,
    sendErrors: 0,
    droppedBatches: 0,
  };
  private readonly pub = new Publisher({ linger: 0 });
  private readonly router: Router | undefined;
  private readonly topic: Buffer;
  private pending: VllmKvEventInput[] = [];
  private flushTimer: NodeJS.Timeout | NodeJS.Immediate | undefined;
  private seq = 0;
  private readonly replay: Array<[seq: number, payload: Uint8Array]> = [];
  private replayBytes = 0;
  private readonly outbox: Array<[seq: number, payload: Uint8Array]> = [];
  /** Hashes the sliding-window group holds (its blocks leave with the engine's: one pool). */
  private readonly windowHeld = new Set<number>();
  /** The CPU tier's blocks, least recently offloaded first. */
  private readonly offloaded = new Map<number, true>();
  private outboxBytes = 0;
  private sending = false;
  private closed = false;
  /** Bound endpoints (with the chosen port when bound to `*`). */
  endpoint = '';
  replayEndpoint: string | undefined;

  constructor(
    private readonly options: KvEventsOptions,
    private readonly logger: Logger,
  ) {
    this.topic = Buffer.from(options.topic, 'utf8');
    if (options.replayEndpoint !== undefined) this.router = new Router({ linger: 0 });
  }

  async start(): Promise<void> {
    await this.pub.bind(this.options.endpoint);
    this.endpoint = this.pub.lastEndpoint ?? this.options.endpoint;
    if (this.router && this.options.replayEndpoint !== undefined) {
      await this.router.bind(this.options.replayEndpoint);
      this.replayEndpoint = this.router.lastEndpoint ?? this.options.replayEndpoint;
      void this.serveReplays(this.router);
    }
  }

  /**
   * Prompt blocks `[from, to)` of a request entered the cache: one BlockStored with every field
   * vLLM fills (`vllm/v1/core/block_pool.py` `BlockPool.cache_full_blocks`): the blocks' hashes
   * chained to the parent block, their tokens, the LoRA adapter (its number and its name), each
   * block's extra keys (`extraKeysOf`), the medium, and the KV-cache group with its kind.
   *
   * With a sliding-window group, the same blocks under the same hashes again in group 1 (vLLM's
   * coordinator caches a request's new full blocks in every group, `cache_full_blocks` once per
   * group). With a CPU tier, the blocks not yet offloaded are copied there (vLLM's offloading
   * connector stores every computed full block): a BlockStored on the CPU medium, and a
   * BlockRemoved on it for each block the full tier evicts, least recently offloaded first.
   */
  stored(blocks: StoredBlocks): void {
    const { tokens, hashes, from, to, blockSize, lora, salt } = blocks;
    const tokenIds = new Array<number>((to - from) * blockSize);
    for (let i = 0; i < tokenIds.length; i++) tokenIds[i] = tokens[from * blockSize + i] as number;
    const blockHashes = new Array<number>(to - from);
    for (let b = from; b < to; b++) blockHashes[b - from] = hashes[b] as number;
    const parent = from > 0 ? (hashes[from - 1] as number) : null;
    const extraKeys = blockHashes.map((_, i) => extraKeysOf(lora?.name ?? null, salt, from + i));
    const common = {
      type: 'stored',
      hashes: blockHashes,
      parent,
      tokenIds,
      blockSize,
      loraId: lora?.id ?? null,
      loraName: lora?.name ?? null,
      // A list per block, each null or its keys, as vLLM sends it (`extra_keys_list`).
      extraKeys,
    } as const;
    this.add({ ...common, medium: VLLM_MEDIUM_GPU, group: FULL_GROUP, groupKind: FULL_ATTENTION });
    const window = this.options.slidingWindow;
    if (window !== undefined) {
      for (const h of blockHashes) this.windowHeld.add(h);
      this.add({ ...common, medium: VLLM_MEDIUM_GPU, group: WINDOW_GROUP, groupKind: SLIDING_WINDOW, slidingWindow: window });
    }
    if (this.options.offloadBlocks !== undefined) this.offload(common, blockHashes);
  }

  /** One cached block was evicted; consecutive evictions of a group share one BlockRemoved event. */
  evicted(hash: number): void {
    this.removed(hash, VLLM_MEDIUM_GPU, FULL_GROUP);
    // One pool for both groups here: the window group's copy leaves with the block.
    if (this.windowHeld.delete(hash)) this.removed(hash, VLLM_MEDIUM_GPU, WINDOW_GROUP);
  }

  /** The GPU prefix cache was reset (AllBlocksCleared, `BlockPool.reset_prefix_cache`); the CPU tier keeps its blocks. */
  cleared(): void {
    this.windowHeld.clear();
    this.add({ type: 'cleared' });
  }

  /** The blocks not on the CPU tier yet are copied there (one BlockStored per run of them); the tier's overflow is evicted. */
  private offload(stored: Omit<Extract<VllmKvEventInput, { type: 'stored' }>, 'medium'>, hashes: readonly number[]): void {
    const capacity = this.options.offloadBlocks ?? 0;
    let start = 0;
    const flushRun = (end: number): void => {
      if (end > start) {
        const bs = stored.blockSize;
        this.add({
          ...stored,
          hashes: hashes.slice(start, end),
          parent: start === 0 ? stored.parent : (hashes[start - 1] as number),
          tokenIds: Array.from(stored.tokenIds).slice(start * bs, end * bs),
          extraKeys: stored.extraKeys ? stored.extraKeys.slice(start, end) : null,
          medium: MEDIUM_CPU,
          group: FULL_GROUP,
          groupKind: FULL_ATTENTION,
        });
      }
      start = end + 1;
    };
    for (let i = 0; i < hashes.length; i++) {
      const h = hashes[i] as number;
      if (this.offloaded.has(h)) {
        flushRun(i);
        continue;
      }
      this.offloaded.set(h, true);
    }
    flushRun(hashes.length);
    while (this.offloaded.size > capacity) {
      const oldest = this.offloaded.keys().next().value as number;
      this.offloaded.delete(oldest);
      this.removed(oldest, MEDIUM_CPU, FULL_GROUP);
    }
  }

  private removed(hash: number, medium: string, group: number): void {
    const last = this.pending[this.pending.length - 1];
    if (last?.type === 'removed' && last.medium === medium && last.group === group && last.hashes.length < MAX_HASHES_PER_EVENT)
      (last.hashes as number[]).push(hash);
    else this.add({ type: 'removed', hashes: [hash], medium, group });
  }

  private add(event: VllmKvEventInput): void {
    if (this.closed) return;
    this.pending.push(event);
    if (this.pending.length >= this.options.batchMaxEvents) {
      this.flush();
      return;
    }
    if (this.flushTimer !== undefined) return;
    this.flushTimer = this.options.batchMs > 0 ? setTimeout(this.flush, this.options.batchMs) : setImmediate(this.flush);
  }

  /** Encode the pending events as one batch with the next sequence number and queue it. */
  readonly flush = (): void => {
    if (this.flushTimer !== undefined) {
      clearTimeout(this.flushTimer as NodeJS.Timeout);
      clearImmediate(this.flushTimer as NodeJS.Immediate);
      this.flushTimer = undefined;
    }
    if (this.pending.length === 0 || this.closed) return;
    const events = this.pending;
    this.pending = [];
    const payload = encodeVllmKvBatch(Date.now() / 1000, events, this.options.dataParallelRank, this.options.layout);
    const seq = this.seq++;
    this.counters.batches++;
    this.counters.events += events.length;
    this.counters.bytes += payload.byteLength;
    this.remember(seq, payload);
    this.outbox.push([seq, payload]);
    this.outboxBytes += payload.byteLength;
    while (this.outboxBytes > MAX_OUTBOX_BYTES && this.outbox.length > 1) {
      const [, dropped] = this.outbox.shift() as [number, Uint8Array];
      this.outboxBytes -= dropped.byteLength;
      this.counters.droppedBatches++;
    }
    void this.drain();
  };

  private remember(seq: number, payload: Uint8Array): void {
    if (!this.router) return;
    this.replay.push([seq, payload]);
    this.replayBytes += payload.byteLength;
    while (
      this.replay.length > this.options.replayBuffer ||
      (this.replayBytes > this.options.replayBufferBytes && this.replay.length > 1)
    ) {
      const [, old] = this.replay.shift() as [number, Uint8Array];
      this.replayBytes -= old.byteLength;
    }
  }

  /** One send at a time (a zeromq socket allows no more); PUB never blocks, so this keeps up. */
  private async drain(): Promise<void> {
    if (this.sending) return;
    this.sending = true;
    try {
      while (this.outbox.length > 0 && !this.closed) {
        const [seq, payload] = this.outbox.shift() as [number, Uint8Array];
        this.outboxBytes -= payload.byteLength;
        try {
          await this.pub.send([this.topic, encodeVllmSeq(seq), payload]);
        } catch (err) {
          if (this.closed) return;
          this.counters.sendErrors++;
          this.logger.warn({ err, seq }, 'kv events: send failed');
        }
      }
    } finally {
      this.sending = false;
    }
  }

  private async serveReplays(router: Router): Promise<void> {
    try {
      for await (const frames of router) {
        const start = frames.length === 3 ? decodeVllmSeq(frames[2] as Buffer) : undefined;
        if (start === undefined || start < 0) {
          this.counters.badReplayRequests++;
          this.logger.debug({ frames: frames.length }, 'kv events: invalid replay request');
          continue;
        }
        const identity = frames[0] as Buffer;
        this.counters.replays++;
        // A copy: batches published while this replay is sent must not shift it.
        for (const [seq, payload] of this.replay.slice()) {
          if (seq < start) continue;
          await router.send([identity, '', encodeVllmSeq(seq), payload]);
          this.counters.replayedBatches++;
        }
        await router.send([identity, '', VLLM_END_SEQ, '']);
      }
    } catch (err) {
      if (!this.closed) this.logger.warn({ err }, 'kv events: replay socket failed');
    }
  }

  /** Sends what is pending (waiting at most `graceMs` for the socket), then closes. */
  async close(graceMs = 500): Promise<void> {
    if (this.closed) return;
    this.flush();
    const deadline = Date.now() + graceMs;
    while ((this.sending || this.outbox.length > 0) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    this.closed = true;
    this.pub.close();
    this.router?.close();
  }
}
