// ProcessingRequest builders: the messages Envoy's ext_proc filter sends (docs/protocol.md).
import { BODY_CHUNK_BYTES, BodySendMode } from '@spillway/protocol';
import type { HeaderValue, HttpHeaders, Metadata, ProcessingRequest } from '@spillway/protocol';
import type { BodyMode, ProcessingMode } from './ext-proc-filter.js';

export type HeaderList = ReadonlyArray<readonly [name: string, value: string]>;

/** Header values go in raw_value only, as Envoy sends them; keys lower-cased. */
function headerMap(headers: HeaderList): HttpHeaders['headers'] {
  const list: HeaderValue[] = headers.map(([key, value]) => ({
    key: key.toLowerCase(),
    value: '',
    rawValue: Buffer.from(value, 'latin1'),
  }));
  return { headers: list };
}

function base(metadata: Metadata | undefined): Omit<ProcessingRequest, 'request'> {
  return { metadataContext: metadata, attributes: {}, observabilityMode: false };
}

const SEND_MODE: Readonly<Record<BodyMode, BodySendMode>> = {
  none: BodySendMode.NONE,
  buffered: BodySendMode.BUFFERED,
  'full-duplex': BodySendMode.FULL_DUPLEX_STREAMED,
};

/**
 * The first message of a stream: request headers (pseudo-headers first) with protocol_config
 * announcing both body modes (Filter::encodeProtocolConfig); end_of_stream when the request has
 * no body.
 */
export function requestHeadersMessage(
  headers: HeaderList,
  endOfStream: boolean,
  metadata: Metadata | undefined,
  mode: ProcessingMode,
): ProcessingRequest {
  return {
    ...base(metadata),
    request: { $case: 'requestHeaders', value: { headers: headerMap(headers), attributes: {}, endOfStream } },
    protocolConfig: {
      requestBodyMode: SEND_MODE[mode.requestBody],
      responseBodyMode: SEND_MODE[mode.responseBody],
      sendBodyWithoutWaitingForHeaderResponse: false,
    },
  };
}

export function responseHeadersMessage(headers: HeaderList, endOfStream: boolean, metadata: Metadata | undefined): ProcessingRequest {
  return {
    ...base(metadata),
    request: { $case: 'responseHeaders', value: { headers: headerMap(headers), attributes: {}, endOfStream } },
  };
}

/**
 * A body chunk as request_body or response_body messages, split so no message exceeds what
 * Envoy sends of a streamed body (64 KiB; a buffered body goes whole: `maxBytes` Infinity);
 * end_of_stream on the last piece only. An empty chunk with end_of_stream is how Envoy ends a
 * body whose length it did not know in advance.
 */
export function bodyMessages(
  direction: 'request' | 'response',
  chunk: Uint8Array,
  endOfStream: boolean,
  metadata: Metadata | undefined,
  maxBytes = BODY_CHUNK_BYTES,
): ProcessingRequest[] {
  const $case = direction === 'request' ? 'requestBody' : 'responseBody';
  const messages: ProcessingRequest[] = [];
  let offset = 0;
  do {
    const end = Math.min(offset + maxBytes, chunk.length);
    messages.push({
      ...base(metadata),
      request: {
        $case,
        value: {
          body: chunk.subarray(offset, end),
          endOfStream: endOfStream && end === chunk.length,
          endOfStreamWithoutMessage: false,
          grpcMessageCompressed: false,
        },
      },
    });
    offset = end;
  } while (offset < chunk.length);
  return messages;
}
