// Envoy's ext_proc filter rules, as a pure state machine (no I/O, no clock): which reply is valid
// when, when the message timer runs, what a failure does, and when the stream is closed. The shell
// (ext-proc-session.ts) feeds it what was sent and received and acts on its verdicts. Each rule
// names the Envoy function it follows (envoyproxy/envoy, source/extensions/filters/http/ext_proc/:
// ext_proc.cc `Filter::*`, processor_state.cc/.h `ProcessorState::*`); docs/protocol.md lists them.
import type { ProcessingResponse } from '@spillway/protocol';

/** ProcessingMode.BodySendMode values the gateway runs. */
export type BodyMode = 'none' | 'buffered' | 'full-duplex';
/** ProcessingMode.HeaderSendMode for headers and trailers. */
export type SendMode = 'send' | 'skip';
export type Direction = 'request' | 'response';

/** The filter's processing_mode. Request headers are always sent: the EPP picks on them. */
export interface ProcessingMode {
  readonly requestBody: BodyMode;
  readonly requestTrailer: SendMode;
  readonly responseHeader: SendMode;
  readonly responseBody: BodyMode;
  readonly responseTrailer: SendMode;
}

export interface FilterRules {
  readonly mode: ProcessingMode;
  /** failure_mode_allow. */
  readonly failureModeAllow: boolean;
  /** Runtime guard envoy.reloadable_features.ext_proc_stream_close_optimization (on since 1.37). */
  readonly streamCloseOptimization: boolean;
  /** status_on_error (Envoy's default: 500). */
  readonly statusOnError: number;
}

/** ProcessorState::CallbackState: which reply a direction is waiting for. */
type CallbackState = 'idle' | 'headers' | 'streamed-body' | 'buffered-body' | 'trailers';

export type ReplyPhase = 'headers' | 'body' | 'trailers';

export type Verdict =
  /**
   * A reply the filter was waiting for: apply it. `endOfBody`: a body reply that ends the body
   * (streamed_response end_of_stream in full duplex; the one body reply in buffered mode).
   * `closeStream`: it was the last reply the filter expects, so the stream is closed now.
   */
  | {
      readonly kind: 'apply';
      readonly direction: Direction;
      readonly phase: ReplyPhase;
      readonly endOfBody: boolean;
      readonly closeStream: boolean;
    }
  /** immediate_response: the stream is closed and its reply goes to the client. */
  | { readonly kind: 'immediate' }
  /** Nothing to do (processing already complete, or a timer extension). */
  | { readonly kind: 'ignore'; readonly reason: string }
  /** Fail closed: the stream is closed and the client gets `status`. */
  | { readonly kind: 'fail'; readonly status: number; readonly reason: string }
  /** Fail open: the stream is closed and the request goes on without the processor. */
  | { readonly kind: 'abandon'; readonly reason: string };

/** Envoy's fixed status for a message timeout when failing closed (Filter::onMessageTimeout). */
export const MESSAGE_TIMEOUT_STATUS = 504;

class DirectionState {
  callback: CallbackState = 'idle';
  /** The headers carried end_of_stream (ProcessorState::setHasNoBody). */
  noBody = false;
  /** Body data was seen in this direction (ProcessorState::setBodyReceived, set first thing in Filter::onData). */
  bodyReceived = false;

  constructor(
    readonly sendHeaders: boolean,
    readonly body: BodyMode,
    readonly sendTrailers: boolean,
  ) {}

  /** EncodingProcessorState::noExternalProcess: nothing of this direction goes to the processor. */
  get noExternalProcess(): boolean {
    return !this.sendHeaders && !this.sendTrailers && this.body === 'none';
  }
}

export class ExtProcFilterState {
  readonly #rules: FilterRules;
  readonly #request: DirectionState;
  readonly #response: DirectionState;
  /** Filter::processing_complete_: nothing more is sent to, or taken from, the processor. */
  #complete = false;

  constructor(rules: FilterRules) {
    this.#rules = rules;
    const { mode } = rules;
    this.#request = new DirectionState(true, mode.requestBody, mode.requestTrailer === 'send');
    this.#response = new DirectionState(mode.responseHeader === 'send', mode.responseBody, mode.responseTrailer === 'send');
  }

  get complete(): boolean {
    return this.#complete;
  }

  /** Whether this direction's headers go to the processor (processing_mode *_header_mode). */
  sendsHeaders(direction: Direction): boolean {
    return !this.#complete && this.#state(direction).sendHeaders;
  }

  /** Whether this direction's body goes to the processor, and how. */
  bodyMode(direction: Direction): BodyMode {
    return this.#complete ? 'none' : this.#state(direction).body;
  }

  /**
   * Headers were sent (Filter::onHeaders). The message timer is armed unless the direction's body
   * mode is FULL_DUPLEX_STREAMED (ProcessorState::onStartProcessorCall skips it there).
   */
  headersSent(direction: Direction, endOfStream: boolean): { readonly armTimer: boolean } {
    const state = this.#state(direction);
    state.noBody = endOfStream;
    state.callback = 'headers';
    return { armTimer: state.body !== 'full-duplex' };
  }

  /** Body data arrived in this direction, whether or not it goes to the processor (Filter::onData). */
  bodyData(direction: Direction): void {
    this.#state(direction).bodyReceived = true;
  }

  /**
   * A body message was sent (Filter::sendBodyChunk). In full duplex a chunk sent while the headers
   * reply is outstanding keeps the HeadersCallback state (Filter::handleDataStreamedModeBase).
   */
  bodySent(direction: Direction): { readonly armTimer: boolean } {
    const state = this.#state(direction);
    if (state.callback !== 'headers') state.callback = state.body === 'full-duplex' ? 'streamed-body' : 'buffered-body';
    return { armTimer: state.body !== 'full-duplex' };
  }

  /**
   * Whether a reply's dynamic_metadata is taken: for every headers, body, trailers and immediate
   * reply, valid or not, while processing is not complete (Filter::onReceiveMessage calls
   * setDecoderDynamicMetadata/setEncoderDynamicMetadata before the handle* methods judge it).
   */
  takesMetadata(message: ProcessingResponse): boolean {
    if (this.#complete || message.overrideMessageTimeout !== undefined) return false;
    const kind = message.response?.$case;
    return kind !== undefined && kind !== 'streamedImmediateResponse';
  }

  /**
   * Trailers were sent (Filter::sendTrailers): the state waits for their reply unless a reply is
   * already outstanding. (Over HTTP/1.1 neither the gateway nor Envoy's default codec passes
   * trailers on, so the gateway itself never calls this; the rules still depend on the mode.)
   */
  trailersSent(direction: Direction): { readonly armTimer: boolean } {
    const state = this.#state(direction);
    if (state.callback === 'idle') state.callback = 'trailers';
    return { armTimer: state.body !== 'full-duplex' };
  }

  /** A reply from the processor (Filter::onReceiveMessage). */
  receive(message: ProcessingResponse): Verdict {
    if (this.#complete) return { kind: 'ignore', reason: 'a message after processing completed' };
    // A message that sets override_message_timeout is only a timer extension (Filter::onNewTimeout);
    // the extension must lie within max_message_timeout, which is 0 unless configured, so it is ignored.
    if (message.overrideMessageTimeout !== undefined) {
      return { kind: 'ignore', reason: 'override_message_timeout outside max_message_timeout (0)' };
    }
    const response = message.response;
    switch (response?.$case) {
      case 'requestHeaders':
        return this.#headersReply('request');
      case 'responseHeaders':
        return this.#headersReply('response');
      case 'requestBody':
        return this.#bodyReply('request', response.value.response?.bodyMutation?.mutation);
      case 'responseBody':
        return this.#bodyReply('response', response.value.response?.bodyMutation?.mutation);
      case 'requestTrailers':
        return this.#trailersReply('request');
      case 'responseTrailers':
        return this.#trailersReply('response');
      case 'immediateResponse':
        this.#complete = true;
        return { kind: 'immediate' };
      default:
        return this.#spurious(`unhandled message ${response?.$case ?? '(no response set)'}`);
    }
  }

  /** The processor's stream failed with a non-OK status (Filter::onGrpcError). */
  grpcError(detail: string): Verdict {
    if (this.#complete) return { kind: 'ignore', reason: 'stream error after processing completed' };
    this.#complete = true;
    if (this.failureModeAllow()) return { kind: 'abandon', reason: `gRPC error with failure_mode_allow: ${detail}` };
    return { kind: 'fail', status: this.#rules.statusOnError, reason: `gRPC error: ${detail}` };
  }

  /**
   * The processor closed its stream with OK before the filter was done (Filter::onGrpcClose): the
   * filter carries on without it, whatever failure_mode_allow says.
   */
  grpcClosed(): Verdict {
    if (this.#complete) return { kind: 'ignore', reason: 'stream closed after processing completed' };
    this.#complete = true;
    return { kind: 'abandon', reason: 'the processor closed the stream' };
  }

  /** The message timer fired (Filter::onMessageTimeout): carry on, or 504 (never status_on_error). */
  messageTimeout(): Verdict {
    if (this.#complete) return { kind: 'ignore', reason: 'timer after processing completed' };
    this.#complete = true;
    if (this.failureModeAllow()) return { kind: 'abandon', reason: 'message timeout with failure_mode_allow' };
    return { kind: 'fail', status: MESSAGE_TIMEOUT_STATUS, reason: 'ext_proc_error_per-message_timeout_exceeded' };
  }

  /**
   * A reply that was valid but could not be applied (a rejected header mutation, a body that does
   * not match content-length): Filter::handleErrorResponse, an error reply whatever the failure mode.
   */
  mutationFailed(reason: string): Verdict {
    this.#complete = true;
    return { kind: 'fail', status: this.#rules.statusOnError, reason };
  }

  /**
   * Filter::failureModeAllow: failure_mode_allow, except once a FULL_DUPLEX_STREAMED body has been
   * received in either direction (its bytes are already in the processor's hands).
   */
  failureModeAllow(): boolean {
    for (const state of [this.#request, this.#response]) {
      if (state.body === 'full-duplex' && state.bodyReceived) return false;
    }
    return this.#rules.failureModeAllow;
  }

  /**
   * Response headers reach the filter (Filter::encodeHeaders): with nothing of the response for the
   * processor, the stream is closed there (independently of the close optimization). True: close now.
   */
  responseHeadersArrived(): boolean {
    if (this.#complete || !this.#response.noExternalProcess) return false;
    this.#complete = true;
    return true;
  }

  /** The stream is being closed by the shell (end of the exchange, or client gone): Filter::onDestroy. */
  finish(): void {
    this.#complete = true;
  }

  #state(direction: Direction): DirectionState {
    return direction === 'request' ? this.#request : this.#response;
  }

  /** ProcessorState::handleHeadersResponse, then the state after it (getCallbackStateAfterHeaderResp). */
  #headersReply(direction: Direction): Verdict {
    const state = this.#state(direction);
    if (state.callback !== 'headers') return this.#spurious(`a ${direction}_headers reply while not waiting for one`);
    state.callback = state.body === 'full-duplex' && state.bodyReceived ? 'streamed-body' : 'idle';
    return this.#apply(direction, 'headers', false);
  }

  /** ProcessorState::handleBodyResponse / isValidBodyCallbackState / handleStreamedBodyCallback. */
  #bodyReply(direction: Direction, mutation: { $case: string; value?: unknown } | undefined): Verdict {
    const state = this.#state(direction);
    if (state.callback === 'buffered-body') {
      // handleBufferedBodyCallback applies whatever mutation came (a streamed_response is not a
      // buffered mutation and changes nothing); the one buffered reply ends the body.
      state.callback = 'idle';
      return this.#apply(direction, 'body', true);
    }
    if (state.callback !== 'streamed-body') return this.#spurious(`a ${direction}_body reply while not waiting for one`);
    if (mutation?.$case !== 'streamedResponse') {
      return this.#spurious(`a ${direction}_body reply without streamed_response in FULL_DUPLEX_STREAMED mode`);
    }
    const endOfStream = (mutation.value as { endOfStream?: boolean } | undefined)?.endOfStream === true;
    // handleDuplexStreamedBodyResponse: keep waiting for bodies until end_of_stream.
    if (endOfStream) state.callback = 'idle';
    return this.#apply(direction, 'body', endOfStream);
  }

  /** ProcessorState::handleTrailersResponse: valid while waiting for trailers, or any time in full duplex. */
  #trailersReply(direction: Direction): Verdict {
    const state = this.#state(direction);
    if (state.callback !== 'trailers' && state.body !== 'full-duplex') {
      return this.#spurious(`a ${direction}_trailers reply while not waiting for one`);
    }
    state.callback = 'idle';
    return this.#apply(direction, 'trailers', false);
  }

  #apply(direction: Direction, phase: ReplyPhase, endOfBody: boolean): Verdict {
    const closeStream = this.#rules.streamCloseOptimization && this.#isLastReply(direction, phase, endOfBody);
    if (closeStream) this.#complete = true;
    return { kind: 'apply', direction, phase, endOfBody, closeStream };
  }

  /**
   * Filter::closeGrpcStreamIfLastRespReceived: the reply after which the filter expects nothing
   * more. isLastBodyResponse is true only for a full-duplex streamed_response with end_of_stream
   * (BUFFERED is excluded: such streams close when the filter is destroyed).
   */
  #isLastReply(direction: Direction, phase: ReplyPhase, endOfBody: boolean): boolean {
    const request = this.#request;
    const response = this.#response;
    const lastBody = this.#state(direction).body === 'full-duplex' && endOfBody;
    if (direction === 'request') {
      if (phase === 'headers') {
        return (request.noBody || (request.body === 'none' && !request.sendTrailers)) && response.noExternalProcess;
      }
      if (phase === 'body') return lastBody && response.noExternalProcess;
      return response.noExternalProcess;
    }
    if (phase === 'headers') return response.noBody || (response.body === 'none' && !response.sendTrailers);
    if (phase === 'body') return lastBody;
    return true;
  }

  /**
   * A message out of order or of the wrong kind (FailedPrecondition in Envoy): with fail-open (or
   * the ext_proc_fail_close_spurious_resp guard off) the processor is ignored for the rest of the
   * request; otherwise an error reply (Filter::onReceiveMessage, handleErrorResponse).
   */
  #spurious(reason: string): Verdict {
    this.#complete = true;
    if (this.failureModeAllow()) return { kind: 'abandon', reason: `spurious message ignored: ${reason}` };
    return { kind: 'fail', status: this.#rules.statusOnError, reason: `spurious message: ${reason}` };
  }
}
