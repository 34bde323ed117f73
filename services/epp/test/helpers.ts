import { credentials as grpcCredentials, type ChannelCredentials, type ClientDuplexStream, type ServiceError } from '@grpc/grpc-js';
import type { ProcessingRequest, ProcessingResponse } from '@spillway/protocol';
import { ExternalProcessorClient, POOL } from '@spillway/testkit';
import pino, { type Logger } from 'pino';
import { loadEppConfig, startEpp, type RunningEpp } from '@spillway/epp';

// Shared with the ext_proc benchmark, so they live in the test kit.
export { bodyMessage, envoyRequestMessages, healthStatus, POOL, TestPublisher, type PodSpec, type RequestOptions } from '@spillway/testkit';

/** Starts an EPP in-process on ephemeral ports, configured through its real flag parser. */
export async function startTestEpp(
  natsUrl: string,
  zone: string,
  extraArgs: string[] = [],
  logger: Logger = pino({ level: 'silent' }),
): Promise<RunningEpp> {
  const config = loadEppConfig(
    [
      '--pool',
      POOL,
      '--zone',
      zone,
      '--nats',
      natsUrl,
      '--host',
      '127.0.0.1',
      '--grpc-port',
      '0',
      '--health-port',
      '0',
      '--metrics-port',
      '0',
      ...extraArgs,
    ],
    {},
  );
  if (!config) throw new Error('unexpected --help');
  return startEpp(config, { logger, tickMs: 50 });
}

/** A pino logger whose JSON lines land in `lines`, parsed. */
export function capturingLogger(level = 'info'): { logger: Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const logger = pino({ level }, { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) });
  return { logger, lines };
}

const utf8 = new TextEncoder();
const text = new TextDecoder();

export function responseHeadersMessage(status: number, served?: string): ProcessingRequest {
  return {
    request: {
      $case: 'responseHeaders',
      value: {
        headers: { headers: [{ key: ':status', value: '', rawValue: utf8.encode(String(status)) }] },
        attributes: {},
        endOfStream: false,
      },
    },
    metadataContext:
      served === undefined
        ? undefined
        : { filterMetadata: { 'envoy.lb': { 'x-gateway-destination-endpoint-served': served } }, typedFilterMetadata: {} },
    attributes: {},
    observabilityMode: false,
  };
}

/** One ext_proc stream driven like Envoy: write messages, collect replies, see how it ended. */
export class EnvoyStream {
  readonly responses: ProcessingResponse[] = [];
  readonly ended: Promise<ServiceError | undefined>;
  private waiters: (() => void)[] = [];
  readonly call: ClientDuplexStream<ProcessingRequest, ProcessingResponse>;

  constructor(client: ExternalProcessorClient) {
    this.call = client.process();
    this.call.on('data', (response: ProcessingResponse) => {
      this.responses.push(response);
      for (const wake of this.waiters.splice(0)) wake();
    });
    this.ended = new Promise((resolve) => {
      this.call.on('error', (error: ServiceError) => resolve(error));
      this.call.on('end', () => resolve(undefined));
    });
    void this.ended.then(() => {
      for (const wake of this.waiters.splice(0)) wake();
    });
  }

  send(messages: ProcessingRequest[]): void {
    for (const message of messages) this.call.write(message);
  }

  /** Waits until `count` responses arrived (or the stream ended first). */
  async waitFor(count: number): Promise<ProcessingResponse[]> {
    let done = false;
    void this.ended.then(() => (done = true));
    while (this.responses.length < count && !done) {
      await new Promise<void>((resolve) => {
        this.waiters.push(resolve);
        setTimeout(resolve, 200);
      });
    }
    return this.responses;
  }

  close(): void {
    this.call.end();
  }
}

export function extProcClient(port: number, creds: ChannelCredentials = grpcCredentials.createInsecure()): ExternalProcessorClient {
  return new ExternalProcessorClient(`127.0.0.1:${port}`, creds);
}

/** The destination a headers (or buffered body) response carries: header value and metadata value. */
export function destinationOf(response: ProcessingResponse | undefined): {
  header?: string;
  metadata?: unknown;
  clearRouteCache?: boolean;
  usesValueField?: boolean;
} {
  const value = response?.response?.value as
    | {
        response?: {
          headerMutation?: { setHeaders: { header?: { key: string; value: string; rawValue: Uint8Array } }[] };
          clearRouteCache?: boolean;
        };
      }
    | undefined;
  const set = value?.response?.headerMutation?.setHeaders.find((h) => h.header?.key === 'x-gateway-destination-endpoint');
  const metadata = (response?.dynamicMetadata as Record<string, Record<string, unknown>> | undefined)?.['envoy.lb']?.[
    'x-gateway-destination-endpoint'
  ];
  return {
    header: set?.header ? text.decode(set.header.rawValue) : undefined,
    metadata,
    clearRouteCache: value?.response?.clearRouteCache,
    usesValueField: set?.header ? set.header.value !== '' : undefined,
  };
}

export function immediateOf(
  response: ProcessingResponse | undefined,
): { status: number; body: { error: { message: string; type: string; code: string } }; contentType?: string } | undefined {
  if (response?.response?.$case !== 'immediateResponse') return undefined;
  const value = response.response.value;
  const contentType = value.headers?.setHeaders.find((h) => h.header?.key === 'content-type')?.header;
  return {
    status: value.status?.code ?? 0,
    body: JSON.parse(text.decode(value.body)) as { error: { message: string; type: string; code: string } },
    contentType: contentType ? text.decode(contentType.rawValue) : undefined,
  };
}

export function streamedBodyOf(responses: ProcessingResponse[]): { body: string; endOfStream: boolean; chunks: number } {
  let body = '';
  let endOfStream = false;
  let chunks = 0;
  for (const response of responses) {
    if (response.response?.$case !== 'requestBody') continue;
    const mutation = response.response.value.response?.bodyMutation?.mutation;
    if (mutation?.$case !== 'streamedResponse') continue;
    body += text.decode(mutation.value.body);
    endOfStream = mutation.value.endOfStream;
    chunks++;
  }
  return { body, endOfStream, chunks };
}

export const completion = (model = 'llama', prompt = 'Hello there') => JSON.stringify({ model, prompt, max_tokens: 8 });
