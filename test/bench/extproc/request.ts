import { connect, constants as h2 } from 'node:http2';
import { BodySendMode, EXT_PROC_PATH, ProcessingRequest, ProcessingResponse } from '@spillway/protocol';
import { bodyMessage, envoyRequestMessages, envoyResponseHeadersMessage } from '@spillway/testkit';

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

/** Common English words: a prompt of them tokenizes like ordinary prose (words recur, as in real text). */
const WORDS = (
  'the of and to in is that it for was on are as with his they at be this from have or by one had not but what all were when we ' +
  'there can an your which their said if do will each about how up out them then she many some so these would other into has more ' +
  'her two like him see time could no make than first been its who now people my made over did down only way find use may water ' +
  'long little very after words called just where most know get through back much go good new write our me man too any day same ' +
  'right look think also around another came come work three word must because does part even place well such here take why things ' +
  'help put years different away again off went old number great tell men say small every found still between name should home big ' +
  'give air line set own under read last never us left end along while might next sound below saw something thought both few those'
).split(' ');

/**
 * A JSON chat-completions body of exactly `bytes` bytes: one user message of prose-like text (words
 * drawn from WORDS by a fixed sequence, a sentence every dozen or so), `stream` as asked. The whole
 * prompt is one message, so an EPP with a tokenizer tokenizes all of it: no earlier turn to cache.
 */
export function chatBody(model: string, bytes: number, stream = false): string {
  const shell = (content: string) =>
    JSON.stringify({ model, messages: [{ role: 'user', content }], max_tokens: 256, temperature: 0, stream });
  const room = bytes - shell('').length;
  if (room < 0) throw new Error(`a ${bytes}-byte chat body is too small`);
  let text = '';
  let x = 12345;
  let inSentence = 0;
  while (text.length < room) {
    x = (x * 1103515245 + 12345) % 2147483648;
    const word = WORDS[x % WORDS.length] as string;
    text += inSentence === 0 ? word[0]?.toUpperCase() + word.slice(1) : word;
    inSentence = (inSentence + 1) % (9 + (x % 7));
    text += inSentence === 0 ? '. ' : ' ';
  }
  return shell(text.slice(0, room));
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

/** What Envoy sends for one request in a given configuration, beyond the shipped one's. */
export interface ExchangeOptions {
  path: string;
  body: string;
  subset: string[];
  /** The request body goes in chunks of at most this many bytes (one request_body message each). */
  chunkBytes: number;
  /** The response side: response_headers with the served endpoint, then (FULL_DUPLEX_STREAMED) the body chunks. */
  response?: {
    served: string;
    destination: string;
    /** `response_body_mode`: NONE (headers only) or FULL_DUPLEX_STREAMED (each chunk to the processor). */
    bodyMode: 'none' | 'full-duplex';
    contentType: string;
    /** The response body's chunks as the model server sends them (sent only in FULL_DUPLEX_STREAMED). */
    chunks: readonly Uint8Array[];
  };
}

export interface EncodedExchange extends EncodedRequest {
  /** The messages, one gRPC frame each, in order (the probe sends them one at a time). */
  frames: Buffer[];
  /** Frames up to and including response_headers; the rest are response body chunks. */
  headFrames: number;
  responseBodyBytes: number;
}

/**
 * The messages of one exchange as Envoy sends them: request_headers with protocol_config naming the
 * body modes, the request body in chunks, then optionally response_headers and (FULL_DUPLEX_STREAMED)
 * each response body chunk, the last with end_of_stream. The forwarded namespaces (`envoy.lb` once
 * the host is chosen, `envoy.lb.subset_hint` always) ride on every message, as Envoy attaches them.
 */
export function encodedExchange(options: ExchangeOptions): EncodedExchange {
  const bodyBytes = Buffer.byteLength(options.body);
  const messages = envoyRequestMessages({
    path: options.path,
    body: options.body,
    subset: options.subset,
    chunks: Math.max(1, Math.ceil(bodyBytes / options.chunkBytes)),
    mode: 'full-duplex',
  });
  const first = messages[0] as ProcessingRequest;
  const responseMode = options.response?.bodyMode === 'full-duplex' ? BodySendMode.FULL_DUPLEX_STREAMED : BodySendMode.NONE;
  first.protocolConfig = {
    requestBodyMode: BodySendMode.FULL_DUPLEX_STREAMED,
    responseBodyMode: responseMode,
    sendBodyWithoutWaitingForHeaderResponse: false,
  };
  let responseBodyBytes = 0;
  const response = options.response;
  if (response !== undefined) {
    const headers = envoyResponseHeadersMessage({
      status: 200,
      served: response.served,
      destination: response.destination,
      subset: options.subset,
      headers: { 'content-type': response.contentType },
    });
    messages.push(headers);
    if (response.bodyMode === 'full-duplex') {
      response.chunks.forEach((chunk, i) => {
        messages.push(bodyMessage('responseBody', chunk, i === response.chunks.length - 1, headers.metadataContext));
        responseBodyBytes += chunk.length;
      });
    }
  }
  const frames = messages.map((m) => grpcFrame(ProcessingRequest.encode(m).finish()));
  const headFrames = frames.length - (response?.bodyMode === 'full-duplex' ? response.chunks.length : 0);
  return { bytes: Buffer.concat(frames), messages: messages.length, bodyBytes, frames, headFrames, responseBodyBytes };
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
  /** Response body bytes echoed as streamed_response (FULL_DUPLEX_STREAMED response bodies only). */
  responseEchoedBytes: number;
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
              echoedBytes: responses.reduce((n, r) => n + streamedBytes(r, 'requestBody'), 0),
              responseHeadersReplies: responses.filter((r) => r.response?.$case === 'responseHeaders').length,
              responseEchoedBytes: responses.reduce((n, r) => n + streamedBytes(r, 'responseBody'), 0),
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

function streamedBytes(response: ProcessingResponse, side: 'requestBody' | 'responseBody'): number {
  if (response.response?.$case !== side) return 0;
  const mutation = response.response.value.response?.bodyMutation?.mutation;
  return mutation?.$case === 'streamedResponse' ? mutation.value.body.length : 0;
}

/**
 * Throws unless every answer is a routed full-duplex reply: gRPC OK, a destination, the whole body
 * echoed, as many response_headers replies as response_headers messages were sent, and the whole
 * response body (`responseBodyBytes`, when it was streamed to the processor) echoed too.
 */
export function assertRouted(server: string, answers: Answer[], bodyBytes: number, responseHeaders = 0, responseBodyBytes = 0): void {
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
                  : a.responseEchoedBytes !== responseBodyBytes
                    ? `echoed ${a.responseEchoedBytes} of ${responseBodyBytes} response body bytes`
                    : undefined;
    if (problem) throw new Error(`${server} did not route the benchmark request: ${problem}`);
  }
}
