import type { ErrorStatus, PreparedRequest } from '@spillway/protocol';
import type { ChargeListener, Decision, PickRequest } from '@spillway/scheduler';

/** Where a request's token ids came from: a cached prompt prefix and the tail tokenized, or the whole prompt. */
export type TokenizeOutcome = 'prefix-cached' | 'full';

/**
 * How a request left flow control's queue: dispatched (room freed), expired (`maxHoldMs`), evicted
 * (a higher band needed its place), refused (the queue was full when it came), cancelled (its
 * client or gateway went away), unroutable (nothing eligible when its turn came), shutdown.
 */
export type FlowOutcome = 'dispatched' | 'expired' | 'evicted' | 'refused' | 'cancelled' | 'unroutable' | 'shutdown';

/**
 * Phases of the request path the stream times itself (`spillway_request_phase_seconds`,
 * docs/metrics.md): `receive`, its first request-body chunk to the end of its body; `parse`, the
 * body to a request; `answer`, the pick's end to the destination and body written; `decide`, the
 * end of the body to the destination written (parse, tokenization, pick and answer). The
 * tokenization and the pick are timed by the request control (`tokenized`, `picked`).
 */
export type RequestPhase = 'receive' | 'parse' | 'answer' | 'decide';

/**
 * One routed request's own record, from its commit to its end: its completion when the EPP sees
 * one, else the end of its charge (`chargeEnded`: by samples, at its bound), else the end of its
 * stream when no response began.
 */
export interface RequestRecord extends ChargeListener {
  /** A response body chunk passed through the EPP (only when the gateway streams response bodies). */
  responseBody(chunk: Uint8Array): void;
  /** The model server answered with an error status. */
  modelServerError(): void;
  /** The request ended at `now` (ms, the request control's clock). Only the first end counts. */
  finish(now: number): void;
}

/**
 * Everything the request path tells the rest of the EPP, and the only way it tells it: metrics,
 * the periodic summary, the decision log, the spill matrix and the debug lines are all built from
 * these calls by the implementation (telemetry/request-telemetry.ts). The request control holds no
 * counter and no logger. Called on the request path: implementations keep each call cheap.
 */
export interface RequestObserver {
  /** A phase of a request took `seconds` (`answer` and `decide`: routed requests only). */
  phase(phase: RequestPhase, seconds: number): void;
  /** A prompt was tokenized for the precise block index, in `seconds`. */
  tokenized(outcome: TokenizeOutcome, seconds: number): void;
  /** The scheduler answered `request` (routed or not) after `seconds`; `prepared` when the body was understood. */
  picked(decision: Decision, request: PickRequest, prepared: PreparedRequest | undefined, seconds: number): void;
  /**
   * The destination is being sent at `now`: the request's record starts. `requestBytes` is the body
   * as the client sent it; `startedAt` when its stream began (ms).
   */
  committed(decision: Decision, prepared: PreparedRequest | undefined, requestBytes: number, startedAt: number, now: number): RequestRecord;
  /** The gateway served the request from `served`, a fallback: the primary was penalised. */
  servedByFallback(decision: Decision, served: string): void;
  /** The primary answered `status` (5xx) or could not be reached: it was penalised. */
  primaryFailed(decision: Decision, status: number): void;
  /** The EPP answered with an error (400, 413, 429, 503, ...); `prepared` when the body was understood. */
  rejected(status: ErrorStatus, code: string, prepared: PreparedRequest | undefined): void;
  /** The client broke the ext_proc conversation; the stream ends with a gRPC error. */
  protocolViolation(reason: string): void;
  /** The request phase was not complete within `timeoutMs`; the stream ends. */
  requestTimedOut(timeoutMs: number): void;
  /** Flow control holds a request of this band and fairness id (flow control's queue). */
  flowHeld(priority: number, flow: string): void;
  /** A request left flow control's queue (or was refused a place: `refused`, waited 0) after `waitedMs`. */
  flowLeft(priority: number, flow: string, outcome: FlowOutcome, waitedMs: number): void;
}
