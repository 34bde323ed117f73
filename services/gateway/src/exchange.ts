// One client request, end to end, as Envoy's ext_proc filter plus the override_host policy
// handle it (docs/protocol.md, infra/envoy/README.md):
//   request headers + body chunks -> EPP (full duplex) -> headers response (destination) and the
//   EPP's body -> try the listed endpoints in order -> response headers + body chunks -> EPP ->
//   its echoed body -> client.
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Client } from '@grpc/grpc-js';
import { status as GrpcStatus } from '@grpc/grpc-js';
import { DESTINATION_HEADER_PREFIX } from '@spillway/protocol';
import type { CommonResponse, ProcessingResponse } from '@spillway/protocol';
import type { Logger } from 'pino';
import type { Dispatcher } from 'undici';
import { canonicalAddress } from './endpoints.js';
import type { EndpointTable } from './endpoints.js';
import { EppStream } from './epp-client.js';
import type { StreamEvent } from './epp-client.js';
import { gatewayError } from './errors.js';
import type { HealthView } from './health.js';
import { bodyMessages, requestHeadersMessage, responseHeadersMessage } from './messages.js';
import { DynamicMetadata } from './metadata.js';
import { ProtocolViolation, applyHeaderMutation, destinationEntries, destinationOf, immediateReply } from './mutations.js';
import type { Headers, LocalReply } from './mutations.js';
import type { ResolvedOptions } from './options.js';
import type { Stats } from './stats.js';
import type { UpstreamResponse, Upstreams } from './upstream.js';

export interface ExchangeContext {
  readonly eppClient: Client;
  readonly table: EndpointTable;
  readonly health: HealthView;
  readonly upstreams: Upstreams;
  readonly stats: Stats;
  readonly logger: Logger;
  readonly options: ResolvedOptions;
}

// Connection-level headers are not part of the request Envoy hands to filters or upstreams.
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'upgrade',
  'te',
  'trailer',
  'expect',
  'http2-settings',
]);
const EMPTY = new Uint8Array(0);

/** Thrown inside an exchange to stop it with a reply (or silently, when the client is gone). */
class Stop extends Error {
  constructor(readonly reply: LocalReply | undefined) {
    super('exchange stopped');
  }
}

/** Reading the committed upstream response failed (connection reset, server killed). */
class UpstreamBodyError extends Error {
  constructor(cause: unknown) {
    super(cause instanceof Error ? `${(cause as { code?: string }).code ?? cause.name}: ${cause.message}` : String(cause));
  }
}

const NEVER = new Promise<never>(() => undefined);

export async function handleExchange(ctx: ExchangeContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  await new Exchange(ctx, req, res).run();
}

class Exchange {
  readonly #ctx: ExchangeContext;
  readonly #req: IncomingMessage;
  readonly #res: ServerResponse;
  readonly #abort = new AbortController();
  readonly #metadata = new DynamicMetadata();
  readonly #stream: EppStream;
  readonly #started = Date.now();
  #gone = false;
  #timedOut = false;
  #destination: string | undefined;
  #attempts = 0;
  #served: string | undefined;

  constructor(ctx: ExchangeContext, req: IncomingMessage, res: ServerResponse) {
    this.#ctx = ctx;
    this.#req = req;
    this.#res = res;
    const timeoutMs = ctx.options.requestTimeoutMs;
    // The stream's gRPC deadline bounds the whole exchange, so no stream outlives its request.
    this.#stream = new EppStream(ctx.eppClient, new Date(Date.now() + timeoutMs));
    const timer = setTimeout(() => {
      this.#timedOut = true;
      this.#abort.abort();
      this.#stream.cancel();
    }, timeoutMs);
    res.once('close', () => {
      clearTimeout(timer);
      if (res.writableFinished) return;
      // The client went away: cancel the ext_proc stream and the upstream request.
      this.#gone = true;
      ctx.stats.clientAbort();
      this.#abort.abort();
      this.#stream.cancel();
    });
  }

  async run(): Promise<void> {
    this.#ctx.stats.request();
    try {
      const request = await this.#requestPhase();
      const forward = await this.#forward(request);
      await this.#responsePhase(forward);
    } catch (error) {
      if (!(error instanceof Stop)) throw error;
      // Like Envoy resetting the side stream: the exchange is over before the protocol's end.
      this.#stream.cancel();
      if (error.reply !== undefined) this.#reply(error.reply);
    } finally {
      this.#close();
      this.#ctx.logger.debug(
        {
          method: this.#req.method,
          path: this.#req.url,
          status: this.#res.statusCode,
          destination: this.#destination,
          served: this.#served,
          attempts: this.#attempts,
          ms: Date.now() - this.#started,
          aborted: this.#gone,
        },
        'request',
      );
    }
  }

  // ---- request path: headers and body to the EPP, its decision and body back ---------------

  async #requestPhase(): Promise<{ headers: Headers; body: Buffer | undefined }> {
    const req = this.#req;
    const hasBody = req.headers['transfer-encoding'] !== undefined || Number(req.headers['content-length'] ?? 0) > 0;
    const headers = clientHeaders(req);
    if (this.#ctx.options.subsetHint) this.#metadata.setSubsetHint(this.#ctx.health.healthyLocal());
    // Not awaited on its own: the EPP may answer (immediate_response) before the body is sent.
    const sending = this.#stream
      .send([requestHeadersMessage(headers, !hasBody, this.#metadata.forwarded())])
      .then(() => (hasBody ? this.#sendRequestBody() : undefined));
    sending.catch(() => undefined);

    // The EPP sees every client header, but a client's own x-gateway-destination-endpoint* values
    // must never steer routing: only what the EPP sets survives into the forwarded request.
    let forwarded: Headers = headers.filter(([name]) => !name.startsWith(':') && !name.startsWith(DESTINATION_HEADER_PREFIX));
    const first = await this.#nextMessage(sending);
    const headersResponse = this.#expect(first, 'requestHeaders');
    forwarded = this.#applyCommon(forwarded, headersResponse);
    if (!hasBody) return { headers: forwarded, body: undefined };

    // FULL_DUPLEX_STREAMED: the body to forward is the one the EPP streams back.
    const chunks: Uint8Array[] = [];
    let size = 0;
    for (;;) {
      const message = await this.#nextMessage(sending);
      const mutation = this.#expect(message, 'requestBody')?.bodyMutation?.mutation;
      if (mutation?.$case !== 'streamedResponse') {
        throw this.#violation('a request body response without streamed_response in FULL_DUPLEX_STREAMED mode');
      }
      size += mutation.value.body.length;
      if (size > this.#ctx.options.maxBodyBytes) {
        throw new Stop(gatewayError(413, 'request_too_large', `request body exceeds ${this.#ctx.options.maxBodyBytes} bytes`));
      }
      chunks.push(mutation.value.body);
      if (mutation.value.endOfStream) break;
    }
    return { headers: forwarded, body: Buffer.concat(chunks) };
  }

  /**
   * Client body chunks as they arrive. With a content-length the chunk that completes it carries
   * end_of_stream; otherwise an empty end_of_stream message follows the last one, as Envoy does.
   */
  async #sendRequestBody(): Promise<void> {
    const declared = this.#req.headers['content-length'];
    const length = declared === undefined ? undefined : Number(declared);
    let seen = 0;
    let ended = false;
    for await (const chunk of this.#req as AsyncIterable<Buffer>) {
      seen += chunk.length;
      ended = length !== undefined && seen >= length;
      await this.#stream.send(bodyMessages('request', chunk, ended, this.#metadata.forwarded()));
    }
    if (!ended) await this.#stream.send(bodyMessages('request', EMPTY, true, this.#metadata.forwarded()));
  }

  /**
   * The EPP's next message on the request path. The decision timer starts once everything
   * was sent: in full duplex the EPP answers only after the end of the body.
   */
  async #nextMessage(sending: Promise<void>): Promise<ProcessingResponse> {
    let timer: NodeJS.Timeout | undefined;
    let settled = false;
    const timeoutMs = this.#ctx.options.eppTimeoutMs;
    const timedOut = new Promise<'timeout'>((resolve) => {
      const start = (): void => {
        if (!settled) timer = setTimeout(() => resolve('timeout'), timeoutMs);
      };
      void sending.then(start, () => undefined);
    });
    try {
      const event = await Promise.race([this.#stream.next(), timedOut]);
      if (event === 'timeout') {
        this.#ctx.stats.eppError();
        throw new Stop(gatewayError(504, 'epp_timeout', `the endpoint picker sent no decision within ${timeoutMs} ms`));
      }
      return this.#message(event, 'request');
    } finally {
      settled = true;
      clearTimeout(timer);
    }
  }

  /** A message from the stream, or a Stop for how it ended. */
  #message(event: StreamEvent, phase: 'request' | 'response'): ProcessingResponse {
    if (this.#gone) throw new Stop(undefined);
    if (this.#timedOut)
      throw new Stop(gatewayError(504, 'request_timeout', `no complete response within ${this.#ctx.options.requestTimeoutMs} ms`));
    if (event.kind === 'message') {
      const response = event.message.response;
      if (response?.$case === 'immediateResponse') {
        const reply = immediateReply(response.value);
        this.#ctx.stats.eppRejection(reply.status);
        this.#metadata.receive(event.message.dynamicMetadata);
        throw new Stop(reply);
      }
      return event.message;
    }
    this.#ctx.stats.eppError();
    if (event.kind === 'end') {
      // Envoy would carry on without the processor, but in full duplex it has already drained
      // the body into the stream, so there is nothing left to carry on with.
      throw new Stop(
        gatewayError(phase === 'request' ? 503 : 502, 'epp_closed', `the endpoint picker closed the stream during the ${phase} phase`),
      );
    }
    const unavailable = event.code === GrpcStatus.UNAVAILABLE;
    this.#ctx.logger.warn({ code: GrpcStatus[event.code], details: event.details, phase }, 'ext_proc stream failed');
    if (event.code === GrpcStatus.DEADLINE_EXCEEDED)
      throw new Stop(gatewayError(504, 'epp_timeout', `endpoint picker deadline exceeded: ${event.details}`));
    throw new Stop(
      gatewayError(
        503,
        unavailable ? 'epp_unavailable' : 'epp_error',
        `endpoint picker ${unavailable ? 'unavailable' : 'failed'} (${GrpcStatus[event.code]}): ${event.details}`,
      ),
    );
  }

  /** The CommonResponse of the reply the protocol allows next; anything else is spurious. */
  #expect(
    message: ProcessingResponse,
    kind: 'requestHeaders' | 'requestBody' | 'responseHeaders' | 'responseBody',
  ): CommonResponse | undefined {
    const response = message.response;
    if (response === undefined || response.$case !== kind) {
      throw this.#violation(`expected a ${kind} response, got ${response?.$case ?? 'an empty response'}`);
    }
    this.#metadata.receive(message.dynamicMetadata);
    switch (response.$case) {
      case 'requestHeaders':
      case 'requestBody':
      case 'responseHeaders':
      case 'responseBody':
        return response.value.response;
      default:
        throw this.#violation(`unexpected ${kind} response`);
    }
  }

  #applyCommon(headers: Headers, response: CommonResponse | undefined): Headers {
    try {
      return applyHeaderMutation(headers, response?.headerMutation);
    } catch (error) {
      if (error instanceof ProtocolViolation) throw this.#violation(error.message);
      throw error;
    }
  }

  #violation(message: string): Stop {
    this.#ctx.stats.eppError();
    this.#ctx.logger.warn({ reason: message }, 'ext_proc protocol violation');
    return new Stop(gatewayError(500, 'epp_protocol_error', `endpoint picker protocol error: ${message}`));
  }

  // ---- override_host: walk the list ----------------------------------------------------------

  async #forward(request: { headers: Headers; body: Buffer | undefined }): Promise<{ address: string; response: UpstreamResponse }> {
    const { upstreams, health, stats, options } = this.#ctx;
    const entries = destinationEntries(destinationOf(this.#metadata, request.headers));
    this.#destination = entries.join(',');
    if (entries.length === 0) throw new Stop(gatewayError(503, 'no_destination', 'the endpoint picker returned no destination'));
    // Protocol headers (the EPP's destination) are routing state, not something a model server needs.
    const upstreamRequest = {
      method: this.#req.method ?? 'GET',
      path: this.#req.url ?? '/',
      headers: request.headers.filter(([name]) => !name.startsWith(DESTINATION_HEADER_PREFIX) && name !== 'content-length'),
      body: request.body,
    };
    const budget = options.retries + 1;
    const usable = entries.map((entry) => this.#resolve(entry));
    stats.unknownSkipped(usable.filter((address) => address === undefined).length);
    const remaining = usable.filter((address): address is string => address !== undefined);
    let failure: LocalReply | undefined;
    while (remaining.length > 0 && this.#attempts < budget) {
      const address = remaining.shift() as string;
      this.#attempts++;
      // selected_host_key: written after every pick, so response messages name the endpoint used.
      this.#metadata.setServed(address);
      const result = await upstreams.attempt(address, upstreamRequest, this.#abort.signal);
      if (!result.ok) {
        if (result.reason === 'aborted') throw this.#aborted();
        health.reportFailure(address);
        this.#ctx.logger.info({ endpoint: address, reason: result.reason, message: result.message }, 'upstream attempt failed');
        failure =
          result.reason === 'timeout'
            ? gatewayError(504, 'upstream_timeout', `upstream ${address}: ${result.message}`)
            : gatewayError(503, 'upstream_unavailable', `upstream ${address} ${result.reason}: ${result.message}`);
        continue;
      }
      const lastChance = remaining.length === 0 || this.#attempts >= budget;
      if (result.response.statusCode >= 500 && !lastChance) {
        health.reportFailure(address);
        this.#ctx.logger.info({ endpoint: address, status: result.response.statusCode }, 'upstream answered 5xx, trying the next endpoint');
        result.response.discard();
        continue;
      }
      return { address, response: result.response };
    }
    if (this.#attempts === 0) {
      throw new Stop(gatewayError(503, 'no_known_endpoint', `no destination entry is a known endpoint: ${this.#destination}`));
    }
    if (failure !== undefined) await this.#reportLocalReply(failure);
    throw new Stop(failure);
  }

  /**
   * Every listed endpoint failed: like Envoy's own local reply, the response headers (the 503 or
   * 504, and the last host tried as the served endpoint) go through ext_proc, so the EPP sees the
   * connection failure and penalises its primary. The EPP's answer is awaited briefly; whatever
   * it is, the client gets the local reply.
   */
  async #reportLocalReply(reply: LocalReply): Promise<void> {
    try {
      await this.#stream.send([responseHeadersMessage([[':status', String(reply.status)]], true, this.#metadata.forwarded())]);
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, this.#ctx.options.eppTimeoutMs);
      });
      await Promise.race([this.#stream.next(), timeout]).finally(() => clearTimeout(timer));
    } catch {
      // The EPP's stream is gone: nothing to report to.
    }
  }

  /** The address to try for one destination entry, or undefined to skip it (override_host). */
  #resolve(entry: string): string | undefined {
    const known = this.#ctx.table.lookup(entry);
    if (known !== undefined) return known.address;
    if (!this.#ctx.options.passthrough) return undefined;
    return canonicalAddress(entry);
  }

  #aborted(): Stop {
    return this.#timedOut
      ? new Stop(gatewayError(504, 'request_timeout', `no complete response within ${this.#ctx.options.requestTimeoutMs} ms`))
      : new Stop(undefined);
  }

  // ---- response path: headers and body to the EPP, its echo to the client --------------------

  async #responsePhase({ address, response }: { address: string; response: UpstreamResponse }): Promise<void> {
    const { health, stats } = this.#ctx;
    this.#served = address;
    if (response.statusCode >= 500) health.reportFailure(address);
    else health.reportSuccess(address);
    const first = destinationEntries(this.#destination)[0];
    stats.served(address, first === undefined || canonicalAddress(first) !== address);

    const upstreamHeaders = responseHeaders(response.headers);
    const { bodiless } = response;
    const headersMessage = responseHeadersMessage(
      [[':status', String(response.statusCode)], ...upstreamHeaders],
      bodiless,
      this.#metadata.forwarded(),
    );
    const sending = this.#stream.send([headersMessage]).then(() => (bodiless ? undefined : this.#sendResponseBody(response.body)));
    // An upstream that fails mid-body ends the exchange at once, as Envoy resets the downstream
    // stream: the client must not wait for its own timeout on a response that can never complete.
    let over = false;
    const upstreamFailed = sending.then(
      () => NEVER,
      (error: unknown) => {
        if (error instanceof UpstreamBodyError && !over) throw this.#upstreamReset(address, error);
        return NEVER;
      },
    );
    upstreamFailed.catch(() => undefined);
    try {
      const headersResponse = this.#expect(await this.#nextResponse(upstreamFailed), 'responseHeaders');
      // In FULL_DUPLEX_STREAMED Envoy drops content-length: the EPP may change the body.
      const headers = this.#applyCommon(upstreamHeaders, headersResponse).filter(([name]) => name !== 'content-length');
      this.#res.writeHead(response.statusCode, [...flat(headers), ...flat(this.#observability())]);
      this.#res.flushHeaders();
      if (bodiless) {
        this.#res.end();
        return;
      }
      for (;;) {
        const mutation = this.#expect(await this.#nextResponse(upstreamFailed), 'responseBody')?.bodyMutation?.mutation;
        if (mutation?.$case !== 'streamedResponse') {
          throw this.#violation('a response body response without streamed_response in FULL_DUPLEX_STREAMED mode');
        }
        if (mutation.value.body.length > 0) await this.#write(mutation.value.body);
        if (mutation.value.endOfStream) break;
      }
      this.#res.end();
    } finally {
      // Stops reading the upstream if the EPP or the client ended the exchange early.
      over = true;
      response.discard();
    }
  }

  /** Upstream body chunks to the EPP; a failure to read the upstream is an UpstreamBodyError. */
  async #sendResponseBody(body: AsyncIterable<Uint8Array>): Promise<void> {
    const chunks = body[Symbol.asyncIterator]();
    for (;;) {
      let next: IteratorResult<Uint8Array>;
      try {
        next = await chunks.next();
      } catch (error) {
        // Our own abort (client gone, request timeout) is not the upstream's failure.
        if (this.#abort.signal.aborted) throw error;
        throw new UpstreamBodyError(error);
      }
      if (next.done === true) break;
      await this.#stream.send(bodyMessages('response', next.value, false, this.#metadata.forwarded()));
    }
    await this.#stream.send(bodyMessages('response', EMPTY, true, this.#metadata.forwarded()));
  }

  /** The EPP's next message on the response path, unless the upstream fails first. */
  async #nextResponse(upstreamFailed: Promise<never>): Promise<ProcessingResponse> {
    return this.#message(await Promise.race([this.#stream.next(), upstreamFailed]), 'response');
  }

  #upstreamReset(address: string, error: UpstreamBodyError): Stop {
    this.#ctx.health.reportFailure(address);
    this.#ctx.stats.upstreamReset();
    this.#ctx.logger.warn(
      { endpoint: address, message: error.message, clientHasHeaders: this.#res.headersSent },
      'upstream failed mid-response; ending the client response',
    );
    return new Stop(gatewayError(502, 'upstream_reset', `upstream ${address} failed during the response: ${error.message}`));
  }

  async #write(chunk: Uint8Array): Promise<void> {
    const res = this.#res;
    if (this.#gone || res.destroyed) throw new Stop(undefined);
    if (res.write(chunk)) return;
    // 'close' ends the wait if the client leaves; once() rejects on 'error', which means the same.
    await Promise.race([once(res, 'drain'), once(res, 'close')]).catch(() => undefined);
  }

  #observability(): Headers {
    const headers: Headers = [['x-spillway-attempts', String(this.#attempts)]];
    if (this.#served !== undefined) headers.push(['x-spillway-served-endpoint', this.#served]);
    if (this.#destination !== undefined) headers.push(['x-spillway-destination', this.#destination]);
    return headers;
  }

  #reply(reply: LocalReply): void {
    const res = this.#res;
    if (this.#gone || res.destroyed) return;
    if (res.headersSent) {
      // Too late for a status: cut the response so the client sees it is incomplete.
      res.destroy();
      return;
    }
    const headers = reply.headers.filter(([name]) => name !== 'content-length');
    res.writeHead(reply.status, [...flat(headers), ...flat(this.#observability()), 'content-length', String(reply.body.length)]);
    res.end(reply.body);
  }

  #close(): void {
    if (this.#res.headersSent && !this.#gone) this.#ctx.stats.status(this.#res.statusCode);
    this.#ctx.stats.attempts(this.#attempts);
    // Envoy closes its side after the last expected response; a stream still open after a
    // grace period (an EPP that never finishes) is cancelled rather than left to its deadline.
    this.#stream.end();
    if (!this.#stream.closed) setTimeout(() => this.#stream.cancel(), 1_000).unref();
    this.#abort.abort();
  }
}

/** Pseudo-headers first, then the client's headers as received, minus hop-by-hop ones. */
function clientHeaders(req: IncomingMessage): Headers {
  const headers: Headers = [
    [':method', req.method ?? 'GET'],
    [':path', req.url ?? '/'],
    [':authority', req.headers.host ?? ''],
    [':scheme', 'http'],
  ];
  const raw = req.rawHeaders;
  let requestId = false;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = (raw[i] as string).toLowerCase();
    if (HOP_BY_HOP.has(name) || name === 'host') continue;
    if (name === 'x-request-id') requestId = true;
    headers.push([name, raw[i + 1] as string]);
  }
  // Envoy's connection manager adds these before any filter runs.
  if (!requestId) headers.push(['x-request-id', randomUUID()]);
  headers.push(['x-forwarded-proto', 'http']);
  return headers;
}

function responseHeaders(headers: Dispatcher.ResponseData['headers']): Headers {
  const list: Headers = [];
  for (const [name, value] of Object.entries(headers)) {
    const key = name.toLowerCase();
    if (value === undefined || HOP_BY_HOP.has(key)) continue;
    for (const item of Array.isArray(value) ? value : [value]) list.push([key, item]);
  }
  return list;
}

function flat(headers: Headers): string[] {
  return headers.flatMap(([name, value]) => [name, value]);
}
