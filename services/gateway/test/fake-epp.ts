// An in-test ext_proc server that behaves per docs/protocol.md for what the gateway tests need: it
// records every message, answers full duplex (decision after the body's end, body echoed as
// streamed_response), echoes the response path, and can reject or misbehave on demand.
import { Server, ServerCredentials } from '@grpc/grpc-js';
import type { ServerDuplexStream, status as GrpcStatus } from '@grpc/grpc-js';
import {
  BodySendMode,
  extProcService,
  HealthService,
  ServingStatus,
  immediateResponse,
  readRequestHeaders,
  requestHeadersResponse,
  responseBodyResponse,
  responseHeadersResponse,
  routedResponses,
} from '@spillway/protocol';
import type { ErrorStatus, HealthCheckResponse, ProcessingRequest, ProcessingResponse, RequestHeaders } from '@spillway/protocol';

export type Decision =
  | {
      readonly destination: string;
      /** Replace the body forwarded upstream (the EPP's model rewrite). */
      readonly body?: Buffer;
      /** Where the destination goes: both (the protocol's rule), or one of them. */
      readonly via?: 'both' | 'header' | 'metadata';
      /** Last-moment edit of the replies, to break the protocol on purpose. */
      readonly tamper?: (responses: ProcessingResponse[]) => ProcessingResponse[];
    }
  | { readonly reject: ErrorStatus; readonly message: string }
  /** Never answer (a wedged EPP). */
  | { readonly hang: true };

export type Decide = (headers: RequestHeaders, body: Buffer) => Decision | Promise<Decision>;

export interface RecordedStream {
  readonly messages: ProcessingRequest[];
  cancelled: boolean;
  /** The stream is over (ended, cancelled or failed). */
  readonly finished: Promise<void>;
  /** When the stream was over, on the shared `tick()` clock (for ordering against other events). */
  closedAt: number | undefined;
}

/** One stream as a script sees it: what to answer, and how to end it. */
export interface ScriptedStream {
  readonly record: RecordedStream;
  send(response: ProcessingResponse): void;
  /** Closes the stream with OK (a clean close). */
  end(): void;
  /** Fails the stream with a gRPC status. */
  fail(code: GrpcStatus, details: string): void;
}

/** Handles one message instead of the default behaviour; returns true when it did. */
export type Script = (message: ProcessingRequest, stream: ScriptedStream) => boolean;

export interface FakeEpp {
  readonly address: string;
  readonly streams: RecordedStream[];
  decide: Decide;
  /** When set, sees every message first. */
  script: Script | undefined;
  /** What its grpc.health.v1 service answers for every service name (SERVING unless set). */
  serving: boolean;
  close(): Promise<void>;
}

let clock = 0;
/** A shared sequence number: orders what the fake EPP and a test's upstream saw. */
export function tick(): number {
  return ++clock;
}

function applyVia(responses: ProcessingResponse[], via: 'both' | 'header' | 'metadata'): ProcessingResponse[] {
  const [first, ...rest] = responses;
  if (first === undefined || via === 'both') return responses;
  const edited: ProcessingResponse = { ...first };
  if (via === 'header') edited.dynamicMetadata = undefined;
  if (via === 'metadata' && edited.response?.$case === 'requestHeaders') {
    const common = edited.response.value.response;
    edited.response = {
      $case: 'requestHeaders',
      value: { response: common && { ...common, headerMutation: undefined } },
    };
  }
  return [edited, ...rest];
}

export async function startFakeEpp(decide: Decide, credentials = ServerCredentials.createInsecure()): Promise<FakeEpp> {
  const streams: RecordedStream[] = [];
  const server = new Server();
  const epp: FakeEpp = {
    address: '',
    streams,
    decide,
    script: undefined,
    serving: true,
    close: () =>
      new Promise<void>((resolve) => {
        server.forceShutdown();
        resolve();
      }),
  };

  const process = (call: ServerDuplexStream<ProcessingRequest, ProcessingResponse>): void => {
    let resolve = (): void => undefined;
    const record: RecordedStream = {
      messages: [],
      cancelled: false,
      finished: new Promise<void>((r) => (resolve = r)),
      closedAt: undefined,
    };
    const finish = (): void => {
      record.closedAt ??= tick();
      resolve();
    };
    streams.push(record);
    const scripted: ScriptedStream = {
      record,
      send: (response) => {
        if (!call.cancelled && call.writable) call.write(response);
      },
      end: () => {
        if (call.writable) call.end();
      },
      fail: (code, details) => {
        call.emit('error', { code, details });
      },
    };
    let headers: RequestHeaders | undefined;
    const body: Buffer[] = [];
    const send = (responses: ProcessingResponse[]): void => {
      for (const response of responses) if (!call.cancelled) call.write(response);
    };
    let modes = { request: BodySendMode.FULL_DUPLEX_STREAMED, response: BodySendMode.NONE };
    const route = async (mode: 'full-duplex' | 'buffered' | 'header-only'): Promise<void> => {
      const received = Buffer.concat(body);
      const decision = await epp.decide(headers as RequestHeaders, received);
      if ('hang' in decision) return;
      if ('reject' in decision) {
        send([immediateResponse(decision.reject, decision.message)]);
        call.end();
        return;
      }
      const forwarded = decision.body ?? received;
      let responses = routedResponses({
        mode,
        destination: decision.destination,
        body: forwarded,
        bodyChanged: decision.body !== undefined,
      });
      responses = applyVia(responses, decision.via ?? 'both');
      send(decision.tamper ? decision.tamper(responses) : responses);
    };
    call.on('data', (message: ProcessingRequest) => {
      record.messages.push(message);
      if (epp.script?.(message, scripted) === true) return;
      const request = message.request;
      switch (request?.$case) {
        case 'requestHeaders':
          headers = readRequestHeaders(request.value);
          if (message.protocolConfig !== undefined) {
            modes = { request: message.protocolConfig.requestBodyMode, response: message.protocolConfig.responseBodyMode };
          }
          if (request.value.endOfStream || modes.request === BodySendMode.NONE) void route('header-only');
          // BUFFERED: Envoy waits for this reply before it sends the body.
          else if (modes.request === BodySendMode.BUFFERED) send([requestHeadersResponse()]);
          break;
        case 'requestBody':
          body.push(Buffer.from(request.value.body));
          if (request.value.endOfStream) void route(modes.request === BodySendMode.BUFFERED ? 'buffered' : 'full-duplex');
          break;
        // Like the EPP, the fake never ends the stream itself after the response: the gateway does.
        case 'responseHeaders':
          send([responseHeadersResponse()]);
          break;
        case 'responseBody':
          send([
            responseBodyResponse(
              Buffer.from(request.value.body),
              request.value.endOfStream,
              modes.response === BodySendMode.FULL_DUPLEX_STREAMED,
            ),
          ]);
          break;
        default:
          break;
      }
    });
    call.on('cancelled', () => {
      record.cancelled = true;
      finish();
    });
    call.on('end', () => {
      if (!call.writableEnded) call.end();
    });
    call.on('finish', finish);
    call.on('close', finish);
    call.on('error', finish);
  };

  server.addService(extProcService, { process });
  server.addService(HealthService, {
    check: (_call: unknown, callback: (error: null, response: HealthCheckResponse) => void) =>
      callback(null, { status: epp.serving ? ServingStatus.SERVING : ServingStatus.NOT_SERVING }),
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', credentials, (error, bound) => (error ? reject(error) : resolve(bound))),
  );
  return Object.assign(epp, { address: `127.0.0.1:${port}` });
}

/** The messages of a stream by kind, for assertions. */
export function messagesOf(stream: RecordedStream, kind: NonNullable<ProcessingRequest['request']>['$case']): ProcessingRequest[] {
  return stream.messages.filter((m) => m.request?.$case === kind);
}
