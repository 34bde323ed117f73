import { connect, constants as h2 } from 'node:http2';
import { EXT_PROC_PATH, ProcessingRequest, ProcessingResponse } from '@spillway/protocol';
import { envoyRequestMessages, envoyResponseHeadersMessage } from '@spillway/testkit';

/**
 * The one request the ext_proc bench sends, pre-encoded as the body of a gRPC POST: the messages
 * Envoy sends for a `/v1/completions` request in the shipped config's mode (infra/envoy:
 * request_header_mode SEND, request_body_mode FULL_DUPLEX_STREAMED, response_header_mode SEND,
 * response_body_mode NONE, response trailers SKIP; forwarding `envoy.lb` and `envoy.lb.subset_hint`):
 * request_headers with protocol_config and the subset hint in metadata_context, the whole 1 KB JSON
 * body in one request_body with end_of_stream (the hint again: Envoy attaches the forwarded
 * namespaces to every message), then response_headers (`:status 200`) carrying the served endpoint
 * and the destination list in `envoy.lb`. Each message is behind gRPC's 5-byte prefix (flag 0,
 * big-endian length). Envoy sends response_headers only after the routing reply; the pre-encoded
 * request sends it at once, which a server reading its stream in order handles the same way.
 */
export interface PodAddress {
  pod: string;
  zone: string;
  address: string;
}

export const BODY_BYTES = 1024;

/** A JSON completions body of exactly `bytes` bytes. */
export function completionsBody(model: string, bytes = BODY_BYTES): string {
  const shell = (prompt: string) => JSON.stringify({ model, prompt, max_tokens: 64, temperature: 0, stream: false });
  const padding = bytes - shell('').length;
  if (padding < 0) throw new Error(`a ${bytes}-byte body is too small`);
  const words = 'the quick brown fox jumps over the lazy dog '.repeat(Math.ceil(padding / 44) + 1).slice(0, padding);
  return shell(words);
}

export function grpcFrame(message: Uint8Array): Buffer {
  const frame = Buffer.allocUnsafe(5 + message.length);
  frame.writeUInt8(0, 0);
  frame.writeUInt32BE(message.length, 1);
  frame.set(message, 5);
  return frame;
}

export interface EncodedRequest {
  bytes: Buffer;
  messages: number;
  bodyBytes: number;
}

/**
 * `served` (and the destination list Envoy holds) go on the response_headers message; without
 * `served` the request ends after its body (the routing exchange alone).
 */
export function encodedRequest(model: string, subset: string[], response?: { served: string; destination: string }): EncodedRequest {
  const body = completionsBody(model);
  const messages = envoyRequestMessages({ body, subset, mode: 'full-duplex' });
  if (response !== undefined)
    messages.push(envoyResponseHeadersMessage({ status: 200, served: response.served, destination: response.destination, subset }));
  return {
    bytes: Buffer.concat(messages.map((m) => grpcFrame(ProcessingRequest.encode(m).finish()))),
    messages: messages.length,
    bodyBytes: Buffer.byteLength(body),
  };
}

/** Splits a gRPC response body into its messages. */
export function grpcMessages(data: Buffer): Buffer[] {
  const out: Buffer[] = [];
  let offset = 0;
  while (offset + 5 <= data.length) {
    const length = data.readUInt32BE(offset + 1);
    out.push(data.subarray(offset + 5, offset + 5 + length));
    offset += 5 + length;
  }
  if (offset !== data.length) throw new Error(`trailing ${data.length - offset} bytes after the last gRPC message`);
  return out;
}

export interface Answer {
  httpStatus: number;
  grpcStatus: string | undefined;
  grpcMessage: string | undefined;
  responses: ProcessingResponse[];
  /** The x-gateway-destination-endpoint header set by the first response, if any. */
  destination: string | undefined;
  /** Bytes echoed as streamed_response. */
  echoedBytes: number;
  /** Replies to response_headers. */
  responseHeadersReplies: number;
}

/**
 * Sends the pre-encoded request exactly as h2load does (one HTTP/2 POST, the file as body, then
 * end of stream) over one connection and decodes what comes back: the one-off check that the
 * benchmark exercises the routed path, not an error path.
 */
export async function sendOnce(port: number, bytes: Buffer, count = 1): Promise<Answer[]> {
  const session = connect(`http://127.0.0.1:${port}`);
  try {
    const one = (): Promise<Answer> =>
      new Promise((resolve, reject) => {
        const stream = session.request({
          [h2.HTTP2_HEADER_METHOD]: 'POST',
          [h2.HTTP2_HEADER_PATH]: EXT_PROC_PATH,
          'content-type': 'application/grpc',
          te: 'trailers',
        });
        let httpStatus = 0;
        let trailers: Record<string, unknown> = {};
        const chunks: Buffer[] = [];
        stream.on('response', (headers) => {
          httpStatus = Number(headers[':status']);
          trailers = headers as Record<string, unknown>; // trailers-only responses put grpc-status here
        });
        stream.on('trailers', (t) => (trailers = t as Record<string, unknown>));
        stream.on('data', (c: Buffer) => chunks.push(c));
        stream.on('error', reject);
        stream.on('end', () => {
          try {
            const responses = grpcMessages(Buffer.concat(chunks)).map((m) => ProcessingResponse.decode(m));
            resolve({
              httpStatus,
              grpcStatus: trailers['grpc-status'] as string | undefined,
              grpcMessage: trailers['grpc-message'] as string | undefined,
              responses,
              destination: destinationOf(responses[0]),
              echoedBytes: responses.reduce((n, r) => n + streamedBytes(r), 0),
              responseHeadersReplies: responses.filter((r) => r.response?.$case === 'responseHeaders').length,
            });
          } catch (error) {
            reject(error instanceof Error ? error : new Error(String(error)));
          }
        });
        stream.end(bytes);
      });
    const answers: Answer[] = [];
    for (let i = 0; i < count; i++) answers.push(await one());
    return answers;
  } finally {
    session.close();
  }
}

function destinationOf(response: ProcessingResponse | undefined): string | undefined {
  if (response?.response?.$case !== 'requestHeaders') return undefined;
  const set = response.response.value.response?.headerMutation?.setHeaders.find((h) => h.header?.key === 'x-gateway-destination-endpoint');
  return set?.header ? Buffer.from(set.header.rawValue).toString('utf8') : undefined;
}

function streamedBytes(response: ProcessingResponse): number {
  if (response.response?.$case !== 'requestBody') return 0;
  const mutation = response.response.value.response?.bodyMutation?.mutation;
  return mutation?.$case === 'streamedResponse' ? mutation.value.body.length : 0;
}

/**
 * Throws unless every answer is a routed full-duplex reply: gRPC OK, a destination, the whole body
 * echoed, and as many response_headers replies as response_headers messages were sent.
 */
export function assertRouted(server: string, answers: Answer[], bodyBytes: number, responseHeaders = 0): void {
  for (const a of answers) {
    const problem =
      a.httpStatus !== 200
        ? `HTTP ${a.httpStatus}`
        : a.grpcStatus !== '0'
          ? `grpc-status ${a.grpcStatus ?? 'missing'} ${a.grpcMessage ?? ''}`
          : a.responses[0]?.response?.$case === 'immediateResponse'
            ? `immediate_response ${a.responses[0].response.value.status?.code ?? '?'}: ${Buffer.from(a.responses[0].response.value.body).toString('utf8')}`
            : a.destination === undefined
              ? 'no destination header in the first response'
              : a.echoedBytes !== bodyBytes
                ? `echoed ${a.echoedBytes} of ${bodyBytes} body bytes`
                : a.responseHeadersReplies !== responseHeaders
                  ? `${a.responseHeadersReplies} response_headers replies, expected ${responseHeaders}`
                  : undefined;
    if (problem) throw new Error(`${server} did not route the benchmark request: ${problem}`);
  }
}
