import type { ErrorStatus, ModelRewriter, PreparedRequest } from '@spillway/protocol';
import { flowControlConfigSchema, type Decision, type FlowControlConfig, type PickRequest, type Scheduler } from '@spillway/scheduler';
import { BodyBudget } from './body-budget.js';
import { DeadlineSweeper } from './deadlines.js';
import { FlowControl } from './flow-control.js';
import type { RequestObserver, RequestRecord, TokenizeOutcome } from './observer.js';

/** What the request control needs of the scheduler: a pick, and the pick's life after it. */
export type Picker = Pick<Scheduler, 'pick' | 'commit' | 'reportServed' | 'reportFailed' | 'start' | 'release'> &
  Partial<Pick<Scheduler, 'nextPenaltyEndAt'>>;

/** A prompt's token ids for the precise block index, and how long they took. */
export interface TokenizedPrompt {
  readonly ids: Uint32Array;
  readonly outcome: TokenizeOutcome;
  readonly seconds: number;
}

/** Prompts to token ids (kv/epp-kv.ts); undefined when the request cannot use them. */
export interface PromptTokenSource {
  promptTokenIds(request: PreparedRequest): TokenizedPrompt | undefined;
}

export interface RequestLimits {
  /** Largest request body accepted (413 above). */
  readonly maxBodyBytes: number;
  /** A request whose body is not complete by then ends the stream. */
  readonly requestTimeoutMs: number;
  /** Request-body bytes all open streams may hold together (503 above). */
  readonly maxBufferedBodyBytes: number;
}

export interface RequestControlParts {
  readonly picker: Picker;
  readonly tokens: PromptTokenSource;
  readonly observer: RequestObserver;
  readonly limits: RequestLimits;
  readonly rewriter: ModelRewriter | undefined;
  readonly now?: () => number;
  /** Flow control's settings (the default config's when absent). */
  readonly flowControl?: FlowControlConfig;
  /** How long a sample-triggered dispatch pass waits (active-active; FlowControlParts.dispatchDelayMs). */
  readonly dispatchDelayMs?: () => number;
}

/**
 * What every ext_proc stream shares: the pick and its life after it (commit, report, release), the
 * limits, the deadlines and the body budget. The stream handler calls only this, so the request
 * path reads as protocol -> request control -> scheduler; what happened is told to the observer.
 */
export class RequestControl {
  readonly observer: RequestObserver;
  readonly limits: RequestLimits;
  readonly deadlines: DeadlineSweeper;
  /** Request-body bytes held by all open streams (--max-buffered-body-bytes). */
  readonly bodies: BodyBudget;
  /** Flow control's queue of held requests and its dispatch (request/flow-control.ts). */
  readonly flow: FlowControl;
  /** Replaced by a config reload; read once per request. */
  rewriter: ModelRewriter | undefined;
  private readonly picker: Picker;
  private readonly tokens: PromptTokenSource;
  private readonly now: () => number;

  constructor(parts: RequestControlParts) {
    this.picker = parts.picker;
    this.tokens = parts.tokens;
    this.observer = parts.observer;
    this.limits = parts.limits;
    this.rewriter = parts.rewriter;
    this.now = parts.now ?? Date.now;
    this.deadlines = new DeadlineSweeper(this.now);
    this.bodies = new BodyBudget(parts.limits.maxBufferedBodyBytes);
    const picker = this.picker;
    this.flow = new FlowControl({
      pick: (request, prepared) => this.pick(request, prepared),
      config: parts.flowControl ?? flowControlConfigSchema.parse({}),
      observer: parts.observer,
      now: this.now,
      dispatchDelayMs: parts.dispatchDelayMs,
      nextPenaltyEndAt: picker.nextPenaltyEndAt === undefined ? undefined : (now) => picker.nextPenaltyEndAt?.(now),
    });
  }

  pick(request: PickRequest, prepared: PreparedRequest | undefined): Decision {
    // Token ids for the precise block index, when the request's model has a tokenizer and pods report KV blocks.
    const tokenized = prepared === undefined ? undefined : this.tokens.promptTokenIds(prepared);
    if (tokenized !== undefined) {
      this.observer.tokenized(tokenized.outcome, tokenized.seconds);
      request = { ...request, promptTokenIds: tokenized.ids };
    }
    // performance.now() (a double, sub-microsecond) rather than hrtime.bigint(): no BigInt per reading.
    const started = performance.now();
    const decision = this.picker.pick(request, this.now());
    this.observer.picked(decision, request, prepared, (performance.now() - started) / 1e3);
    return decision;
  }

  /**
   * The destination is being sent: charge the pick and start the request's record. `requestBytes`
   * is the body as the client sent it; `startedAt` when its stream began (ms, this clock).
   */
  commit(decision: Decision, request: PreparedRequest | undefined, requestBytes: number, startedAt: number): RequestRecord {
    const now = this.now();
    this.picker.commit(decision, now);
    return this.observer.committed(decision, request, requestBytes, startedAt, now);
  }

  reportServed(decision: Decision, served: string): void {
    if (this.picker.reportServed(decision, served, this.now()) === 'fallback') this.observer.servedByFallback(decision, served);
  }

  /**
   * The primary answered 5xx, or the gateway could not reach it (Envoy then reports its own 503):
   * it is penalised like a primary the gateway did not serve.
   */
  reportFailed(decision: Decision, status: number): void {
    if (this.picker.reportFailed(decision, this.now())) this.observer.primaryFailed(decision, status);
  }

  /**
   * The response began (its headers, with a success status). When its body does not come through
   * the EPP (`completionSeen` false), nothing will say when it ends: the request stays charged to
   * the endpoint that served it until the samples or its bound end the charge, and the record ends
   * with the charge.
   */
  started(decision: Decision, record: RequestRecord, completionSeen: boolean): void {
    this.picker.start(decision, this.now(), completionSeen ? undefined : record);
  }

  /**
   * The request is over: its response completed (seen here), or its stream ended before the
   * response began (client gone, gateway error, an error status), or with it (its body came here).
   * The charge is released and the record finished; held requests may take its room.
   */
  ended(decision: Decision, record: RequestRecord): void {
    const now = this.now();
    this.picker.release(decision, now);
    record.finish(now);
    this.flow.onRoom('completion');
  }

  /** An error answer (400, 413, 429, 503, ...); `request` when the body was understood. */
  reject(status: ErrorStatus, code: string, request: PreparedRequest | undefined): void {
    this.observer.rejected(status, code, request);
  }

  close(): void {
    this.flow.close();
    this.deadlines.close();
  }
}
