import { status as GrpcStatus, type ServerDuplexStream } from '@grpc/grpc-js';
import {
  BodyAccumulator,
  decodePhase,
  immediateResponse,
  outputLimitOf,
  prepareRequest,
  readBodyModes,
  readGatewayZone,
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
import type { Decision, PickRequest } from '@spillway/scheduler';
import type { RequestControl } from './control.js';
import type { HeldStream, HeldTicket } from './flow-control.js';
import type { Deadline } from './deadlines.js';
import type { RequestRecord } from './observer.js';

type Call = ServerDuplexStream<ProcessingRequest, ProcessingResponse>;

/**
 * One ext_proc stream = one HTTP request (docs/protocol.md), as an explicit state machine:
 *
 *   awaiting-headers -> awaiting-body -> [held ->] picked -> started -> completed -> done
 *
 * The request path, end to end: headers are read; body chunks are collected until end of stream
 * (or the headers say there is no body); then the body is parsed, the scheduler picks, and the
 * destination goes back with the body (picked). The response phases pass through, reporting the
 * endpoint the gateway actually served; response headers with a success status start the request
 * (started), and its end, when the EPP sees it, completes it (completed: the response body's last
 * chunk or trailers, when the gateway streams them here; or the headers themselves for a request
 * that does not stream, which a model server answers only when it is done).
 *
 * With flow control on, a request no endpoint has room for is *held* before it is picked
 * (request/flow-control.ts): its stream stays open — Envoy waits, full duplex has no message
 * timeout — until the queue dispatches it (a fresh pick, then picked as any other) or answers it
 * (429/503 `queue_timeout`, `queue_full`); a stream that goes away while held leaves the queue at once.
 *
 * The stream's end is not the request's (docs/picking.md, "A request's charge"): behind Envoy ≥
 * 1.37 with the shipped config it comes right after the response headers, while a streamed
 * generation runs on. So at the stream's end a request still `picked` (no response began: client
 * gone, gateway error, an error status) is released; one `started` whose response body comes here
 * is released too (its stream lasts as long as its response); one `started` whose body does not
 * come here stays charged to the endpoint that served it, and its record is handed to the charge,
 * which ends when the endpoint's samples account for it or at its bound.
 *
 * Each state carries what exists in it and nothing else: the body only while it is collected, the
 * decision only once there is one. The subset hint and the gateway's zone live until the pick (the
 * latest before it win); after the pick they are neither read nor kept (a hint can be megabytes, a
 * response minutes).
 */
type State = AwaitingHeaders | AwaitingBody | HeldState | Picked | Started | Completed | Done;

interface AwaitingHeaders {
  readonly kind: 'awaiting-headers';
  subset: SubsetHint | undefined;
  /** `x-spillway-gateway-zone` (null: not a zone name). */
  zone: string | null | undefined;
}

/** What the request headers settled: all a pick needs besides the body. */
interface RequestHead {
  readonly headers: RequestHeaders;
  readonly modes: BodyModes;
  subset: SubsetHint | undefined;
  zone: string | null | undefined;
}

interface AwaitingBody extends RequestHead {
  readonly kind: 'awaiting-body';
  readonly mode: 'full-duplex' | 'buffered';
  readonly body: BodyAccumulator;
  /** Bytes of this body taken from the EPP-wide body budget. */
  reservedBytes: number;
}

/** A request ready for its destination: what was read, and how the answer goes back. */
interface Routable extends RequestHead {
  readonly mode: RoutedMode;
  /** The parsed body; undefined for a header-only request. */
  readonly request: PreparedRequest | undefined;
  /** The body as the client sent it. */
  readonly requestBytes: number;
  readonly endedWithTrailers: boolean;
}

/** Waiting in flow control's queue: all a pick and the answer need, and its place in the queue. */
interface HeldState extends Routable {
  readonly kind: 'held';
  ticket: HeldTicket | undefined;
}

/** What holding a request costs beyond its body: the stream, its state, its headers (an estimate). */
const HELD_OVERHEAD_BYTES = 1024;
/** A subset hint entry, kept while held. */
const SUBSET_ENTRY_BYTES = 32;

/** A routed request, from its destination on: what its response phases need. */
interface Routed {
  readonly decision: Decision;
  /** The routed request's record, until its end (the stream's, or its charge's). */
  readonly record: RequestRecord;
  /** The gateway streams the response body here (FULL_DUPLEX_STREAMED): the response's end is seen. */
  readonly responseFullDuplex: boolean;
  /** The body asked for a streamed response (`"stream": true`): its headers come before its first token. */
  readonly streamed: boolean;
  /** The served endpoint the gateway reported (canonical), once seen. */
  served: string | undefined;
  failureSeen: boolean;
}

/** The destination is sent; no response has begun (or it began with an error status). */
interface Picked extends Routed {
  readonly kind: 'picked';
  /** Response headers came, with an error status: the request is over when its stream is. */
  answered: boolean;
}

/** Its response began (headers with a success status): it runs, charged to the endpoint that served it. */
interface Started extends Routed {
  readonly kind: 'started';
}

/** Its response's end was seen and its charge released; the stream may still carry trailers. */
interface Completed {
  readonly kind: 'completed';
  readonly responseFullDuplex: boolean;
}

interface Done {
  readonly kind: 'done';
}

const COMPLETED_STREAMING: Completed = { kind: 'completed', responseFullDuplex: true };
const COMPLETED: Completed = { kind: 'completed', responseFullDuplex: false };
const DONE: Done = { kind: 'done' };

/** What the scheduler is asked for a request (the same at its first pick and at a held request's dispatch). */
function pickRequestOf(head: RequestHead, request: PreparedRequest | undefined): PickRequest {
  const headers = head.headers;
  return {
    model: request?.model ?? '',
    prompt: request?.prompt,
    objective: headers.objective,
    subset: head.subset,
    zone: head.zone,
    requestId: headers.requestId,
    maxTokens: request === undefined ? undefined : outputLimitOf(request.api, request.json),
  };
}

export function handleStream(control: RequestControl, call: Call): void {
  new ExtProcStream(control, call);
}

// The stream is its own request deadline (at + expire), which saves an object and a closure per
// stream. The deadline is registered exactly while the state is awaiting-headers or awaiting-body.
class ExtProcStream implements Deadline, HeldStream {
  /** Deadline: when the request phase must be complete. */
  readonly at: number;
  private state: State = { kind: 'awaiting-headers', subset: undefined, zone: undefined };
  /** When the stream began (ms): a request's duration runs from here to its end (docs/metrics.md). */
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
    // Envoy attaches the forwarded namespaces to every message; the latest hint and zone before the pick win.
    if (state.kind === 'awaiting-headers' || state.kind === 'awaiting-body' || state.kind === 'held') {
      const hint = readSubsetHint(message.metadataContext);
      if (hint !== undefined) state.subset = hint;
      const zone = readGatewayZone(message.metadataContext);
      if (zone !== undefined) state.zone = zone;
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
        if (state.kind === 'awaiting-headers') return this.protocolError('request_trailers before request_headers');
        return this.write(requestTrailersResponse());
      case 'responseHeaders':
      case 'responseBody':
      case 'responseTrailers':
        if (state.kind === 'awaiting-headers' || state.kind === 'awaiting-body' || state.kind === 'held')
          return this.protocolError(`${phase.kind} before the request was routed`);
        if (phase.kind === 'responseHeaders') {
          if (state.kind !== 'completed') this.onResponseHeaders(state, message, phase.headers.status);
          return this.write(responseHeadersResponse());
        }
        if (phase.kind === 'responseTrailers') {
          // Trailers come at the response's end.
          if (state.kind !== 'completed') this.complete(state);
          return this.write(responseTrailersResponse());
        }
        return this.onResponseBody(state, message, phase.chunk, phase.endOfStream);
      case 'empty':
        return this.protocolError('a ProcessingRequest with no phase set');
    }
  }

  private onRequestHeaders(state: AwaitingHeaders, headers: RequestHeaders, modes: BodyModes): void {
    const mode = modes.request;
    if (headers.endOfStream || mode === 'none')
      return this.route({ headers, modes, subset: state.subset, zone: state.zone }, 'header-only', undefined, 0);
    if (mode !== 'full-duplex' && mode !== 'buffered') {
      return this.reject(
        500,
        `request body mode ${mode ?? 'unknown'} is not supported; use FULL_DUPLEX_STREAMED or BUFFERED`,
        'unsupported_body_mode',
      );
    }
    const body = new BodyAccumulator(this.control.limits.maxBodyBytes);
    this.state = { kind: 'awaiting-body', headers, modes, subset: state.subset, zone: state.zone, mode, body, reservedBytes: 0 };
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
    // A held request's decide phase is not timed: its destination waits for room.
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
    const decision = this.control.pick(pickRequestOf(head, request), request);
    if (decision.status !== 'routed') return this.rejectDecision(decision, request);
    const routable: Routable = {
      headers: head.headers,
      modes: head.modes,
      subset: head.subset,
      zone: head.zone,
      mode,
      request,
      requestBytes,
      endedWithTrailers,
    };
    const flow = this.control.flow;
    if (!flow.shouldHold(decision)) return this.send(routable, decision);
    // Held: Envoy waits on the open stream, and maxHoldMs bounds the wait instead of the request deadline.
    const held: HeldState = { kind: 'held', ...routable, ticket: undefined };
    this.control.deadlines.remove(this);
    this.state = held;
    const subsetBytes = (head.subset?.length ?? 0) * SUBSET_ENTRY_BYTES;
    const bytes = requestBytes + HELD_OVERHEAD_BYTES + subsetBytes;
    held.ticket = flow.hold(this, { priority: decision.priority, flow: head.headers.fairnessId, bytes });
    if (held.ticket === undefined && this.state === held) {
      this.reject(decision.sheddable ? 429 : 503, 'the flow control queue is full; retry', 'queue_full', request);
    }
  }

  /** HeldStream: the pick made again at dispatch, with the latest subset hint and zone. */
  pickRequest(): PickRequest {
    const state = this.state;
    if (state.kind !== 'held') throw new Error(`pickRequest in state ${state.kind}`);
    return pickRequestOf(state, state.request);
  }

  /** HeldStream: the body as parsed (for the pick's tokens and the observer). */
  get prepared(): PreparedRequest | undefined {
    return this.state.kind === 'held' ? this.state.request : undefined;
  }

  /** HeldStream: room freed and the pick found it; the destination goes now. */
  dispatch(decision: Decision): void {
    const state = this.state;
    if (state.kind !== 'held') return;
    this.send(state, decision);
  }

  /** HeldStream: expired, evicted, or nothing eligible when its turn came. */
  refuse(status: 429 | 503, code: string, message: string): void {
    const state = this.state;
    if (state.kind !== 'held') return;
    // Out of the queue already: nothing to leave.
    state.ticket = undefined;
    this.reject(status, message, code, state.request);
  }

  private rejectDecision(decision: Decision, request: PreparedRequest | undefined): void {
    const status = decision.status === 429 ? 429 : 503;
    const message =
      status === 429 ? 'every eligible endpoint is saturated and the request is sheddable' : `no endpoint available (${decision.rule})`;
    this.reject(status, message, status === 429 ? 'system_saturated' : decision.rule, request);
  }

  /** Answers with the destination: the pick is committed and the request's record starts (picked). */
  private send(routable: Routable, decision: Decision): void {
    const pickedAt = performance.now();
    const { headers, mode, request, requestBytes, endedWithTrailers } = routable;
    this.control.deadlines.remove(this);
    const record = this.control.commit(decision, request, requestBytes, this.startedAt);
    this.state = {
      kind: 'picked',
      decision,
      record,
      responseFullDuplex: routable.modes.response === 'full-duplex',
      streamed: request?.stream === true,
      served: undefined,
      failureSeen: false,
      answered: false,
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

  /**
   * The response headers: the endpoint that served, the status for passive health, and the
   * request's life. A success status starts it, or completes it when it does not stream and its
   * body does not come here (the model server sent its headers with the whole response).
   */
  private onResponseHeaders(state: Picked | Started, message: ProcessingRequest, status: number | undefined): void {
    this.noteServed(state, message);
    this.noteStatus(state, status);
    if (state.kind !== 'picked' || state.answered) return;
    if (status !== undefined && status >= 400) {
      state.answered = true;
      return;
    }
    if (!state.streamed && !state.responseFullDuplex) return this.complete(state);
    this.start(state);
  }

  /** A response body chunk, echoed; its last one completes the request. */
  private onResponseBody(state: Picked | Started | Completed, message: ProcessingRequest, chunk: Uint8Array, endOfStream: boolean): void {
    // A body with no headers before it (response headers skipped): the response began all the same.
    if (state.kind === 'picked' && !state.answered) {
      this.noteServed(state, message);
      state = this.start(state);
    }
    if (state.kind !== 'completed') state.record.responseBody(chunk);
    this.write(responseBodyResponse(chunk, endOfStream, state.responseFullDuplex));
    if (endOfStream && state.kind !== 'completed') this.complete(state);
  }

  /** Picked -> started. Without the response body here, the charge's end is the record's end too. */
  private start(state: Picked): Started {
    const started: Started = {
      kind: 'started',
      decision: state.decision,
      record: state.record,
      responseFullDuplex: state.responseFullDuplex,
      streamed: state.streamed,
      served: state.served,
      failureSeen: state.failureSeen,
    };
    this.state = started;
    this.control.started(started.decision, started.record, started.responseFullDuplex);
    return started;
  }

  /** The response's end: the charge is released and the record finished. */
  private complete(state: Picked | Started): void {
    this.state = state.responseFullDuplex ? COMPLETED_STREAMING : COMPLETED;
    this.control.ended(state.decision, state.record);
  }

  private noteServed(state: Picked | Started, message: ProcessingRequest): void {
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
  private noteStatus(state: Picked | Started, status: number | undefined): void {
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

  /** However the stream ends, give back what the request holds; idempotent. */
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
      case 'held':
        // Gone while held: out of the queue at once, never dispatched.
        if (state.ticket !== undefined) this.control.flow.leave(state.ticket);
        return;
      case 'picked':
        // No response began: the request is over (client gone, gateway error, an error status).
        this.control.ended(state.decision, state.record);
        return;
      case 'started':
        // With its body here, the stream lasts as long as the response (or the response was cut).
        // Without, the request runs on: its charge, and its record, end by samples or at its bound.
        if (state.responseFullDuplex) this.control.ended(state.decision, state.record);
        return;
      case 'completed':
      case 'done':
        return;
    }
  }
}
