import type { CachedBlock } from './kv.js';

/** What a caller submits. Extend it freely: the engine hands the same object back in events. */
export interface EngineRequest {
  /** Prompt length in tokens (≥ 1). */
  readonly promptTokens: number;
  /** Tokens to generate (≥ 1); the model never stops early, as with `ignore_eos`. */
  readonly outputTokens: number;
  /** Chained hashes of the prompt's full blocks (see `blockHashes`); absent = no prefix reuse. */
  readonly blockHashes?: ArrayLike<number>;
  /** LoRA adapter name; absent = the base model. */
  readonly lora?: string;
  /** Network delay added to the TTFT the sequence reports; it does not occupy the engine. */
  readonly networkDelayMs?: number;
}

export type SequenceState = 'waiting' | 'running' | 'finished' | 'rejected' | 'cancelled';
export type RejectReason = 'queue-full' | 'too-long' | 'lora-disabled' | 'invalid';

/**
 * One request's life in the engine. Callers read the public fields; fields starting with `_`
 * belong to the engine (they are public only so the engine's parts can share them cheaply).
 */
export class Sequence<R extends EngineRequest = EngineRequest> {
  state: SequenceState = 'waiting';
  rejectReason: RejectReason | undefined;
  /** Output tokens emitted so far. */
  generated = 0;
  /** Prompt tokens served from the prefix cache at first admission (the `cached_tokens` of usage). */
  cachedTokens = 0;
  preemptions = 0;
  admittedAt = Number.NaN;
  firstTokenAt = Number.NaN;
  lastTokenAt = Number.NaN;
  finishedAt = Number.NaN;
  /** Gap before the latest token (NaN for the first). */
  lastItlMs = Number.NaN;

  _prev: Sequence<R> | null = null;
  _next: Sequence<R> | null = null;
  _heapIndex = -1;
  _nextAt = 0;
  /** Admission counter, to break ties between equal event times deterministically. */
  _order = 0;
  _prefilling = false;
  /** Step mode: prompt (+ recomputed) tokens still to prefill, and tokens whose KV is computed. */
  _prefillLeft = 0;
  _context = 0;
  _blocks: CachedBlock[] = [];
  _anonBlocks = 0;
  /** Prompt blocks [from, to) computed by the current prefill, to be published to the cache. */
  _publishFrom = 0;
  _publishTo = 0;

  constructor(
    readonly request: R,
    readonly submittedAt: number,
  ) {}

  get heldBlocks(): number {
    return this._blocks.length + this._anonBlocks;
  }

  /** Time to first token as a client would see it, including the request's network delay. */
  get ttftMs(): number {
    return this.firstTokenAt - this.submittedAt + (this.request.networkDelayMs ?? 0);
  }

  /** Time from submission to first admission. */
  get queueMs(): number {
    return this.admittedAt - this.submittedAt;
  }
}

/** Intrusive doubly linked list: O(1) push at either end and removal anywhere, no allocation. */
export class SequenceList<R extends EngineRequest> {
  head: Sequence<R> | null = null;
  tail: Sequence<R> | null = null;
  size = 0;

  pushBack(s: Sequence<R>): void {
    s._prev = this.tail;
    s._next = null;
    if (this.tail) this.tail._next = s;
    else this.head = s;
    this.tail = s;
    this.size++;
  }

  pushFront(s: Sequence<R>): void {
    s._next = this.head;
    s._prev = null;
    if (this.head) this.head._prev = s;
    else this.tail = s;
    this.head = s;
    this.size++;
  }

  remove(s: Sequence<R>): void {
    if (s._prev) s._prev._next = s._next;
    else this.head = s._next;
    if (s._next) s._next._prev = s._prev;
    else this.tail = s._prev;
    s._prev = s._next = null;
    this.size--;
  }
}
