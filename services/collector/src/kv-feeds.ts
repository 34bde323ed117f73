import {
  decodeTrtllmKvEvents,
  decodeVllmKvBatch,
  decodeVllmSeq,
  encodeVllmSeq,
  type TrtllmKvEvent,
  type VllmKvEvent,
} from '@spillway/events';
import { Dealer, Subscriber } from 'zeromq';
import { MAX_RANKS_PER_POD, SeqTracker } from './kv-map.js';
import type { PodRelay } from './kv-relay.js';

/** The extra key a TensorRT-LLM chain start gets when its hash is not its tokens' alone (an adapter's or a salted request's). */
const NOT_BASE_HASH = 'trtllm:hash-not-of-tokens-alone';
import type { KvRankEndpoint } from './kv-sources.js';

/** One source of a pod's KV events: a rank's ZeroMQ stream, or a TensorRT-LLM server's event queue. */
export interface KvFeed {
  /** The next server sequence number (or event id) expected. */
  readonly expected: number;
  close(): void;
}

/** SGLang appends its publisher's lifecycle to the topic frame when it offers snapshots (`_live_topic`). */
const SGLANG_EPOCH_MARKER = Buffer.from('\u0000sgl-kv-epoch=', 'latin1');

/** The publisher epoch in an SGLang topic frame, or undefined (vLLM, or SGLang without snapshots). */
export function sglangEpochOf(topic: Buffer): string | undefined {
  const at = topic.indexOf(SGLANG_EPOCH_MARKER);
  if (at < 0) return undefined;
  const start = at + SGLANG_EPOCH_MARKER.length;
  const end = topic.indexOf(0, start);
  return topic.toString('latin1', start, end < 0 ? topic.length : end).slice(0, 128);
}

/**
 * One data-parallel rank of a vLLM or SGLang server: a ZeroMQ SUB socket on its PUB endpoint, its
 * batch sequence, and its replay socket when it has one (vLLM's protocol, which SGLang shares:
 * `["", seq]` in, `["", seq, payload]` out per buffered batch, then seq -1). A gap that cannot be
 * replayed, a batch dropped as malformed, a reconnect (a restarted server may continue any
 * number) or a new SGLang publisher epoch starts the rank afresh.
 */
export class ZmqRankFeed implements KvFeed {
  private readonly sub: Subscriber;
  private readonly seq = new SeqTracker();
  private closed = false;
  /** The connection dropped since the last message: the next one starts the rank afresh. */
  private resync = false;
  private epoch: string | undefined;

  constructor(
    private readonly pod: PodRelay,
    private readonly endpoint: KvRankEndpoint,
    private readonly rank: number,
  ) {
    const o = pod.relay.options;
    this.sub = new Subscriber({
      linger: 0,
      reconnectInterval: o.reconnectMs,
      reconnectMaxInterval: o.reconnectMaxMs,
      // Far larger messages are refused by ZeroMQ itself (the peer is disconnected) before any allocation.
      maxMessageSize: 4 * o.limits.maxPayloadBytes,
      ipv6: endpoint.events.includes('['),
    });
    this.sub.events.on('connect', () => o.metrics.kvConnections.inc({ event: 'connect' }));
    this.sub.events.on('disconnect', () => {
      o.metrics.kvConnections.inc({ event: 'disconnect' });
      // Messages may be lost while disconnected, and the server may come back restarted with a
      // sequence that happens to continue ours: only a fresh start is safe.
      this.resync = true;
    });
    this.sub.events.on('connect:retry', () => o.metrics.kvConnections.inc({ event: 'retry' }));
    this.sub.subscribe(o.topic);
    this.sub.connect(endpoint.events);
    void this.receive();
  }

  get expected(): number {
    return this.seq.expected;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.sub.close();
  }

  private async receive(): Promise<void> {
    try {
      for await (const frames of this.sub) {
        if (this.closed) return;
        await this.onMessage(frames);
      }
    } catch (err) {
      if (!this.closed) this.pod.relay.options.logger.warn({ pod: this.pod.pod, rank: this.rank, err }, 'KV events: subscription failed');
    }
  }

  private async onMessage(frames: Buffer[]): Promise<void> {
    const relay = this.pod.relay;
    const o = relay.options;
    if (frames.length !== 3) return relay.dropped(this.pod.pod, 'bad-frames', `${frames.length} frames`);
    const seq = decodeVllmSeq(frames[1] as Buffer);
    if (seq === undefined || seq < 0)
      return relay.dropped(this.pod.pod, 'bad-seq', `sequence frame of ${(frames[1] as Buffer).byteLength} bytes`);
    o.metrics.kvBatchesReceived.inc();
    const epoch = sglangEpochOf(frames[0] as Buffer);
    const newEpoch = epoch !== undefined && this.epoch !== undefined && epoch !== this.epoch;
    if (epoch !== undefined) this.epoch = epoch;
    if (this.resync || newEpoch) {
      this.resync = false;
      o.metrics.kvGaps.inc({ handling: newEpoch ? 'restart' : 'reconnect' });
      return this.apply(seq, frames[2] as Buffer, true);
    }
    const verdict = this.seq.verdict(seq);
    if (verdict === 'duplicate') return;
    let fresh = false;
    if (verdict === 'gap') {
      const recovered = this.endpoint.replay === undefined ? 'none' : await this.replay(this.seq.expected, seq);
      o.metrics.kvGaps.inc({ handling: recovered === 'full' ? 'replay' : recovered === 'tail' ? 'replay-tail' : 'cleared' });
      if (this.closed || this.pod.isClosed) return;
      // Not (fully) recovered: what was missed is unknown, so the rank starts afresh here.
      fresh = this.seq.verdict(seq) !== 'apply';
    } else if (verdict === 'restart') {
      o.metrics.kvGaps.inc({ handling: 'restart' });
      fresh = true;
    }
    this.apply(seq, frames[2] as Buffer, fresh);
  }

  /** Folds one server batch into the pod. `fresh`: start the rank over first. */
  private apply(seq: number, payload: Uint8Array, fresh: boolean): void {
    const relay = this.pod.relay;
    this.seq.advance(seq);
    const decoded = decodeVllmKvBatch(payload, relay.options.limits);
    if (!decoded.ok) {
      relay.dropped(this.pod.pod, decoded.reason, decoded.detail);
      // A lost batch may have removed blocks: never claim them; start afresh.
      return this.pod.fresh(this.rank);
    }
    if (decoded.batch.unknownEvents > 0) relay.options.metrics.kvDropped.inc({ reason: 'unknown-tag' }, decoded.batch.unknownEvents);
    // Sequence 0 is the server's first batch: whatever its cache holds was stored from here on.
    this.pod.apply(this.rank, decoded.batch.events, { fresh, fromServerStart: seq === 0, said: decoded.batch.dataParallelRank });
  }

  /**
   * Asks the rank's ROUTER socket for batches `from` onwards and applies those that continue the
   * sequence. True when the sequence reaches `upTo` (the live message that revealed the gap).
   *
   * When the server's buffer no longer reaches back to `from` (vLLM keeps the last 10,000 batches:
   * a collector that starts after a long-running server, or an outage longer than that), the rank
   * starts afresh at the oldest batch the buffer still holds and takes in everything from there:
   * the blocks stored since are known again (the most recently stored ones, which are the likeliest
   * to be asked for), older ones stay unknown until stored again; nothing is claimed that the
   * server may have evicted.
   */
  private async replay(from: number, upTo: number): Promise<'full' | 'tail' | 'none'> {
    const o = this.pod.relay.options;
    const replayEndpoint = this.endpoint.replay as string;
    const dealer = new Dealer({
      linger: 0,
      ipv6: replayEndpoint.includes('['),
      receiveTimeout: o.replayTimeoutMs,
      sendTimeout: o.replayTimeoutMs,
      maxMessageSize: 4 * o.limits.maxPayloadBytes,
    });
    // Whether the buffer's oldest batch came after `from` (only its tail could be replayed), and whether any batch continued the sequence.
    let tail = false;
    let recovered = false;
    try {
      dealer.connect(replayEndpoint);
      await dealer.send(['', encodeVllmSeq(from)]);
      // Bounded: at most the batches up to the live one, plus the end marker.
      for (let n = 0; n <= upTo - from + 1 && !this.closed; n++) {
        const frames = await dealer.receive();
        const seq = frames.length === 3 ? decodeVllmSeq(frames[1] as Buffer) : undefined;
        if (seq === undefined) {
          this.pod.relay.dropped(this.pod.pod, 'bad-frames', 'replay reply');
          return tail ? 'tail' : 'none';
        }
        if (seq === -1) break;
        if (seq >= upTo) continue;
        const verdict = this.seq.verdict(seq);
        if (verdict === 'gap' && !tail && !recovered) {
          // The buffer starts after `from`: a fresh start from its oldest batch on.
          tail = true;
          this.pod.fresh(this.rank);
          this.seq.advance(seq - 1);
        } else if (verdict !== 'apply') continue;
        recovered = recovered || !tail;
        this.apply(seq, frames[2] as Buffer, false);
      }
      this.seq.replayed(from, this.seq.expected);
      if (this.seq.expected < upTo) return tail ? 'tail' : 'none';
      return tail ? 'tail' : 'full';
    } catch (err) {
      this.pod.relay.logLimited(this.pod.pod, 'replay', () =>
        o.logger.warn(
          { pod: this.pod.pod, rank: this.rank, err: (err as Error).message },
          'KV events: replay failed; starting the rank afresh',
        ),
      );
      return tail ? 'tail' : 'none';
    } finally {
      dealer.close();
    }
  }
}

/**
 * A TensorRT-LLM server (`trtllm-serve`): its KV-event queue drained by `POST /kv_cache_events`
 * every `pollIntervalMs`. Event ids count up per attention-DP rank (all ranks' events arrive
 * through rank 0's server, each saying its rank); the queue drops its oldest events when full and
 * there is no replay, so a jump starts that rank afresh, and ids that start again (a restarted
 * server, which also announces a `created` cache) start it afresh too.
 */
export class TrtllmFeed implements KvFeed {
  private readonly expectedByRank = new Map<number, number>();
  /**
   * A chain start of this server matched TensorRT-LLM's V1 hash of its tokens alone
   * (`trtllmV1BlockHash`): it hashes as that function does, so from then on a chain start that
   * does not match is a LoRA adapter's, a salted request's or one with extra token ids, none of
   * which the events name (the V1 serializer leaves `lora_id` out), and its chain is not credited.
   * Until the first match (or with another `hash_algo`) every chain is keyed by its tokens.
   */
  private v1Hashing = false;
  private timer: NodeJS.Timeout | undefined;
  private readonly abort = new AbortController();
  private closed = false;
  private failures = 0;
  private readonly origin: string;
  private readonly path: string;

  constructor(
    private readonly pod: PodRelay,
    url: string,
  ) {
    const parsed = new URL(url);
    this.origin = parsed.origin;
    this.path = `${parsed.pathname}${parsed.search}`;
    this.schedule(0);
  }

  get expected(): number {
    return this.expectedByRank.get(0) ?? 0;
  }

  close(): void {
    this.closed = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.abort.abort();
  }

  private schedule(delayMs: number): void {
    if (this.closed) return;
    this.timer = setTimeout(() => void this.poll(), delayMs);
    this.timer.unref();
  }

  private async poll(): Promise<void> {
    const o = this.pod.relay.options;
    let text: string;
    try {
      text = await this.drain();
    } catch (err) {
      if (this.closed) return;
      this.failures++;
      o.metrics.kvConnections.inc({ event: 'retry' });
      this.pod.relay.logLimited(this.pod.pod, 'poll', () =>
        o.logger.warn({ pod: this.pod.pod, err: (err as Error).message }, 'KV events: TensorRT-LLM event queue unreachable; retrying'),
      );
      return this.schedule(Math.min(o.reconnectMaxMs, o.reconnectMs * 2 ** Math.min(this.failures, 16)));
    }
    if (this.failures > 0) o.metrics.kvConnections.inc({ event: 'connect' });
    this.failures = 0;
    this.take(text);
    this.schedule(o.pollIntervalMs ?? 100);
  }

  /** One POST, its answer read within the byte bound and the timeout. */
  private async drain(): Promise<string> {
    const o = this.pod.relay.options;
    const dispatcher = o.dispatcher;
    if (dispatcher === undefined) throw new Error('no HTTP client');
    const signal = AbortSignal.any([this.abort.signal, AbortSignal.timeout(o.replayTimeoutMs)]);
    const response = await dispatcher.request({ origin: this.origin, path: this.path, method: 'POST', body: '', signal });
    if (response.statusCode < 200 || response.statusCode > 299) {
      await response.body.dump({ limit: 64 * 1024 });
      throw new Error(`HTTP ${response.statusCode}`);
    }
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of response.body) {
      size += (chunk as Buffer).length;
      if (size > o.limits.maxPayloadBytes) {
        response.body.destroy();
        throw new Error(`an answer over ${o.limits.maxPayloadBytes} bytes`);
      }
      chunks.push(chunk as Buffer);
    }
    return Buffer.concat(chunks, size).toString('utf8');
  }

  private take(text: string): void {
    const relay = this.pod.relay;
    const o = relay.options;
    o.metrics.kvBatchesReceived.inc();
    const decoded = decodeTrtllmKvEvents(text, o.limits);
    if (!decoded.ok) {
      relay.dropped(this.pod.pod, decoded.reason === 'not-json' ? 'not-json' : decoded.reason, decoded.detail);
      // The queue was drained: what the answer said is lost, for every rank that spoke before.
      for (const rank of this.expectedByRank.keys()) this.pod.fresh(rank);
      return;
    }
    if (decoded.unknownEvents > 0) o.metrics.kvDropped.inc({ reason: 'unknown-tag' }, decoded.unknownEvents);
    // Each rank has a block map of its own and a bit in the pod's union: a rank past those is not one this pod can have.
    const beyond = decoded.events.find((e) => (e.rank ?? 0) >= MAX_RANKS_PER_POD);
    if (beyond !== undefined) {
      relay.dropped(this.pod.pod, 'malformed', `attention_dp_rank ${beyond.rank} (at most ${MAX_RANKS_PER_POD - 1})`);
      for (const rank of this.expectedByRank.keys()) this.pod.fresh(rank);
      return;
    }
    // Consecutive events of one rank are folded together; a gap or restart starts the rank afresh first.
    let run: { rank: number; events: VllmKvEvent[]; fresh: boolean; fromServerStart: boolean } | undefined;
    const flush = (): void => {
      if (run !== undefined && (run.events.length > 0 || run.fresh))
        this.pod.apply(run.rank, run.events, { fresh: run.fresh, fromServerStart: run.fromServerStart, said: run.rank });
      run = undefined;
    };
    for (const e of decoded.events) {
      const rank = e.rank ?? 0;
      const fresh = this.follow(rank, e);
      if (run === undefined || run.rank !== rank || fresh) {
        flush();
        // Event id 0 is the server's first (its `created` cache).
        run = { rank, events: [], fresh, fromServerStart: e.id === 0 };
      }
      run.events.push(...this.namespaced(e));
    }
    flush();
  }

  /** The event's blocks, a chain start the V1 hash says is not the base model's plain tokens marked as extra-keyed (its chain follows). */
  private namespaced(e: TrtllmKvEvent): VllmKvEvent[] {
    if (e.v1Root === 'base' && !this.v1Hashing) {
      this.v1Hashing = true;
      const o = this.pod.relay.options;
      o.logger.info({ pod: this.pod.pod }, 'KV events: TensorRT-LLM block hashes are V1 hashes; adapter and salted chains are told apart');
    }
    const first = e.events[0];
    if (e.v1Root !== 'other' || !this.v1Hashing || first?.type !== 'stored') return e.events;
    const extra = first.extraKeys ?? first.hashes.map(() => null);
    return [{ ...first, extraKeys: [[NOT_BASE_HASH], ...extra.slice(1)] }, ...e.events.slice(1)];
  }

  /** Advances the rank's expected id; true when the rank must start afresh (events were lost, or the server restarted). */
  private follow(rank: number, e: TrtllmKvEvent): boolean {
    const o = this.pod.relay.options;
    const expected = this.expectedByRank.get(rank);
    this.expectedByRank.set(rank, e.id + 1);
    // The first event seen: a server that just started (id 0 announces its new, empty cache) or one
    // whose earlier events this collector never saw.
    if (expected === undefined) return e.id !== 0;
    if (e.id === expected) return false;
    o.metrics.kvGaps.inc({ handling: e.id > expected ? 'cleared' : 'restart' });
    return true;
  }
}
