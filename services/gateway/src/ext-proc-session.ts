// One request's ext_proc conversation, as Envoy's filter holds it: the stream, the rules of
// ext-proc-filter.ts, the per-message timers, and what the exchange is told. Replies are judged
// the moment they arrive (Envoy's gRPC callbacks), so a spurious message or a failure lands even
// while the exchange is busy elsewhere (waiting for a model server): `stopped` then settles.
import type { Client } from '@grpc/grpc-js';
import { status as GrpcStatus } from '@grpc/grpc-js';
import type { ProcessingRequest, ProcessingResponse } from '@spillway/protocol';
import type { Logger } from 'pino';
import { EppStream } from './epp-client.js';
import type { StreamEvent } from './epp-client.js';
import { gatewayError } from './errors.js';
import { ExtProcFilterState } from './ext-proc-filter.js';
import type { BodyMode, Direction, FilterRules, ReplyPhase, Verdict } from './ext-proc-filter.js';
import { bodyMessages, requestHeadersMessage, responseHeadersMessage } from './messages.js';
import type { HeaderList } from './messages.js';
import type { DynamicMetadata } from './metadata.js';
import { immediateReply } from './mutations.js';
import type { LocalReply } from './mutations.js';
import type { Stats } from './stats.js';

export type SessionEvent =
  /** A reply the filter was waiting for, to apply. */
  | {
      readonly kind: 'reply';
      readonly direction: Direction;
      readonly phase: ReplyPhase;
      readonly endOfBody: boolean;
      readonly message: ProcessingResponse;
    }
  /** The request ends with this reply (an immediate_response, or failing closed). */
  | { readonly kind: 'stop'; readonly reply: LocalReply }
  /** Processing is complete: go on without the EPP (fail open, a clean close, or nothing more expected). */
  | { readonly kind: 'continue' }
  /** The exchange interrupted its own wait (reading a body failed). */
  | { readonly kind: 'interrupted' };

export interface SessionContext {
  /** The EPP host a new stream goes to (epp-cluster.ts); undefined: none is usable. */
  readonly pickEpp: () => Client | undefined;
  readonly rules: FilterRules;
  /** message_timeout. */
  readonly messageTimeoutMs: number;
  readonly metadata: DynamicMetadata;
  readonly stats: Stats;
  readonly logger: Logger;
}

/** What the EPP's side decided (everything but the exchange's own interruption). */
export type EppEvent = Exclude<SessionEvent, { kind: 'interrupted' }>;

const CONTINUE: EppEvent = { kind: 'continue' };
const INTERRUPTED: SessionEvent = { kind: 'interrupted' };

export class ExtProcSession {
  readonly #ctx: SessionContext;
  readonly #state: ExtProcFilterState;
  readonly #deadline: Date;
  #stream: EppStream | undefined;
  readonly #queue: SessionEvent[] = [];
  #waiter: ((event: SessionEvent) => void) | undefined;
  #interrupted = false;
  readonly #timers: Record<Direction, NodeJS.Timeout | undefined> = { request: undefined, response: undefined };
  #stop: (reply: LocalReply) => void = () => undefined;
  /** Settles when the session ends the request (immediate response, or failing closed). */
  readonly stopped: Promise<LocalReply>;

  constructor(ctx: SessionContext, deadline: Date) {
    this.#ctx = ctx;
    this.#state = new ExtProcFilterState(ctx.rules);
    this.#deadline = deadline;
    this.stopped = new Promise((resolve) => (this.#stop = resolve));
  }

  /** Nothing more goes to or comes from the EPP (Filter::processing_complete_). */
  get complete(): boolean {
    return this.#state.complete;
  }

  sendsHeaders(direction: Direction): boolean {
    return this.#state.sendsHeaders(direction);
  }

  bodyMode(direction: Direction): BodyMode {
    return this.#state.bodyMode(direction);
  }

  /**
   * Opens the stream (Filter::openStream). With no usable EPP host, Envoy's gRPC client fails the
   * stream while it starts: onGrpcError runs before any body reached the filter, so fail-open can
   * still apply. Returns that outcome, or undefined once the stream is open.
   */
  open(): EppEvent | undefined {
    const client = this.#ctx.pickEpp();
    if (client === undefined) {
      const verdict = this.#state.grpcError('UNAVAILABLE: no healthy upstream');
      this.#act(verdict);
      const event = this.#queue.shift();
      return event === undefined || event.kind === 'interrupted' ? CONTINUE : event;
    }
    this.#stream = new EppStream(client, this.#deadline, (event) => this.#onStreamEvent(event));
    return undefined;
  }

  async sendRequestHeaders(headers: HeaderList, endOfStream: boolean): Promise<void> {
    const { armTimer } = this.#state.headersSent('request', endOfStream);
    if (armTimer) this.#armTimer('request');
    await this.#send([requestHeadersMessage(headers, endOfStream, this.#ctx.metadata.forwarded(), this.#ctx.rules.mode)]);
  }

  async sendResponseHeaders(headers: HeaderList, endOfStream: boolean): Promise<void> {
    const { armTimer } = this.#state.headersSent('response', endOfStream);
    if (armTimer) this.#armTimer('response');
    await this.#send([responseHeadersMessage(headers, endOfStream, this.#ctx.metadata.forwarded())]);
  }

  /** Body data arrived from the client or the model server (Filter::onData), sent or not. */
  bodyData(direction: Direction): void {
    this.#state.bodyData(direction);
  }

  /**
   * A body chunk to the EPP (Filter::sendBodyChunk): streamed chunks in messages of at most 62,000
   * bytes, a BUFFERED body in one message (Filter::handleDataBufferedMode sends the whole buffer).
   */
  async sendBody(direction: Direction, chunk: Uint8Array, endOfStream: boolean): Promise<void> {
    if (this.complete) return;
    const whole = this.#state.bodyMode(direction) === 'buffered';
    const { armTimer } = this.#state.bodySent(direction);
    if (armTimer) this.#armTimer(direction);
    const metadata = this.#ctx.metadata.forwarded();
    await this.#send(bodyMessages(direction, chunk, endOfStream, metadata, whole ? Number.POSITIVE_INFINITY : undefined));
  }

  /** Response headers reached the filter: closes the stream when nothing of the response goes to the EPP. */
  responseHeadersArrived(): void {
    if (this.#state.responseHeadersArrived()) this.#closeStream();
  }

  /** The next event, in the order replies arrived; `continue` once processing is complete. */
  next(): Promise<SessionEvent> {
    if (this.#interrupted) return Promise.resolve(INTERRUPTED);
    const queued = this.#queue.shift();
    if (queued !== undefined) return Promise.resolve(queued);
    if (this.complete) return Promise.resolve(CONTINUE);
    return new Promise((resolve) => (this.#waiter = resolve));
  }

  /** Ends the exchange's wait for events (and every later one): something it reads failed. */
  interrupt(): void {
    this.#interrupted = true;
    this.#wake(INTERRUPTED);
  }

  /** A valid reply could not be applied (a rejected header mutation): the error reply to send. */
  mutationFailed(reason: string): LocalReply {
    const verdict = this.#state.mutationFailed(reason);
    this.#act(verdict);
    const event = this.#queue.pop();
    return event?.kind === 'stop' ? event.reply : gatewayError(this.#ctx.rules.statusOnError, 'epp_protocol_error', reason);
  }

  /** The exchange is over, or the client left (Filter::onDestroy): close the stream if still open. */
  close(): void {
    this.#state.finish();
    this.#closeStream();
    this.#wake(CONTINUE);
  }

  async #send(messages: readonly ProcessingRequest[]): Promise<void> {
    if (this.#stream === undefined || this.complete) return;
    await this.#stream.send(messages);
  }

  #onStreamEvent(event: StreamEvent): void {
    if (event.kind === 'message') {
      const { message } = event;
      if (this.#state.takesMetadata(message)) this.#ctx.metadata.receive(message.dynamicMetadata);
      const verdict = this.#state.receive(message);
      if (verdict.kind === 'apply') this.#stopTimer(verdict.direction);
      this.#act(verdict, message);
      return;
    }
    if (event.kind === 'end') {
      this.#act(this.#state.grpcClosed());
      return;
    }
    const detail = `${GrpcStatus[event.code] ?? event.code}: ${event.details}`;
    this.#act(this.#state.grpcError(detail));
  }

  #act(verdict: Verdict, message?: ProcessingResponse): void {
    switch (verdict.kind) {
      case 'ignore':
        this.#ctx.logger.debug({ reason: verdict.reason }, 'ext_proc message ignored');
        return;
      case 'apply':
        if (verdict.closeStream) this.#closeStream();
        this.#push({ kind: 'reply', direction: verdict.direction, phase: verdict.phase, endOfBody: verdict.endOfBody, message: message! });
        if (verdict.closeStream) this.#push(CONTINUE);
        return;
      case 'immediate': {
        this.#closeStream();
        const response = message?.response;
        if (response?.$case !== 'immediateResponse') return;
        const reply = immediateReply(response.value);
        this.#ctx.stats.eppRejection(reply.status);
        this.#finishWith({ kind: 'stop', reply });
        return;
      }
      case 'fail': {
        this.#closeStream();
        this.#ctx.stats.eppError();
        this.#ctx.logger.warn({ reason: verdict.reason, status: verdict.status }, 'ext_proc failed; failing closed');
        const code = verdict.status === 504 ? 'epp_timeout' : 'epp_error';
        this.#finishWith({ kind: 'stop', reply: gatewayError(verdict.status, code, `endpoint picker: ${verdict.reason}`) });
        return;
      }
      case 'abandon':
        this.#closeStream();
        this.#ctx.stats.eppFailOpen();
        this.#ctx.logger.warn({ reason: verdict.reason }, 'ext_proc abandoned; the request goes on without the endpoint picker');
        this.#finishWith(CONTINUE);
        return;
    }
  }

  #finishWith(event: SessionEvent): void {
    this.#clearTimers();
    if (event.kind === 'stop') this.#stop(event.reply);
    this.#push(event);
  }

  #push(event: SessionEvent): void {
    if (!this.#wake(event)) this.#queue.push(event);
  }

  #wake(event: SessionEvent): boolean {
    const waiter = this.#waiter;
    if (waiter === undefined) return false;
    this.#waiter = undefined;
    waiter(event);
    return true;
  }

  /** ProcessorState::onStartProcessorCall: (re)arms the direction's timer with message_timeout. */
  #armTimer(direction: Direction): void {
    clearTimeout(this.#timers[direction]);
    this.#timers[direction] = setTimeout(() => {
      this.#timers[direction] = undefined;
      this.#ctx.stats.messageTimeout();
      this.#act(this.#state.messageTimeout());
    }, this.#ctx.messageTimeoutMs);
  }

  #stopTimer(direction: Direction): void {
    clearTimeout(this.#timers[direction]);
    this.#timers[direction] = undefined;
  }

  #clearTimers(): void {
    this.#stopTimer('request');
    this.#stopTimer('response');
  }

  #closeStream(): void {
    this.#clearTimers();
    this.#stream?.close();
  }
}
