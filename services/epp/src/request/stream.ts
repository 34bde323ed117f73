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
 */
type State = 'awaiting-headers' | 'awaiting-body' | 'picked' | 'done';

export function handleStream(control: RequestControl, call: Call): void {
  new ExtProcStream(control, call);
}

// The stream is its own request deadline (at + expire), which saves an object and a closure per stream.
class ExtProcStream implements Deadline {
  /** Deadline: when the request phase must be complete. */
  readonly at: number;
  private state: State = 'awaiting-headers';
  private modes: BodyModes | undefined;
  private headers: RequestHeaders | undefined;
  private subset: readonly unknown[] | string | undefined;
  private body: BodyAccumulator | undefined;
  private decision: Decision | undefined;
  /** The parsed request, once its body is complete. */
  private request: PreparedRequest | undefined;
  /** Bytes of the request body as the client sent it. */
  private requestBytes = 0;
  /** The routed request's record, until the stream ends. */
  private tracked: RequestRecord | undefined;
  /** When the stream began (ms): a request's duration runs from here to the end of the stream. */
  private readonly startedAt = Date.now();
  /** The served endpoint the gateway reported (canonical), once seen. */
  private served: string | undefined;
  private failureSeen = false;
  /** Bytes of this request's body taken from the EPP-wide body budget. */
  private reservedBytes = 0;
  private deadline: Deadline | undefined;

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
    this.deadline = this;
    control.deadlines.add(this);
  }

  /** Deadline: the sweeper found the request phase still open at `at`. */
  expire(): void {
    this.onRequestTimeout();
  }

  private onMessage(message: ProcessingRequest): void {
    if (this.state === 'done') return;
    // Envoy attaches the forwarded namespaces to every message; the latest hint before the pick
    // wins. After the pick it is not read (nor kept: a hint can be megabytes, a response minutes).
    if (this.state !== 'picked') {
      const hint = readSubsetHint(message.metadataContext);
      if (hint !== undefined) this.subset = hint;
    }
    const phase = decodePhase(message);
    switch (phase.kind) {
      case 'requestHeaders':
        if (this.state !== 'awaiting-headers') return this.protocolError('a second request_headers message');
        this.modes = readBodyModes(message.protocolConfig);
        return this.onRequestHeaders(phase.headers);
      case 'requestBody':
        if (this.state !== 'awaiting-body') return this.protocolError('request_body outside the request body phase');
        return this.onRequestBody(phase.chunk, phase.endOfStream);
      case 'requestTrailers':
        if (this.state === 'awaiting-body') return this.completeRequest(true);
        if (this.state === 'picked') return this.write(requestTrailersResponse());
        return this.protocolError('request_trailers before request_headers');
      case 'responseHeaders':
      case 'responseBody':
      case 'responseTrailers':
        if (this.state !== 'picked') return this.protocolError(`${phase.kind} before the request was routed`);
        this.noteServed(message);
        if (phase.kind === 'responseHeaders') {
          this.noteStatus(phase.headers.status);
          return this.write(responseHeadersResponse());
        }
        if (phase.kind === 'responseTrailers') return this.write(responseTrailersResponse());
        this.tracked?.responseBody(phase.chunk);
        this.write(responseBodyResponse(phase.chunk, phase.endOfStream, this.modes?.response === 'full-duplex'));
        return;
      case 'empty':
        return this.protocolError('a ProcessingRequest with no phase set');
    }
  }

  private onRequestHeaders(headers: RequestHeaders): void {
    this.headers = headers;
    const mode = this.modes?.request;
    if (headers.endOfStream || mode === 'none') return this.route('header-only', undefined);
    if (mode !== 'full-duplex' && mode !== 'buffered') {
      return this.reject(
        500,
        `request body mode ${mode ?? 'unknown'} is not supported; use FULL_DUPLEX_STREAMED or BUFFERED`,
        'unsupported_body_mode',
      );
    }
    this.state = 'awaiting-body';
    this.body = new BodyAccumulator(this.control.limits.maxBodyBytes);
    // BUFFERED: Envoy waits for this reply before it sends the body; the decision rides on the body reply.
    if (mode === 'buffered') this.write(requestHeadersResponse({ removeHeaders: headers.destinationHeaders }));
  }

  private onRequestBody(chunk: Uint8Array, endOfStream: boolean): void {
    const body = this.body as BodyAccumulator;
    if (!body.push(chunk)) {
      return this.reject(413, `request body exceeds ${body.limit} bytes`, 'request_too_large');
    }
    if (!this.control.bodies.reserve(chunk.length)) {
      return this.reject(503, 'the endpoint picker holds too many request bodies at once; retry', 'body_budget_exceeded');
    }
    this.reservedBytes += chunk.length;
    if (endOfStream) this.completeRequest(false);
  }

  /** Gives this request's body bytes back to the EPP-wide budget (the body was taken or dropped). */
  private releaseBody(): void {
    this.body = undefined;
    this.control.bodies.release(this.reservedBytes);
    this.reservedBytes = 0;
  }

  private completeRequest(endedWithTrailers: boolean): void {
    const headers = this.headers as RequestHeaders;
    const body = (this.body as BodyAccumulator).take();
    this.requestBytes = body.length;
    // The stream lives as long as the response (minutes for a long generation): drop the request
    // body's chunks now rather than hold up to --max-body-bytes per open stream.
    this.releaseBody();
    const prepared = prepareRequest(body, headers, this.control.rewriter, Math.random);
    if (!prepared.ok) return this.reject(prepared.error.status as ErrorStatus, prepared.error.message, prepared.error.code);
    this.route(this.modes?.request === 'buffered' ? 'buffered' : 'full-duplex', prepared.request, endedWithTrailers);
  }

  /** Pick, then answer with the destination (or the error the decision calls for). */
  private route(mode: RoutedMode, request: PreparedRequest | undefined, endedWithTrailers = false): void {
    const headers = this.headers as RequestHeaders;
    this.request = request;
    const decision = this.control.pick(
      { model: request?.model ?? '', prompt: request?.prompt, objective: headers.objective, subset: this.subset },
      request,
    );
    if (decision.status !== 'routed') {
      const message =
        decision.status === 429
          ? 'every eligible endpoint is saturated and the request is sheddable'
          : `no endpoint available (${decision.rule})`;
      return this.reject(decision.status, message, decision.status === 429 ? 'system_saturated' : decision.rule);
    }
    this.decision = decision;
    this.state = 'picked';
    this.subset = undefined;
    this.clearTimer();
    this.tracked = this.control.commit(decision, request, this.requestBytes, this.startedAt);
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
  }

  private noteServed(message: ProcessingRequest): void {
    if (this.served !== undefined || this.decision === undefined) return;
    const served = readServedEndpoint(message.metadataContext, this.decision.entries[0]?.address);
    if (served === undefined) return;
    this.served = served;
    this.control.reportServed(this.decision, served);
  }

  /**
   * A 5xx response status fails the primary (passive health) when the primary is what answered:
   * the served endpoint is the primary, or the gateway named none. Envoy sends the same response
   * headers for its own local reply when it could not connect (503, served = the last host tried),
   * so a connection failure lands here too. A served fallback already penalised the primary.
   */
  private noteStatus(status: number | undefined): void {
    if (status !== undefined && status >= 400 && !this.failureSeen) this.tracked?.modelServerError();
    if (status === undefined || status < 500 || status > 599 || this.failureSeen || this.decision === undefined) return;
    this.failureSeen = true;
    if (this.served !== undefined && this.served !== this.decision.entries[0]?.address) return;
    this.control.reportFailed(this.decision, status);
  }

  private reject(status: ErrorStatus, message: string, code: string): void {
    this.control.reject(status, code, this.request);
    this.write(immediateResponse(status, message, { code }));
    this.endStream();
  }

  /** The client broke the ext_proc conversation itself: end the stream with a gRPC error, not an HTTP one. */
  private protocolError(message: string): void {
    this.control.observer.protocolViolation(message);
    this.state = 'done';
    this.clearTimer();
    this.call.emit('error', { code: GrpcStatus.INVALID_ARGUMENT, details: message });
    this.finish(false);
  }

  private onRequestTimeout(): void {
    if (this.state !== 'awaiting-headers' && this.state !== 'awaiting-body') return;
    this.control.observer.requestTimedOut(this.control.limits.requestTimeoutMs);
    this.state = 'done';
    this.call.emit('error', {
      code: GrpcStatus.DEADLINE_EXCEEDED,
      details: `request not complete within ${this.control.limits.requestTimeoutMs} ms`,
    });
    this.finish(false);
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
    this.state = 'done';
    this.clearTimer();
    if (!this.call.destroyed && this.call.writable) this.call.end();
    this.finish(false);
  }

  private clearTimer(): void {
    if (this.deadline !== undefined) this.control.deadlines.remove(this.deadline);
    this.deadline = undefined;
  }

  /** However the stream ends, release what the request holds; idempotent. */
  private finish(clientEnded: boolean): void {
    this.clearTimer();
    this.releaseBody();
    if (this.decision !== undefined) {
      this.control.release(this.decision, this.tracked);
      this.decision = undefined;
      this.tracked = undefined;
    }
    if (clientEnded && this.state !== 'done') {
      this.state = 'done';
      if (!this.call.destroyed && this.call.writable) this.call.end();
    }
    this.state = 'done';
  }
}
