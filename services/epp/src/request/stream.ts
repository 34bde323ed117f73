import { status as GrpcStatus, type ServerDuplexStream } from '@grpc/grpc-js';
import {
  BodyAccumulator,
  decodePhase,
  immediateResponse,
  prepareRequest,
  readBodyModes,
  readServedEndpoint,
  readSubsetHint,
  requestHeadersResponse,
  requestTrailersResponse,
  responseBodyResponse,
  responseHeadersResponse,
  responseTrailersResponse,
  routedResponses,
  type BodyModes,
  type ErrorStatus,
  type PreparedRequest,
  type ProcessingRequest,
  type ProcessingResponse,
  type RequestHeaders,
  type RoutedMode,
} from '@spillway/protocol';
import type { SubsetHint } from '@spillway/events';
import type { Decision } from '@spillway/scheduler';
import type { RequestControl } from './control.js';
import type { Deadline } from './deadlines.js';
import type { RequestRecord } from './observer.js';

type Call = ServerDuplexStream<ProcessingRequest, ProcessingResponse>;

/**
 * One ext_proc stream = one HTTP request (docs/protocol.md), as an explicit state machine:
 *
 *   awaiting-headers -> awaiting-body -> picked -> (response phases) -> done
 *
 * The request path, end to end: headers are read; body chunks are collected until end of stream
 * (or the headers say there is no body); then the body is parsed, the scheduler picks, and the
 * destination goes back with the body. The response phases pass through, reporting the endpoint
 * the gateway actually served. However the stream ends, the request's in-flight charge is released.
 *
 * Each state carries what exists in it and nothing else: the body only while it is collected, the
 * decision only once there is one. The subset hint lives until the pick (the latest one before it
 * wins); after the pick it is neither read nor kept (a hint can be megabytes, a response minutes).
 */
type State = AwaitingHeaders | AwaitingBody | Picked | Done;

interface AwaitingHeaders {
  readonly kind: 'awaiting-headers';
  subset: SubsetHint | undefined;
}

/** What the request headers settled: all a pick needs besides the body. */
interface RequestHead {
  readonly headers: RequestHeaders;
  readonly modes: BodyModes;
  subset: SubsetHint | undefined;
}

interface AwaitingBody extends RequestHead {
  readonly kind: 'awaiting-body';
  readonly mode: 'full-duplex' | 'buffered';
  readonly body: BodyAccumulator;
  /** Bytes of this body taken from the EPP-wide body budget. */
  reservedBytes: number;
}

interface Picked {
  readonly kind: 'picked';
  readonly decision: Decision;
  /** The routed request's record, until the stream ends. */
  readonly record: RequestRecord;
  /** Response body chunks come back in FULL_DUPLEX_STREAMED mode. */
  readonly responseFullDuplex: boolean;
  /** The served endpoint the gateway reported (canonical), once seen. */
  served: string | undefined;
  failureSeen: boolean;
}

interface Done {
  readonly kind: 'done';
}

const DONE: Done = { kind: 'done' };

export function handleStream(control: RequestControl, call: Call): void {
  new ExtProcStream(control, call);
}

// The stream is its own request deadline (at + expire), which saves an object and a closure per
// stream. The deadline is registered exactly while the state is awaiting-headers or awaiting-body.
class ExtProcStream implements Deadline {
  /** Deadline: when the request phase must be complete. */
  readonly at: number;
  private state: State = { kind: 'awaiting-headers', subset: undefined };
  /** When the stream began (ms): a request's duration runs from here to the end of the stream. */
  private readonly startedAt = Date.now();
  /** performance.now() at the first request-body chunk (0 before it): the receive phase starts here. */
  private bodyStartedAt = 0;

  constructor(
    private readonly control: RequestControl,
    private readonly call: Call,
  ) {
    call.on('data', (message: ProcessingRequest) => this.onMessage(message));
    call.on('end', () => this.finish(true));
    // One listener object for the three ways a stream goes away (finish is idempotent).
    const gone = (): void => this.finish(false);
    call.on('cancelled', gone);
    call.on('error', gone);
    call.on('close', gone);
    this.at = this.startedAt + control.limits.requestTimeoutMs;
    control.deadlines.add(this);
  }

  /** Deadline: the sweeper found the request phase still open at `at`. */
  expire(): void {
    if (this.state.kind !== 'awaiting-headers' && this.state.kind !== 'awaiting-body') return;
    const timeoutMs = this.control.limits.requestTimeoutMs;
    this.control.observer.requestTimedOut(timeoutMs);
    this.fail(GrpcStatus.DEADLINE_EXCEEDED, `request not complete within ${timeoutMs} ms`);
  }

  private onMessage(message: ProcessingRequest): void {
    const state = this.state;
    if (state.kind === 'done') return;
    // Envoy attaches the forwarded namespaces to every message; the latest hint before the pick wins.
    if (state.kind !== 'picked') {
      const hint = readSubsetHint(message.metadataContext);
      if (hint !== undefined) state.subset = hint;
    }
    const phase = decodePhase(message);
    switch (phase.kind) {
      case 'requestHeaders':
        if (state.kind !== 'awaiting-headers') return this.protocolError('a second request_headers message');
        return this.onRequestHeaders(state, phase.headers, readBodyModes(message.protocolConfig));
      case 'requestBody':
        if (state.kind !== 'awaiting-body') return this.protocolError('request_body outside the request body phase');
        return this.onRequestBody(state, phase.chunk, phase.endOfStream);
      case 'requestTrailers':
        if (state.kind === 'awaiting-body') return this.completeRequest(state, true);
        if (state.kind === 'picked') return this.write(requestTrailersResponse());
        return this.protocolError('request_trailers before request_headers');
      case 'responseHeaders':
      case 'responseBody':
      case 'responseTrailers':
        if (state.kind !== 'picked') return this.protocolError(`${phase.kind} before the request was routed`);
        this.noteServed(state, message);
        if (phase.kind === 'responseHeaders') {
          this.noteStatus(state, phase.headers.status);
          return this.write(responseHeadersResponse());
        }
        if (phase.kind === 'responseTrailers') return this.write(responseTrailersResponse());
        state.record.responseBody(phase.chunk);
        this.write(responseBodyResponse(phase.chunk, phase.endOfStream, state.responseFullDuplex));
        return;
      case 'empty':
        return this.protocolError('a ProcessingRequest with no phase set');
    }
  }

  private onRequestHeaders(state: AwaitingHeaders, headers: RequestHeaders, modes: BodyModes): void {
    const mode = modes.request;
    if (headers.endOfStream || mode === 'none') return this.route({ headers, modes, subset: state.subset }, 'header-only', undefined, 0);
    if (mode !== 'full-duplex' && mode !== 'buffered') {
      return this.reject(
        500,
        `request body mode ${mode ?? 'unknown'} is not supported; use FULL_DUPLEX_STREAMED or BUFFERED`,
        'unsupported_body_mode',
      );
    }
    const body = new BodyAccumulator(this.control.limits.maxBodyBytes);
    this.state = { kind: 'awaiting-body', headers, modes, subset: state.subset, mode, body, reservedBytes: 0 };
    // BUFFERED: Envoy waits for this reply before it sends the body; the decision rides on the body reply.
    if (mode === 'buffered') this.write(requestHeadersResponse({ removeHeaders: headers.destinationHeaders }));
  }

  private onRequestBody(state: AwaitingBody, chunk: Uint8Array, endOfStream: boolean): void {
    if (this.bodyStartedAt === 0) this.bodyStartedAt = performance.now();
    if (!state.body.push(chunk)) {
      return this.reject(413, `request body exceeds ${state.body.limit} bytes`, 'request_too_large');
    }
    if (!this.control.bodies.reserve(chunk.length)) {
      return this.reject(503, 'the endpoint picker holds too many request bodies at once; retry', 'body_budget_exceeded');
    }
    state.reservedBytes += chunk.length;
    if (endOfStream) this.completeRequest(state, false);
  }

  private completeRequest(state: AwaitingBody, endedWithTrailers: boolean): void {
    const bodyEndedAt = performance.now();
    if (this.bodyStartedAt !== 0) this.control.observer.phase('receive', (bodyEndedAt - this.bodyStartedAt) / 1e3);
    const body = state.body.take();
    // The stream lives as long as the response (minutes for a long generation): the body's chunks
    // go with this state, and its bytes back to the EPP-wide budget now rather than at the end.
    this.control.bodies.release(state.reservedBytes);
    state.reservedBytes = 0;
    const prepared = prepareRequest(body, state.headers, this.control.rewriter, Math.random);
    this.control.observer.phase('parse', (performance.now() - bodyEndedAt) / 1e3);
    if (!prepared.ok) return this.reject(prepared.error.status, prepared.error.message, prepared.error.code);
    this.route(state, state.mode, prepared.request, body.length, endedWithTrailers);
    if (this.state.kind === 'picked') this.control.observer.phase('decide', (performance.now() - bodyEndedAt) / 1e3);
  }

  /**
   * Pick, then answer with the destination (or the error the decision calls for). `requestBytes`
   * is the body as the client sent it.
   */
  private route(
    head: RequestHead,
    mode: RoutedMode,
    request: PreparedRequest | undefined,
    requestBytes: number,
    endedWithTrailers = false,
  ): void {
    const headers = head.headers;
    const decision = this.control.pick(
      {
        model: request?.model ?? '',
        prompt: request?.prompt,
        objective: headers.objective,
        subset: head.subset,
        requestId: headers.requestId,
      },
      request,
    );
    const pickedAt = performance.now();
    if (decision.status !== 'routed') {
      const message =
        decision.status === 429
          ? 'every eligible endpoint is saturated and the request is sheddable'
          : `no endpoint available (${decision.rule})`;
      return this.reject(decision.status, message, decision.status === 429 ? 'system_saturated' : decision.rule, request);
    }
    this.control.deadlines.remove(this);
    const record = this.control.commit(decision, request, requestBytes, this.startedAt);
    this.state = {
      kind: 'picked',
      decision,
      record,
      responseFullDuplex: head.modes.response === 'full-duplex',
      served: undefined,
      failureSeen: false,
    };
    for (const response of routedResponses({
      mode,
      destination: decision.destination,
      body: request?.body,
      bodyChanged: request?.bodyChanged,
      removeHeaders: headers.destinationHeaders,
      endedWithTrailers,
    })) {
      this.write(response);
    }
    this.control.observer.phase('answer', (performance.now() - pickedAt) / 1e3);
  }

  private noteServed(state: Picked, message: ProcessingRequest): void {
    if (state.served !== undefined) return;
    const served = readServedEndpoint(message.metadataContext, state.decision.entries[0]?.address);
    if (served === undefined) return;
    state.served = served;
    this.control.reportServed(state.decision, served);
  }

  /**
   * A 5xx response status fails the primary (passive health) when the primary is what answered:
   * the served endpoint is the primary, or the gateway named none. Envoy sends the same response
   * headers for its own local reply when it could not connect (503, served = the last host tried),
   * so a connection failure lands here too. A served fallback already penalised the primary.
   */
  private noteStatus(state: Picked, status: number | undefined): void {
    if (status !== undefined && status >= 400 && !state.failureSeen) state.record.modelServerError();
    if (status === undefined || status < 500 || status > 599 || state.failureSeen) return;
    state.failureSeen = true;
    if (state.served !== undefined && state.served !== state.decision.entries[0]?.address) return;
    this.control.reportFailed(state.decision, status);
  }

  /** An HTTP error answer; `request` when the body was understood. */
  private reject(status: ErrorStatus, message: string, code: string, request?: PreparedRequest): void {
    this.control.reject(status, code, request);
    this.write(immediateResponse(status, message, { code }));
    this.endStream();
  }

  /** The client broke the ext_proc conversation itself: end the stream with a gRPC error, not an HTTP one. */
  private protocolError(message: string): void {
    this.control.observer.protocolViolation(message);
    this.fail(GrpcStatus.INVALID_ARGUMENT, message);
  }

  /** Ends the stream with a gRPC error status. */
  private fail(code: GrpcStatus, details: string): void {
    const state = this.state;
    this.state = DONE;
    this.call.emit('error', { code, details });
    this.leave(state);
  }

  /**
   * Writes one reply. When the gateway reads replies slower than it sends messages (each response
   * body chunk comes back as a reply), the stream stops reading until the replies drain, so HTTP/2
   * flow control holds the gateway back instead of the EPP buffering its body without limit.
   */
  private write(response: ProcessingResponse): void {
    if (this.call.destroyed || !this.call.writable) return;
    if (this.call.write(response) || this.call.isPaused()) return;
    this.call.pause();
    this.call.once('drain', () => this.call.resume());
  }

  private endStream(): void {
    const state = this.state;
    this.state = DONE;
    this.leave(state);
    if (!this.call.destroyed && this.call.writable) this.call.end();
  }

  /** However the stream ends, release what the request holds; idempotent. */
  private finish(clientEnded: boolean): void {
    const state = this.state;
    if (state.kind === 'done') return;
    this.state = DONE;
    this.leave(state);
    if (clientEnded && !this.call.destroyed && this.call.writable) this.call.end();
  }

  /** Gives back what `state`, which the stream has just left for done, holds. */
  private leave(state: State): void {
    switch (state.kind) {
      case 'awaiting-headers':
        this.control.deadlines.remove(this);
        return;
      case 'awaiting-body':
        this.control.deadlines.remove(this);
        this.control.bodies.release(state.reservedBytes);
        return;
      case 'picked':
        this.control.release(state.decision, state.record);
        return;
      case 'done':
        return;
    }
  }
}
