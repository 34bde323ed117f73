// The ext_proc filter rules on their own (ext-proc-filter.ts), case by case as Envoy's
// ext_proc.cc / processor_state.cc decide them. The gateway-level tests (envoy-rules.test.ts)
// show the same rules on real streams.
import type { ProcessingResponse } from '@spillway/protocol';
import { describe, expect, it } from 'vitest';
import { ExtProcFilterState } from '../src/ext-proc-filter.js';
import type { Direction, FilterRules, ProcessingMode, Verdict } from '../src/ext-proc-filter.js';

const SHIPPED: ProcessingMode = {
  requestBody: 'full-duplex',
  requestTrailer: 'send',
  responseHeader: 'send',
  responseBody: 'none',
  responseTrailer: 'skip',
};

function rules(mode: Partial<ProcessingMode> = {}, extra: Partial<Omit<FilterRules, 'mode'>> = {}): FilterRules {
  return { mode: { ...SHIPPED, ...mode }, failureModeAllow: false, streamCloseOptimization: true, statusOnError: 500, ...extra };
}

const common = { status: 0, clearRouteCache: false };
const headersReply = (direction: Direction): ProcessingResponse => ({
  response:
    direction === 'request'
      ? { $case: 'requestHeaders', value: { response: common } }
      : { $case: 'responseHeaders', value: { response: common } },
  requestDrain: false,
});
const streamedReply = (direction: Direction, endOfStream: boolean): ProcessingResponse => {
  const value = {
    response: {
      ...common,
      bodyMutation: {
        mutation: {
          $case: 'streamedResponse' as const,
          value: { body: new Uint8Array(1), endOfStream, endOfStreamWithoutMessage: false, grpcMessageCompressed: false },
        },
      },
    },
  };
  return {
    response: direction === 'request' ? { $case: 'requestBody', value } : { $case: 'responseBody', value },
    requestDrain: false,
  };
};
const plainBodyReply = (direction: Direction): ProcessingResponse => ({
  response:
    direction === 'request'
      ? { $case: 'requestBody', value: { response: common } }
      : { $case: 'responseBody', value: { response: common } },
  requestDrain: false,
});
const trailersReply = (direction: Direction): ProcessingResponse => ({
  response: direction === 'request' ? { $case: 'requestTrailers', value: {} } : { $case: 'responseTrailers', value: {} },
  requestDrain: false,
});

function closes(verdict: Verdict): boolean {
  if (verdict.kind !== 'apply') throw new Error(`expected an applied reply, got ${JSON.stringify(verdict)}`);
  return verdict.closeStream;
}

/** A request with a body through the request phase, as the gateway drives it for `mode`. */
function throughRequest(state: ExtProcFilterState, mode: ProcessingMode): boolean[] {
  const closed: boolean[] = [];
  state.headersSent('request', false);
  state.bodyData('request');
  if (mode.requestBody === 'full-duplex') {
    state.bodySent('request');
    closed.push(closes(state.receive(headersReply('request'))));
    closed.push(closes(state.receive(streamedReply('request', true))));
  } else if (mode.requestBody === 'buffered') {
    closed.push(closes(state.receive(headersReply('request'))));
    state.bodySent('request');
    closed.push(closes(state.receive(plainBodyReply('request'))));
  } else {
    closed.push(closes(state.receive(headersReply('request'))));
  }
  return closed;
}

describe('stream close after the last expected reply (Filter::closeGrpcStreamIfLastRespReceived)', () => {
  it('shipped config: closes after the response-headers reply, not before', () => {
    const state = new ExtProcFilterState(rules());
    expect(throughRequest(state, SHIPPED)).toEqual([false, false]);
    expect(state.complete).toBe(false);
    state.headersSent('response', false);
    expect(closes(state.receive(headersReply('response')))).toBe(true);
    expect(state.complete).toBe(true);
  });

  it('response body FULL_DUPLEX_STREAMED: closes after the streamed reply with end_of_stream', () => {
    const mode = { ...SHIPPED, responseBody: 'full-duplex', responseTrailer: 'send' } as const;
    const state = new ExtProcFilterState(rules(mode));
    throughRequest(state, mode);
    state.headersSent('response', false);
    state.bodyData('response');
    state.bodySent('response');
    expect(closes(state.receive(headersReply('response')))).toBe(false);
    expect(closes(state.receive(streamedReply('response', false)))).toBe(false);
    expect(closes(state.receive(streamedReply('response', true)))).toBe(true);
  });

  it('response trailers SEND with body NONE: stays open after the headers, closes on the trailers reply', () => {
    const mode = { ...SHIPPED, responseTrailer: 'send' } as const;
    const state = new ExtProcFilterState(rules(mode));
    throughRequest(state, mode);
    state.headersSent('response', false);
    expect(closes(state.receive(headersReply('response')))).toBe(false);
    expect(state.trailersSent('response').armTimer).toBe(true);
    expect(closes(state.receive(trailersReply('response')))).toBe(true);
  });

  it('a bodiless response closes on its headers reply whatever the body mode', () => {
    const mode = { ...SHIPPED, responseBody: 'full-duplex', responseTrailer: 'send' } as const;
    const state = new ExtProcFilterState(rules(mode));
    throughRequest(state, mode);
    state.headersSent('response', true);
    expect(closes(state.receive(headersReply('response')))).toBe(true);
  });

  it('nothing of the response for the processor: the request phase closes it', () => {
    const quiet = { responseHeader: 'skip', responseBody: 'none', responseTrailer: 'skip' } as const;
    for (const requestBody of ['full-duplex', 'buffered', 'none'] as const) {
      const mode = { ...SHIPPED, ...quiet, requestBody, requestTrailer: requestBody === 'full-duplex' ? 'send' : 'skip' } as const;
      const closed = throughRequest(new ExtProcFilterState(rules(mode)), mode);
      // Full duplex: the last body reply; buffered: never (Envoy excludes it); none: the headers reply.
      const expected = { 'full-duplex': [false, true], buffered: [false, false], none: [true] }[requestBody];
      expect(closed, requestBody).toEqual(expected);
    }
    // Header-only request: its headers reply is the last.
    const state = new ExtProcFilterState(rules(quiet));
    state.headersSent('request', true);
    expect(closes(state.receive(headersReply('request')))).toBe(true);
    // ...and when that is not the case, Filter::encodeHeaders closes the stream as the response arrives.
    const buffered = new ExtProcFilterState(rules({ ...quiet, requestBody: 'buffered', requestTrailer: 'skip' }));
    throughRequest(buffered, { ...SHIPPED, ...quiet, requestBody: 'buffered' });
    expect(buffered.responseHeadersArrived()).toBe(true);
    expect(new ExtProcFilterState(rules()).responseHeadersArrived()).toBe(false);
  });

  it('request body NONE with request trailers SEND waits for the trailers reply', () => {
    const mode = { ...SHIPPED, requestBody: 'none', requestTrailer: 'send', responseHeader: 'skip' } as const;
    const state = new ExtProcFilterState(rules(mode));
    expect(throughRequest(state, mode)).toEqual([false]);
    state.trailersSent('request');
    expect(closes(state.receive(trailersReply('request')))).toBe(true);
  });

  it('buffered response bodies never close early', () => {
    const mode = { ...SHIPPED, responseBody: 'buffered' } as const;
    const state = new ExtProcFilterState(rules(mode));
    throughRequest(state, mode);
    state.headersSent('response', false);
    expect(closes(state.receive(headersReply('response')))).toBe(false);
    state.bodySent('response');
    expect(closes(state.receive(plainBodyReply('response')))).toBe(false);
  });

  it('without the close optimization (Envoy < 1.37) no reply closes the stream', () => {
    const state = new ExtProcFilterState(rules({}, { streamCloseOptimization: false }));
    expect(throughRequest(state, SHIPPED)).toEqual([false, false]);
    state.headersSent('response', false);
    expect(closes(state.receive(headersReply('response')))).toBe(false);
    expect(state.complete).toBe(false);
  });

  it('an immediate response completes processing; later messages are ignored', () => {
    const state = new ExtProcFilterState(rules());
    state.headersSent('request', false);
    expect(
      state.receive({ response: { $case: 'immediateResponse', value: { body: new Uint8Array(), details: '' } }, requestDrain: false }),
    ).toEqual({
      kind: 'immediate',
    });
    expect(state.receive(headersReply('request')).kind).toBe('ignore');
  });
});

describe('message_timeout (ProcessorState::onStartProcessorCall)', () => {
  it('is armed for every message of a BUFFERED or NONE direction and never in FULL_DUPLEX_STREAMED', () => {
    const buffered = new ExtProcFilterState(rules({ requestBody: 'buffered', requestTrailer: 'skip' }));
    expect(buffered.headersSent('request', false).armTimer).toBe(true);
    buffered.receive(headersReply('request'));
    expect(buffered.bodySent('request').armTimer).toBe(true);

    const duplex = new ExtProcFilterState(rules());
    expect(duplex.headersSent('request', false).armTimer).toBe(false);
    expect(duplex.bodySent('request').armTimer).toBe(false);
    // The response side of the shipped config has body NONE: its headers reply is timed.
    expect(duplex.headersSent('response', false).armTimer).toBe(true);

    const both = new ExtProcFilterState(rules({ responseBody: 'full-duplex', responseTrailer: 'send' }));
    expect(both.headersSent('response', false).armTimer).toBe(false);
  });

  it('fails closed with 504 (not status_on_error), or goes on with failure_mode_allow', () => {
    expect(new ExtProcFilterState(rules({}, { statusOnError: 503 })).messageTimeout()).toMatchObject({ kind: 'fail', status: 504 });
    const open = new ExtProcFilterState(rules({ requestBody: 'buffered', requestTrailer: 'skip' }, { failureModeAllow: true }));
    open.headersSent('request', false);
    expect(open.messageTimeout().kind).toBe('abandon');
  });
});

describe('failure_mode_allow (Filter::failureModeAllow, onGrpcError, onGrpcClose)', () => {
  it('fails closed with status_on_error on a gRPC error', () => {
    expect(new ExtProcFilterState(rules({}, { statusOnError: 502 })).grpcError('UNAVAILABLE')).toMatchObject({ kind: 'fail', status: 502 });
  });

  it('fails open before a full-duplex body arrived, and closed after', () => {
    const early = new ExtProcFilterState(rules({}, { failureModeAllow: true }));
    early.headersSent('request', false);
    expect(early.grpcError('UNAVAILABLE').kind).toBe('abandon');

    const late = new ExtProcFilterState(rules({}, { failureModeAllow: true }));
    late.headersSent('request', false);
    late.bodyData('request');
    expect(late.failureModeAllow()).toBe(false);
    expect(late.grpcError('UNAVAILABLE')).toMatchObject({ kind: 'fail', status: 500 });
  });

  it('a buffered body keeps failure_mode_allow, as does a full-duplex response after the request', () => {
    const buffered = new ExtProcFilterState(rules({ requestBody: 'buffered', requestTrailer: 'skip' }, { failureModeAllow: true }));
    buffered.headersSent('request', false);
    buffered.bodyData('request');
    expect(buffered.failureModeAllow()).toBe(true);
    const responseDuplex = new ExtProcFilterState(
      rules(
        { requestBody: 'buffered', requestTrailer: 'skip', responseBody: 'full-duplex', responseTrailer: 'send' },
        { failureModeAllow: true },
      ),
    );
    responseDuplex.bodyData('response');
    expect(responseDuplex.failureModeAllow()).toBe(false);
  });

  it('a clean close by the processor goes on without it even when failing closed', () => {
    const state = new ExtProcFilterState(rules());
    state.headersSent('request', false);
    state.bodyData('request');
    expect(state.grpcClosed().kind).toBe('abandon');
    expect(state.grpcError('late').kind).toBe('ignore');
  });
});

describe('spurious and out-of-order messages (ProcessorState::handle*Response)', () => {
  it('a body reply before the headers reply in full duplex', () => {
    const state = new ExtProcFilterState(rules());
    state.headersSent('request', false);
    state.bodyData('request');
    state.bodySent('request');
    expect(state.receive(streamedReply('request', true))).toMatchObject({ kind: 'fail', status: 500 });
  });

  it('a response-headers reply during the request phase; an empty message; a plain body reply in full duplex', () => {
    const early = new ExtProcFilterState(rules());
    early.headersSent('request', false);
    expect(early.receive(headersReply('response')).kind).toBe('fail');

    const empty = new ExtProcFilterState(rules());
    empty.headersSent('request', false);
    expect(empty.receive({ requestDrain: false })).toMatchObject({ kind: 'fail', reason: expect.stringContaining('unhandled') });

    const plain = new ExtProcFilterState(rules());
    plain.headersSent('request', false);
    plain.bodyData('request');
    plain.bodySent('request');
    plain.receive(headersReply('request'));
    expect(plain.receive(plainBodyReply('request'))).toMatchObject({ kind: 'fail', reason: expect.stringContaining('streamed_response') });
  });

  it('a second headers reply, and a reply after processing completed', () => {
    const state = new ExtProcFilterState(rules({}, { streamCloseOptimization: false }));
    state.headersSent('request', true);
    expect(state.receive(headersReply('request')).kind).toBe('apply');
    expect(state.receive(headersReply('request')).kind).toBe('fail');
    expect(state.receive(headersReply('request')).kind).toBe('ignore');
  });

  it('is ignored (the processor abandoned) with failure_mode_allow where it still applies', () => {
    const state = new ExtProcFilterState(rules({ requestBody: 'buffered', requestTrailer: 'skip' }, { failureModeAllow: true }));
    state.headersSent('request', false);
    expect(state.receive(plainBodyReply('request')).kind).toBe('abandon');
    expect(state.complete).toBe(true);
  });

  it('accepts what Envoy accepts: a streamed_response to a buffered body, a trailers reply in full duplex', () => {
    const buffered = new ExtProcFilterState(rules({ requestBody: 'buffered', requestTrailer: 'skip' }));
    buffered.headersSent('request', false);
    buffered.receive(headersReply('request'));
    buffered.bodySent('request');
    expect(buffered.receive(streamedReply('request', false))).toMatchObject({ kind: 'apply', phase: 'body', endOfBody: true });
    const duplex = new ExtProcFilterState(rules());
    duplex.headersSent('request', false);
    expect(duplex.receive(trailersReply('request'))).toMatchObject({ kind: 'apply', phase: 'trailers' });
  });

  it('an override_message_timeout message is only a timer extension, ignored without max_message_timeout', () => {
    const state = new ExtProcFilterState(rules());
    state.headersSent('request', false);
    expect(state.receive({ ...headersReply('request'), overrideMessageTimeout: { seconds: 5, nanos: 0 } }).kind).toBe('ignore');
    expect(state.receive(headersReply('request')).kind).toBe('apply');
  });

  it('a rejected header mutation is an error reply whatever the failure mode', () => {
    const state = new ExtProcFilterState(rules({}, { failureModeAllow: true, statusOnError: 503 }));
    expect(state.mutationFailed('both value and raw_value')).toMatchObject({ kind: 'fail', status: 503 });
  });
});
