import { credentials as grpcCredentials, type ChannelCredentials, type ClientDuplexStream, type ServiceError } from '@grpc/grpc-js';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import type { MetricsEvent, ReadinessEvent } from '@spillway/events';
import { EventPublisher } from '@spillway/bus';
import type {
  ServingStatus} from '@spillway/protocol';
import {
  BodySendMode,
  ExternalProcessorClient,
  HealthClient,
  type ProcessingRequest,
  type ProcessingResponse,
} from '@spillway/protocol';
import pino, { type Logger } from 'pino';
import { loadEppConfig, startEpp, type RunningEpp } from '@spillway/epp';

export const POOL = 'llama';

/** Starts an EPP in-process on ephemeral ports, configured through its real flag parser. */
export async function startTestEpp(natsUrl: string, zone: string, extraArgs: string[] = [], logger: Logger = pino({ level: 'silent' })): Promise<RunningEpp> {
  const config = loadEppConfig(
    ['--pool', POOL, '--zone', zone, '--nats', natsUrl, '--host', '127.0.0.1', '--grpc-port', '0', '--health-port', '0', '--metrics-port', '0', ...extraArgs],
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

export interface PodSpec {
  pod: string;
  zone: string;
  address: string;
  region?: string;
  waiting?: number;
  running?: number;
  kv?: number;
  ready?: boolean;
}

/** Publishes readiness and a fresh metrics sample for each pod, as a collector would. */
export class TestPublisher {
  private constructor(
    readonly nc: NatsConnection,
    readonly publisher: EventPublisher,
  ) {}

  static async connect(url: string): Promise<TestPublisher> {
    const nc = await connect({ servers: url });
    return new TestPublisher(nc, new EventPublisher(nc));
  }

  async pods(specs: PodSpec[], at = Date.now()): Promise<void> {
    for (const spec of specs) {
      const readiness: ReadinessEvent = {
        v: 1,
        kind: 'readiness',
        pool: POOL,
        zone: spec.zone,
        pod: spec.pod,
        address: spec.address,
        ready: spec.ready ?? true,
        observedAt: at,
        ...(spec.region ? { region: spec.region } : {}),
      };
      await this.publisher.publishReadiness(readiness);
      this.metrics(spec, at);
    }
    await this.nc.flush();
  }

  metrics(spec: PodSpec, at = Date.now()): void {
    const event: MetricsEvent = {
      v: 1,
      kind: 'metrics',
      pool: POOL,
      zone: spec.zone,
      pod: spec.pod,
      observedAt: at,
      waitingRequests: spec.waiting ?? 0,
      runningRequests: spec.running ?? 0,
      kvCacheUsage: spec.kv ?? 0,
    };
    this.publisher.publishMetrics(event);
  }

  async close(): Promise<void> {
    await this.nc.close();
  }
}

const utf8 = new TextEncoder();
const text = new TextDecoder();

export interface RequestOptions {
  path?: string;
  body?: string | Uint8Array;
  /** Split the body into this many chunks. */
  chunks?: number;
  mode?: 'full-duplex' | 'buffered';
  subset?: unknown;
  headers?: Record<string, string>;
  /** Send no protocol_config (Envoy before 1.34). */
  noProtocolConfig?: boolean;
}

/** The messages Envoy sends for one HTTP request, as our generated types. */
export function envoyRequestMessages(options: RequestOptions = {}): ProcessingRequest[] {
  const body = typeof options.body === 'string' ? utf8.encode(options.body) : options.body;
  const mode = options.mode === 'buffered' ? BodySendMode.BUFFERED : BodySendMode.FULL_DUPLEX_STREAMED;
  const headers = {
    ':method': body ? 'POST' : 'GET',
    ':path': options.path ?? '/v1/completions',
    ':authority': 'gateway',
    'content-type': 'application/json',
    ...options.headers,
  };
  const metadataContext =
    options.subset === undefined
      ? undefined
      : { filterMetadata: { 'envoy.lb.subset_hint': { 'x-gateway-destination-endpoint-subset': options.subset } }, typedFilterMetadata: {} };
  const messages: ProcessingRequest[] = [
    {
      request: {
        $case: 'requestHeaders',
        value: {
          headers: { headers: Object.entries(headers).map(([key, value]) => ({ key, value: '', rawValue: utf8.encode(value) })) },
          attributes: {},
          endOfStream: body === undefined,
        },
      },
      metadataContext,
      attributes: {},
      observabilityMode: false,
      protocolConfig: options.noProtocolConfig
        ? undefined
        : { requestBodyMode: mode, responseBodyMode: mode, sendBodyWithoutWaitingForHeaderResponse: false },
    },
  ];
  if (body) {
    const n = Math.max(1, options.chunks ?? 1);
    const size = Math.ceil(body.length / n);
    for (let i = 0; i < n; i++) {
      const chunk = body.subarray(i * size, Math.min(body.length, (i + 1) * size));
      messages.push(bodyMessage('requestBody', chunk, i === n - 1, metadataContext));
    }
  }
  return messages;
}

export function bodyMessage(
  kind: 'requestBody' | 'responseBody',
  chunk: Uint8Array,
  endOfStream: boolean,
  metadataContext?: ProcessingRequest['metadataContext'],
): ProcessingRequest {
  return {
    request: { $case: kind, value: { body: chunk, endOfStream, endOfStreamWithoutMessage: false, grpcMessageCompressed: false } },
    metadataContext,
    attributes: {},
    observabilityMode: false,
  } as ProcessingRequest;
}

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
      served === undefined ? undefined : { filterMetadata: { 'envoy.lb': { 'x-gateway-destination-endpoint-served': served } }, typedFilterMetadata: {} },
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
    this.ended.then(() => {
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

export function healthStatus(port: number, service: string, creds: ChannelCredentials = grpcCredentials.createInsecure()): Promise<ServingStatus | 'NOT_FOUND'> {
  const client = new HealthClient(`127.0.0.1:${port}`, creds);
  return new Promise((resolve, reject) => {
    client.check({ service }, (error, response) => {
      client.close();
      if (error) {
        if (error.code === 5) resolve('NOT_FOUND');
        else reject(error);
      } else resolve(response.status);
    });
  });
}

/** The destination a headers (or buffered body) response carries: header value and metadata value. */
export function destinationOf(response: ProcessingResponse | undefined): { header?: string; metadata?: unknown; clearRouteCache?: boolean; usesValueField?: boolean } {
  const value = response?.response?.value as { response?: { headerMutation?: { setHeaders: { header?: { key: string; value: string; rawValue: Uint8Array } }[] }; clearRouteCache?: boolean } } | undefined;
  const set = value?.response?.headerMutation?.setHeaders.find((h) => h.header?.key === 'x-gateway-destination-endpoint');
  const metadata = (response?.dynamicMetadata as Record<string, Record<string, unknown>> | undefined)?.['envoy.lb']?.['x-gateway-destination-endpoint'];
  return {
    header: set?.header ? text.decode(set.header.rawValue) : undefined,
    metadata,
    clearRouteCache: value?.response?.clearRouteCache,
    usesValueField: set?.header ? set.header.value !== '' : undefined,
  };
}

export function immediateOf(response: ProcessingResponse | undefined): { status: number; body: { error: { message: string; type: string; code: string } }; contentType?: string } | undefined {
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
