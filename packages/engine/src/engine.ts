import { engineConfig } from './config.js';
import type { EngineConfig, PresetName } from './config.js';
import { SequenceHeap } from './heap.js';
import { KvPool } from './kv.js';
import { Rng } from './rng.js';
import { Sequence, SequenceList } from './sequence.js';
import type { EngineRequest, RejectReason } from './sequence.js';
import { StepBatch, stepMs } from './step.js';

/**
 * Event callbacks. They run inside `advance`/`submit`/`cancel`, after the engine's state is
 * consistent, so they may call `submit` and `cancel` again (a closed-loop client does).
 */
export interface EngineListener<R extends EngineRequest> {
  /** An output token; `seq.generated` is its 1-based index, `seq.lastItlMs` the gap before it. */
  onToken?(seq: Sequence<R>, at: number): void;
  /** The last token was emitted (onToken for it has already run); the request's blocks are freed. */
  onFinish?(seq: Sequence<R>, at: number): void;
  /** Put back at the head of the waiting queue because decode ran out of KV blocks. */
  onPreempt?(seq: Sequence<R>, at: number): void;
  /**
   * Prompt blocks `[from, to)` of `seq.request.blockHashes` entered the prefix cache (what vLLM
   * reports as a `BlockStored` KV event). Blocks another request had already cached are not
   * reported again, so one prefill may report several runs.
   */
  onBlocksStored?(seq: Sequence<R>, from: number, to: number, at: number): void;
  /**
   * A cached block was evicted to make room (vLLM's `BlockRemoved`). Called in the middle of an
   * allocation: it must only record the hash, never call back into the engine.
   */
  onBlockEvicted?(hash: number): void;
  /** `resetPrefixCache` dropped every cached block (vLLM's `AllBlocksCleared`). */
  onCacheCleared?(): void;
}

/** The gauges and counters vLLM exports, plus the engine's own bookkeeping. */
export interface EngineStats {
  waiting: number;
  running: number;
  /** Used blocks / all blocks; evictable cached blocks count as free, as in vLLM. */
  kvUsage: number;
  usedBlocks: number;
  cachedBlocks: number;
  numBlocks: number;
  blockSize: number;
  /** Prompt tokens found in the prefix cache, and prompt tokens looked up, at each admission. */
  prefixHitTokens: number;
  prefixQueryTokens: number;
  preemptions: number;
  submitted: number;
  finished: number;
  rejected: number;
  cancelled: number;
  promptTokens: number;
  generationTokens: number;
  /** Sums (ms) and counts of time to first token and time waiting for admission, as a server's histograms have them. */
  ttftSumMs: number;
  ttftCount: number;
  queueSumMs: number;
  queueCount: number;
  /**
   * Sum (ms) and count of prefill times, one per request at its first token: from when it was first
   * scheduled (admitted into the batch; in step mode, the start of the step that runs its first
   * chunk) until that token, preemptions included, as vLLM's `request_prefill_time_seconds`
   * measures it (vLLM observes it when the request finishes; here it counts at the first token,
   * with TTFT, so a request cancelled after its first token counts too).
   */
  prefillSumMs: number;
  prefillCount: number;
  /** Sum (ms) and count of the gaps between consecutive output tokens (vLLM's `inter_token_latency_seconds`). */
  itlSumMs: number;
  itlCount: number;
  /** Step mode: steps run, the tokens they computed (prefill and decode), and the virtual time they took. */
  steps: number;
  stepTokens: number;
  busyMs: number;
}

export interface LoraInfo {
  running: string[];
  waiting: string[];
  max: number;
}

export interface EngineOptions extends Partial<EngineConfig> {
  preset?: PresetName;
}

/**
 * One model-server replica: waiting FIFO, a running batch of at most maxNumSeqs, KV blocks with a
 * prefix cache, LoRA slots, preemption, and one of two timing modes (see EngineConfig):
 * - closed form: each running sequence has its own next-token event in a heap; admission happens
 *   as soon as a slot and blocks are free;
 * - step: one event per engine step; admission, prefill chunks and decodes are scheduled at the
 *   start of each step under the token budget, and every token of the step is emitted at its end.
 *
 * Time is whatever the caller says it is (milliseconds): call `advance(now)` to process every event
 * up to `now`, and `nextEventAt()` to learn when the next one is due. Events are processed at their
 * own timestamps, so admissions triggered by a finish happen at the finish time, not at `now`.
 */
export class Engine<R extends EngineRequest = EngineRequest> {
  readonly config: EngineConfig;
  private readonly kv: KvPool;
  private readonly rng: Rng;
  private readonly heap = new SequenceHeap<R>();
  private readonly waiting = new SequenceList<R>();
  private readonly running = new SequenceList<R>();
  private readonly loraRunning = new Map<string, number>();
  private readonly loraWaiting = new Map<string, number>();
  private clock = Number.NEGATIVE_INFINITY;
  private inAdvance = false;
  private order = 0;
  private readonly stepMode: boolean;
  /** Step mode: the step in flight (empty when idle) and when it ends. */
  private readonly batch = new StepBatch<R>();
  private stepEndAt = Number.POSITIVE_INFINITY;
  /** Set while a step's results are applied: a listener's submit must not start a step mid-way. */
  private finishing = false;
  private steps = 0;
  private stepTokens = 0;
  private busyMs = 0;

  private prefixHits = 0;
  private prefixQueries = 0;
  private preemptions = 0;
  private submitted = 0;
  private finished = 0;
  private rejected = 0;
  private cancelled = 0;
  private promptTokens = 0;
  private generationTokens = 0;
  private ttftSumMs = 0;
  private ttftCount = 0;
  private queueSumMs = 0;
  private queueCount = 0;
  private prefillSumMs = 0;
  private prefillCount = 0;
  private itlSumMs = 0;
  private itlCount = 0;

  constructor(
    options: EngineOptions | EngineConfig = {},
    private readonly listener: EngineListener<R> = {},
  ) {
    const { preset, ...overrides } = options as EngineOptions;
    this.config = engineConfig(preset, overrides);
    this.kv = new KvPool(this.config.numBlocks, listener.onBlockEvicted?.bind(listener));
    this.rng = new Rng(this.config.seed);
    this.stepMode = this.config.mode === 'step';
  }

  /**
   * Queue a request at `now`. The returned sequence is already rejected (see `state` and
   * `rejectReason`) if it can never run or the waiting queue is full.
   */
  submit(request: R, now: number): Sequence<R> {
    this.advance(now);
    const at = Math.max(now, this.clock);
    const seq = new Sequence(request, at);
    this.submitted++;
    const reason = this.validate(request);
    if (reason) return this.reject(seq, reason);
    this.waiting.pushBack(seq);
    this.bump(this.loraWaiting, request.lora, 1);
    // Step mode admits at the start of a step: now if the engine is idle, else when the current step ends.
    if (this.stepMode) this.startStep(at);
    else this.tryAdmit(at);
    // Queue length is checked after admission so that maxWaiting = 0 means "no queue", not "no requests".
    if (seq.state === 'waiting' && this.waiting.size > this.config.maxWaiting) {
      this.unlinkWaiting(seq);
      return this.reject(seq, 'queue-full');
    }
    return seq;
  }

  /** Drop a waiting or running request (client went away); its blocks are freed. */
  cancel(seq: Sequence<R>, now: number): boolean {
    this.advance(now);
    const at = Math.max(now, this.clock);
    if (seq.state === 'waiting') {
      this.unlinkWaiting(seq);
    } else if (seq.state === 'running') {
      this.heap.remove(seq);
      this.unlinkRunning(seq);
      // In step mode the step in flight still spends its tokens; the sequence is skipped at its end.
      if (!this.stepMode) this.tryAdmit(at);
    } else {
      return false;
    }
    seq.state = 'cancelled';
    seq.finishedAt = at;
    this.cancelled++;
    return true;
  }

  /** Process every event due at or before `now`. Returns how many token events ran. */
  advance(now: number): number {
    // A listener calling submit/cancel re-enters here; the outer loop is already processing.
    if (this.inAdvance) return 0;
    this.inAdvance = true;
    let n = 0;
    try {
      if (this.stepMode) {
        while (this.stepEndAt <= now) {
          const at = this.stepEndAt;
          this.clock = at;
          n += this.finishStep(at);
        }
      } else {
        for (let s = this.heap.peek(); s !== undefined && s._nextAt <= now; s = this.heap.peek()) {
          this.heap.pop();
          this.clock = s._nextAt;
          this.emitToken(s, s._nextAt);
          n++;
        }
      }
      if (now > this.clock) this.clock = now;
    } finally {
      this.inAdvance = false;
    }
    return n;
  }

  /** When the next token (step mode: the end of the current step) is due; Infinity when nothing is running. */
  nextEventAt(): number {
    if (this.stepMode) return this.stepEndAt;
    return this.heap.peek()?._nextAt ?? Number.POSITIVE_INFINITY;
  }

  get waitingCount(): number {
    return this.waiting.size;
  }

  get runningCount(): number {
    return this.running.size;
  }

  get kvUsage(): number {
    return this.kv.usedBlocks / this.kv.numBlocks;
  }

  /** Nothing waiting or running. */
  get idle(): boolean {
    return this.waiting.size === 0 && this.running.size === 0;
  }

  stats(): EngineStats {
    return {
      waiting: this.waiting.size,
      running: this.running.size,
      kvUsage: this.kvUsage,
      usedBlocks: this.kv.usedBlocks,
      cachedBlocks: this.kv.cachedBlocks,
      numBlocks: this.config.numBlocks,
      blockSize: this.config.blockSize,
      prefixHitTokens: this.prefixHits,
      prefixQueryTokens: this.prefixQueries,
      preemptions: this.preemptions,
      submitted: this.submitted,
      finished: this.finished,
      rejected: this.rejected,
      cancelled: this.cancelled,
      promptTokens: this.promptTokens,
      generationTokens: this.generationTokens,
      ttftSumMs: this.ttftSumMs,
      ttftCount: this.ttftCount,
      queueSumMs: this.queueSumMs,
      queueCount: this.queueCount,
      prefillSumMs: this.prefillSumMs,
      prefillCount: this.prefillCount,
      itlSumMs: this.itlSumMs,
      itlCount: this.itlCount,
      steps: this.steps,
      stepTokens: this.stepTokens,
      busyMs: this.busyMs,
    };
  }

  loraInfo(): LoraInfo {
    return { running: [...this.loraRunning.keys()], waiting: [...this.loraWaiting.keys()], max: this.config.maxLoras };
  }

  private validate(r: R): RejectReason | undefined {
    const { blockSize, numBlocks, maxLoras } = this.config;
    if (!Number.isInteger(r.promptTokens) || r.promptTokens < 1) return 'invalid';
    if (!Number.isInteger(r.outputTokens) || r.outputTokens < 1) return 'invalid';
    // A sequence that cannot fit alone in the whole pool would preempt itself forever.
    if (Math.ceil((r.promptTokens + r.outputTokens) / blockSize) > numBlocks) return 'too-long';
    if (r.lora !== undefined && maxLoras === 0) return 'lora-disabled';
    return undefined;
  }

  private reject(seq: Sequence<R>, reason: RejectReason): Sequence<R> {
    seq.state = 'rejected';
    seq.rejectReason = reason;
    seq.finishedAt = seq.submittedAt;
    this.rejected++;
    return seq;
  }

  private tryAdmit(at: number): void {
    const { maxNumSeqs, maxLoras } = this.config;
    let s = this.waiting.head;
    while (s !== null && this.running.size < maxNumSeqs) {
      const lora = s.request.lora;
      // Like vLLM, a request whose adapter cannot get a slot is skipped, not blocking the queue...
      if (lora !== undefined && !this.loraRunning.has(lora) && this.loraRunning.size >= maxLoras) {
        s = s._next;
        continue;
      }
      // ...but a request that does not fit in KV blocks the queue (FCFS).
      if (!this.allocate(s)) break;
      const next = s._next;
      this.unlinkWaiting(s);
      this.start(s, at);
      s = next;
    }
  }

  /** Reserve KV blocks for a waiting sequence's (re)prefill; false if they are not free. */
  private allocate(s: Sequence<R>): boolean {
    const { blockSize } = this.config;
    const r = s.request;
    const tokens = r.promptTokens + s.generated;
    const hashes = r.blockHashes;
    const fullPromptBlocks = hashes ? Math.min(hashes.length, Math.floor(r.promptTokens / blockSize)) : 0;
    // At least one token must be computed to produce logits, so a fully cached prompt recomputes its last block.
    const limit = Math.min(fullPromptBlocks, Math.floor((tokens - 1) / blockSize));
    const hits = this.kv.match(hashes, limit);
    const fresh = Math.ceil(tokens / blockSize) - hits;
    if (fresh > this.kv.freeBlocks - this.kv.lastEvictableHits) return false;
    if (hashes) this.kv.acquire(hashes, hits, s._blocks);
    this.kv.allocate(fresh);
    s._anonBlocks = fresh;
    s._publishFrom = hits;
    s._publishTo = fullPromptBlocks;
    const cached = hits * blockSize;
    this.prefixHits += cached;
    this.prefixQueries += tokens;
    if (Number.isNaN(s.admittedAt)) {
      s.cachedTokens = cached;
      this.promptTokens += r.promptTokens;
    }
    return true;
  }

  private start(s: Sequence<R>, at: number): void {
    const cfg = this.config;
    s.state = 'running';
    if (Number.isNaN(s.admittedAt)) {
      s.admittedAt = at;
      this.queueSumMs += at - s.submittedAt;
      this.queueCount++;
    }
    s._order = this.order++;
    this.running.pushBack(s);
    this.bump(this.loraRunning, s.request.lora, 1);
    const uncached = s.request.promptTokens + s.generated - s._publishFrom * cfg.blockSize;
    if (this.stepMode) {
      // The prefill is computed in chunks by the steps that follow (see startStep).
      s._prefilling = true;
      s._prefillLeft = uncached;
      s._context = s._publishFrom * cfg.blockSize;
      return;
    }
    const prefill = (cfg.prefillOverheadMs + uncached * cfg.prefillPerTokenMs) * this.loadFactor() * this.jitter();
    s._prefilling = true;
    s._nextAt = at + prefill;
    this.heap.push(s);
  }

  private emitToken(s: Sequence<R>, at: number): void {
    if (s._prefilling) {
      s._prefilling = false;
      this.publishPrompt(s, at);
    }
    s.generated++;
    this.generationTokens++;
    if (s.generated === 1) {
      s.firstTokenAt = at;
      this.ttftSumMs += at - s.submittedAt;
      this.ttftCount++;
      // admittedAt is the first admission only: a prefill preempted and redone counts from there.
      this.prefillSumMs += at - s.admittedAt;
      this.prefillCount++;
      s.lastItlMs = Number.NaN;
    } else {
      s.lastItlMs = at - s.lastTokenAt;
      this.itlSumMs += s.lastItlMs;
      this.itlCount++;
    }
    s.lastTokenAt = at;

    if (s.generated >= s.request.outputTokens) {
      this.unlinkRunning(s);
      s.state = 'finished';
      s.finishedAt = at;
      this.finished++;
      this.listener.onToken?.(s, at);
      this.listener.onFinish?.(s, at);
      if (!this.stepMode) this.tryAdmit(at);
      return;
    }

    // The KV of prompt + generated tokens must fit before the next decode step.
    const needed = Math.ceil((s.request.promptTokens + s.generated) / this.config.blockSize);
    let preempted = false;
    if (needed > s.heldBlocks) {
      while (!this.kv.allocate(1)) {
        const victim = this.running.tail as Sequence<R>;
        this.preempt(victim, at);
        preempted = true;
        if (victim === s) break;
      }
      if (s.state === 'running') s._anonBlocks++;
    }
    if (s.state === 'running' && !this.stepMode) {
      s._nextAt = at + this.config.interTokenMs * this.loadFactor() * this.jitter();
      this.heap.push(s);
    }
    this.listener.onToken?.(s, at);
    if (preempted && !this.stepMode) this.tryAdmit(at);
  }

  /**
   * Step mode: schedule the next step at `at` unless one is in flight. As vLLM's scheduler does,
   * running sequences come first (a decode takes one token, an unfinished prefill its next chunk),
   * then waiting requests are admitted in order while batch slots, KV blocks and LoRA slots allow,
   * each with a first prefill chunk cut to what is left of the token budget.
   */
  private startStep(at: number): void {
    if (this.stepEndAt !== Number.POSITIVE_INFINITY || this.finishing) return;
    const cfg = this.config;
    const batch = this.batch;
    batch.reset(cfg.maxNumBatchedTokens);
    for (let s = this.running.head; s !== null && batch.budget > 0; s = s._next) {
      batch.add(s, s._prefillLeft > 0 ? s._prefillLeft : 1, s._prefillLeft > 0);
    }
    let s = this.waiting.head;
    while (s !== null && batch.budget > 0 && this.running.size < cfg.maxNumSeqs) {
      const lora = s.request.lora;
      // Like vLLM, a request whose adapter cannot get a slot is skipped, not blocking the queue...
      if (lora !== undefined && !this.loraRunning.has(lora) && this.loraRunning.size >= cfg.maxLoras) {
        s = s._next;
        continue;
      }
      // ...but a request that does not fit in KV blocks the queue (FCFS).
      if (!this.allocate(s)) break;
      const next = s._next;
      this.unlinkWaiting(s);
      this.start(s, at);
      batch.add(s, s._prefillLeft, true);
      s = next;
    }
    if (batch.size === 0) return;
    const duration = stepMs(cfg, batch) * this.jitter();
    this.steps++;
    this.stepTokens += batch.totalTokens;
    this.busyMs += duration;
    this.stepEndAt = at + duration;
  }

  /**
   * Step mode: the step ending at `at` is done. Prefill chunks advance; a sequence whose prefill
   * completes, and every decode, emits its token now. Then the next step starts. Returns the tokens emitted.
   */
  private finishStep(at: number): number {
    this.stepEndAt = Number.POSITIVE_INFINITY;
    let emitted: number;
    this.finishing = true;
    try {
      emitted = this.applyStep(at);
    } finally {
      this.finishing = false;
    }
    this.batch.clear();
    this.startStep(at);
    return emitted;
  }

  private applyStep(at: number): number {
    const batch = this.batch;
    let emitted = 0;
    for (let i = 0; i < batch.size; i++) {
      const s = batch.seqs[i] as Sequence<R>;
      // Cancelled, or preempted by a batch-mate's decode earlier in this loop.
      if (s.state !== 'running') continue;
      const tokens = batch.tokens[i] as number;
      s._context += tokens;
      if (s._prefillLeft > 0) {
        s._prefillLeft -= tokens;
        if (s._prefillLeft > 0) continue;
      }
      this.emitToken(s, at);
      emitted++;
    }
    return emitted;
  }

  /** The prompt's full blocks are computed now, so later requests may hit them. */
  /**
   * Drop the whole prefix cache, as vLLM's reset_prefix_cache: only when no request holds a block
   * (false otherwise, nothing changed).
   */
  resetPrefixCache(): boolean {
    if (!this.kv.reset()) return false;
    this.listener.onCacheCleared?.();
    return true;
  }

  private publishPrompt(s: Sequence<R>, at: number): void {
    const hashes = s.request.blockHashes;
    if (!hashes) return;
    const stored = this.listener.onBlocksStored;
    let run = -1;
    for (let i = s._publishFrom; i < s._publishTo; i++) {
      const b = this.kv.publish(hashes[i] as number);
      if (b === null) {
        if (run >= 0) stored?.call(this.listener, s, run, i, at);
        run = -1;
        continue;
      }
      s._blocks.push(b);
      s._anonBlocks--;
      if (run < 0) run = i;
    }
    if (run >= 0) stored?.call(this.listener, s, run, s._publishTo, at);
  }

  private preempt(s: Sequence<R>, at: number): void {
    this.heap.remove(s);
    this.unlinkRunning(s);
    s.state = 'waiting';
    s._prefilling = false;
    s._prefillLeft = 0;
    s.preemptions++;
    this.preemptions++;
    this.waiting.pushFront(s);
    this.bump(this.loraWaiting, s.request.lora, 1);
    this.listener.onPreempt?.(s, at);
  }

  private unlinkRunning(s: Sequence<R>): void {
    this.running.remove(s);
    this.bump(this.loraRunning, s.request.lora, -1);
    this.kv.release(s._blocks);
    this.kv.releaseAnonymous(s._anonBlocks);
    s._anonBlocks = 0;
  }

  private unlinkWaiting(s: Sequence<R>): void {
    this.waiting.remove(s);
    this.bump(this.loraWaiting, s.request.lora, -1);
  }

  private loadFactor(): number {
    const { maxNumSeqs, loadFactor } = this.config;
    if (maxNumSeqs <= 1) return 1;
    return 1 + ((loadFactor - 1) * (this.running.size - 1)) / (maxNumSeqs - 1);
  }

  /** Multiplicative gaussian jitter, clamped to ±70% so a sample is never negative. */
  private jitter(): number {
    const sd = this.config.jitter;
    if (sd === 0) return 1;
    const g = this.rng.gaussian() * sd;
    return 1 + (g > 0.7 ? 0.7 : g < -0.7 ? -0.7 : g);
  }

  private bump(m: Map<string, number>, key: string | undefined, d: number): void {
    if (key === undefined) return;
    const v = (m.get(key) ?? 0) + d;
    if (v <= 0) m.delete(key);
    else m.set(key, v);
  }
}
