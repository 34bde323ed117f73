import { Engine } from '@spillway/engine';
import type { EngineOptions, EngineRequest, Sequence } from '@spillway/engine';

/** A request that carries its own callbacks, so the engine's events need no lookup table. */
export interface LiveRequest extends EngineRequest {
  /** The prompt's token ids (what `blockHashes` was computed from): a stored block's KV event carries them. */
  readonly tokenIds: ArrayLike<number>;
  /** The request's `cache_salt`: vLLM hashes it into the prompt's first block, so only requests with the same salt share blocks. */
  readonly cacheSalt?: string;
  onToken(seq: Sequence<LiveRequest>, at: number): void;
  onFinish(seq: Sequence<LiveRequest>, at: number): void;
}

/** Where the engine's prefix-cache changes go (the KV-event publisher). */
export interface KvSink {
  stored(seq: Sequence<LiveRequest>, from: number, to: number): void;
  evicted(hash: number): void;
  cleared(): void;
}

/**
 * Drives the pure engine in real time. Model time (ms) runs `timeScale` times faster than the wall
 * clock; one timer is armed for the engine's next event and re-armed after every change.
 */
export class RealtimeEngine {
  readonly engine: Engine<LiveRequest>;
  private readonly t0 = performance.now();
  private timer: NodeJS.Timeout | undefined;
  private armedFor = Number.POSITIVE_INFINITY;
  private stopped = false;

  constructor(
    options: EngineOptions,
    private readonly timeScale: number,
    kv?: KvSink,
  ) {
    this.engine = new Engine<LiveRequest>(options, {
      onToken: (s, at) => s.request.onToken(s, at),
      onFinish: (s, at) => s.request.onFinish(s, at),
      ...(kv
        ? {
            onBlocksStored: (s, from, to) => kv.stored(s, from, to),
            onBlockEvicted: (h) => kv.evicted(h),
            onCacheCleared: () => kv.cleared(),
          }
        : {}),
    });
  }

  /** Model time in ms since start. */
  now(): number {
    return (performance.now() - this.t0) * this.timeScale;
  }

  submit(req: LiveRequest): Sequence<LiveRequest> {
    const seq = this.engine.submit(req, this.now());
    this.arm();
    return seq;
  }

  cancel(seq: Sequence<LiveRequest>): void {
    if (this.engine.cancel(seq, this.now())) this.arm();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  private readonly tick = (): void => {
    this.timer = undefined;
    this.armedFor = Number.POSITIVE_INFINITY;
    this.engine.advance(this.now());
    this.arm();
  };

  private arm(): void {
    if (this.stopped) return;
    const next = this.engine.nextEventAt();
    if (next >= this.armedFor) return;
    clearTimeout(this.timer);
    this.armedFor = next;
    if (!Number.isFinite(next)) return;
    const delayMs = Math.max(0, (next - this.now()) / this.timeScale);
    this.timer = setTimeout(this.tick, delayMs);
    // The HTTP server keeps the process alive; a pending token must not.
    this.timer.unref();
  }
}
