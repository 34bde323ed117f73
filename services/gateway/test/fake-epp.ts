// An in-test ext_proc server that behaves per docs/protocol.md for what the gateway tests need: it
// records every message, answers full duplex (decision after the body's end, body echoed as
// streamed_response), echoes the response path, and can reject or misbehave on demand.
import { Server, ServerCredentials } from '@grpc/grpc-js';
import type { ServerDuplexStream } from '@grpc/grpc-js';
import {
  extProcService,
  immediateResponse,
  readRequestHeaders,
  responseBodyResponse,
  responseHeadersResponse,
  routedResponses,
} from '@spillway/protocol';
import type { ErrorStatus, ProcessingRequest, ProcessingResponse, RequestHeaders } from '@spillway/protocol';

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
}

export interface FakeEpp {
  readonly address: string;
  readonly streams: RecordedStream[];
  decide: Decide;
  close(): Promise<void>;
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
    close: () =>
      new Promise<void>((resolve) => {
        server.forceShutdown();
        resolve();
      }),
  };

  const process = (call: ServerDuplexStream<ProcessingRequest, ProcessingResponse>): void => {
    let finish = (): void => undefined;
    const record: RecordedStream = { messages: [], cancelled: false, finished: new Promise<void>((r) => (finish = r)) };
    streams.push(record);
    let headers: RequestHeaders | undefined;
    const body: Buffer[] = [];
    const send = (responses: ProcessingResponse[]): void => {
      for (const response of responses) if (!call.cancelled) call.write(response);
    };
    const route = async (mode: 'full-duplex' | 'header-only'): Promise<void> => {
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
      const request = message.request;
      switch (request?.$case) {
        case 'requestHeaders':
          headers = readRequestHeaders(request.value);
          if (request.value.endOfStream) void route('header-only');
          break;
        case 'requestBody':
          body.push(Buffer.from(request.value.body));
          if (request.value.endOfStream) void route('full-duplex');
          break;
        case 'responseHeaders':
          send([responseHeadersResponse()]);
          if (request.value.endOfStream) call.end();
          break;
        case 'responseBody':
          send([responseBodyResponse(Buffer.from(request.value.body), request.value.endOfStream, true)]);
          if (request.value.endOfStream) call.end();
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
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', credentials, (error, bound) => (error ? reject(error) : resolve(bound))),
  );
  return Object.assign(epp, { address: `127.0.0.1:${port}` });
}

/** The messages of a stream by kind, for assertions. */
export function messagesOf(stream: RecordedStream, kind: NonNullable<ProcessingRequest['request']>['$case']): ProcessingRequest[] {
  return stream.messages.filter((m) => m.request?.$case === kind);
}
