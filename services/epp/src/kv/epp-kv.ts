import type { NatsConnection } from '@nats-io/nats-core';
import type { ReaderSink } from '@spillway/bus';
import type { Fleet } from '@spillway/fleet';
import type { PreparedRequest } from '@spillway/protocol';
import type { Logger } from 'pino';
import type { PromptTokenizer } from '@spillway/tokenizer';
import { KvCounters } from './counters.js';
import type { KvIndex } from './index-api.js';
import { PromptTokens, type TokenizeOutcome } from './prompt-tokens.js';
import { EppReaderSink } from './reader-sink.js';
import { KvSubscription } from './subscription.js';

const HAS_DATA_MS = 250;

export interface EppKvOptions {
  /** Follow KV batches and snapshots (`--kv-events`). */
  enabled: boolean;
  pool: string;
  tokenizers: ReadonlyMap<string, PromptTokenizer>;
  cacheBytes: number;
  maxChars: number;
}

/** A prompt's token ids, where they came from, and how long they took (telemetry observes it). */
export interface PromptTokenIds {
  readonly ids: Uint32Array;
  readonly outcome: TokenizeOutcome;
  readonly seconds: number;
}

/**
 * Precise prefix-cache routing in the EPP (docs/kv-events.md, "In the EPP"): the pool's KV batches
 * and snapshots into the scheduler's block index, and each request's prompt tokenized for it.
 * Without a tokenizer for a request's model, with `--kv-events false`, or while no pod has reported
 * blocks, requests carry no token ids and the scheduler uses its approximate prefix index.
 */
export class EppKv {
  readonly counters = new KvCounters();
  readonly tokens: PromptTokens | undefined;
  /** The pool's KV batches, once following. */
  subscription: KvSubscription | undefined;
  /**
   * Whether some pod has KV data. The index's stats walk every pod, so they are re-read at most every
   * HAS_DATA_MS, or at once when something was applied while there was none.
   */
  private hasData = false;
  private hasDataAt = Number.NEGATIVE_INFINITY;
  private appliedAtCheck = 0;

  constructor(
    private readonly options: EppKvOptions,
    private readonly index: KvIndex,
  ) {
    this.tokens =
      options.enabled && options.tokenizers.size > 0
        ? new PromptTokens(
            options.tokenizers,
            // The periodic checks run after the request's destination is sent, not before.
            { cacheBytes: options.cacheBytes, maxChars: options.maxChars, deferCheck: (check) => setImmediate(check) },
            this.counters,
          )
        : undefined;
  }

  /** Where the stream's events go: snapshots reach the block index only with KV events on. */
  readerSink(fleet: Fleet): ReaderSink {
    return this.options.enabled ? new EppReaderSink(fleet, this.index, this.counters) : fleet;
  }

  /** Subscribes to the pool's KV batches (before the replay starts, so nothing falls between it and the live batches). */
  follow(nc: NatsConnection, logger: Logger): void {
    if (!this.options.enabled || this.subscription !== undefined) return;
    this.subscription = new KvSubscription({ nc, pool: this.options.pool, sink: this.index, counters: this.counters, logger });
    this.subscription.start();
    // The pool is in the 'starting' line; this one says what is followed and how prompts are tokenized.
    logger.info({ tokenizers: this.tokens?.describe() ?? [] }, 'following KV block events');
  }

  /** The request's prompt token ids for the block index, or undefined (see the class comment). */
  promptTokenIds(request: PreparedRequest): PromptTokenIds | undefined {
    const tokens = this.tokens;
    if (tokens === undefined || tokens.tokenizerFor(request.model) === undefined) return undefined;
    const now = performance.now();
    const applied = this.counters.batchesApplied + this.counters.snapshotsApplied;
    if (now - this.hasDataAt >= HAS_DATA_MS || (!this.hasData && applied !== this.appliedAtCheck)) {
      this.hasData = this.index.kvIndexStats.pods > 0;
      this.hasDataAt = now;
      this.appliedAtCheck = applied;
    }
    if (!this.hasData) {
      this.counters.tokenizeNoData++;
      return undefined;
    }
    const started = now;
    const result = tokens.tokenize(request.model, request);
    if (result === undefined) return undefined;
    return { ids: result.ids, outcome: result.outcome, seconds: (performance.now() - started) / 1e3 };
  }

  async close(): Promise<void> {
    await this.subscription?.close();
    this.subscription = undefined;
  }
}
