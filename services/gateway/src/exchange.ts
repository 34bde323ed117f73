// One client request, end to end, as Envoy's ext_proc filter, router and the shipped config's
// override_host policy handle it (docs/protocol.md, "The development gateway"):
//   request headers (+ body, per the request body mode) -> EPP -> its replies (destination, body)
//   -> the EPP's list, then the fallback policy, attempt by attempt per the retry policy
//   -> response headers (+ body, per the response body mode) -> EPP -> client.
// The ext_proc rules themselves (valid replies, timers, failures, stream close) are in
// ext-proc-filter.ts; ext-proc-session.ts runs them on the stream.
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { DESTINATION_HEADER_PREFIX } from '@spillway/protocol';
import type { CommonResponse, ProcessingResponse } from '@spillway/protocol';
import type { Logger } from 'pino';
import type { Dispatcher } from 'undici';
import { BodyReadError, BodyReader, BodyTooLarge } from './bodies.js';
import type { EppCluster } from './epp-cluster.js';
import { gatewayError } from './errors.js';
import { ExtProcSession } from './ext-proc-session.js';
import type { EppEvent } from './ext-proc-session.js';
import type { HealthView } from './health.js';
import { DynamicMetadata } from './metadata.js';
import { ProtocolViolation, applyHeaderMutation, destinationEntries, destinationOf } from './mutations.js';
import type { Headers, LocalReply } from './mutations.js';
import type { ResolvedOptions } from './options.js';
import { DestinationWalk } from './override-host.js';
import type { ModelServers } from './model-servers.js';
import type { SubsetFilter } from './subset-filter.js';
import { retriesFailure, retriesStatus, retryBackOffMs } from './retry-policy.js';
import type { AttemptFailure } from './retry-policy.js';
import type { Stats } from './stats.js';
import type { UpstreamRequest, UpstreamResponse, Upstreams } from './upstream.js';

export interface ExchangeContext {
  /** The EPP hosts, health-checked, a new stream's host picked by round robin. */
  readonly epp: EppCluster;
  /** The model-server cluster: its hosts now and its fallback policy, shared by all requests. */
  readonly servers: ModelServers;
  readonly health: HealthView;
  /** What the set_metadata filter before ext_proc writes (the subset hint and the gateway's zone). */
  readonly subsetFilter: SubsetFilter;
  readonly upstreams: Upstreams;
  readonly stats: Stats;
  readonly logger: Logger;
  readonly options: ResolvedOptions;
  /** Jitter for retry back-off. */
  readonly random: () => number;
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

/** Thrown inside an exchange to stop it with a reply (or silently, when the client is gone). */
class Stop extends Error {
  constructor(readonly reply: LocalReply | undefined) {
    super('exchange stopped');
  }
}

/** An attempt that ended by itself: committed, or failed in a way the retry policy judges. */
type SettledAttempt =
  | { readonly ok: true; readonly response: UpstreamResponse }
  | { readonly ok: false; readonly reason: AttemptFailure; readonly message: string };

interface ForwardRequest {
  readonly headers: Headers;
  readonly body: Buffer | undefined;
}

/** What answers the client: a model server's response, or the router's own local reply. */
interface Answer {
  /** The host of the last attempt (what selected_host_key names), if any. */
  readonly address: string | undefined;
  readonly response: UpstreamResponse;
  readonly local: boolean;
}

export async function handleExchange(ctx: ExchangeContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  await new Exchange(ctx, req, res).run();
}

/** How long after the request's deadline its ext_proc stream's gRPC deadline falls. */
const STREAM_DEADLINE_GRACE_MS = 1_000;

class Exchange {
  readonly #ctx: ExchangeContext;
  readonly #req: IncomingMessage;
  readonly #res: ServerResponse;
  readonly #abort = new AbortController();
  readonly #metadata = new DynamicMetadata();
  readonly #session: ExtProcSession;
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
    const { options } = ctx;
    const timeoutMs = options.requestTimeoutMs;
    // The exchange's own timer answers the client (504 request_timeout) and closes the stream; the
    // stream's gRPC deadline, a little later, only guarantees that no stream outlives its request.
    // Were the two equal, a DEADLINE_EXCEEDED could win the race and turn the 504 into status_on_error.
    this.#session = new ExtProcSession(
      {
        pickEpp: () => ctx.epp.pick(),
        rules: {
          mode: options.processingMode,
          failureModeAllow: options.failureModeAllow,
          streamCloseOptimization: options.streamCloseOptimization,
          statusOnError: options.statusOnError,
        },
        messageTimeoutMs: options.eppTimeoutMs,
        metadata: this.#metadata,
        stats: ctx.stats,
        logger: ctx.logger,
      },
      new Date(Date.now() + timeoutMs + STREAM_DEADLINE_GRACE_MS),
    );
    const timer = setTimeout(() => {
      this.#timedOut = true;
      this.#abort.abort();
      this.#session.close();
    }, timeoutMs);
    res.once('close', () => {
      clearTimeout(timer);
      if (res.writableFinished) return;
      // The client went away: the filter is destroyed (the stream closed) and the upstream reset.
      this.#gone = true;
      ctx.stats.clientAbort();
      this.#abort.abort();
      this.#session.close();
    });
  }

  async run(): Promise<void> {
    this.#ctx.stats.request();
    try {
      const request = await this.#requestPhase();
      const answer = await this.#forward(request);
      await this.#responsePhase(answer);
    } catch (error) {
      if (!(error instanceof Stop)) throw error;
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

  // ---- request path: headers and body to the EPP, its replies back ----------------------------

  async #requestPhase(): Promise<ForwardRequest> {
    const req = this.#req;
    const { options } = this.#ctx;
    const declared = req.headers['content-length'];
    const hasBody = req.headers['transfer-encoding'] !== undefined || Number(declared ?? 0) > 0;
    const headers = clientHeaders(req);
    if (options.subsetHint) this.#ctx.subsetFilter.apply(this.#metadata);
    // The EPP sees every client header, but a client's own x-gateway-destination-endpoint* values
    // never go upstream (the route strips them) and never steer routing (override_host reads metadata).
    const forwarded: Headers = headers.filter(([name]) => !name.startsWith(':') && !name.startsWith(DESTINATION_HEADER_PREFIX));
    const session = this.#session;
    const mode = session.bodyMode('request');
    const body = (toEpp: boolean): BodyReader =>
      new BodyReader(hasBody ? (req as AsyncIterable<Uint8Array>) : noBody(), {
        direction: 'request',
        session,
        toEpp: toEpp && hasBody,
        retain: 'keep',
        limit: options.maxBodyBytes,
        declaredLength: declared === undefined ? undefined : Number(declared),
        onFailure: () => session.interrupt(),
      });

    const opened = session.open();
    if (opened !== undefined) return this.#withoutEpp(opened, forwarded, hasBody ? body(false) : undefined);
    await session.sendRequestHeaders(headers, !hasBody);
    // Full duplex: chunks go to the EPP as they arrive, while the headers reply is outstanding.
    const reader = body(mode === 'full-duplex');
    return this.#requestReplies(forwarded, reader, hasBody);
  }

  /** The stream could not start: fail closed, or forward the request as the client sent it. */
  async #withoutEpp(event: EppEvent, headers: Headers, reader: BodyReader | undefined): Promise<ForwardRequest> {
    if (event.kind === 'stop') throw new Stop(event.reply);
    return { headers, body: reader === undefined ? undefined : await this.#bodyOrStop(reader.kept) };
  }

  async #requestReplies(initial: Headers, reader: BodyReader, hasBody: boolean): Promise<ForwardRequest> {
    const session = this.#session;
    const mode = session.bodyMode('request');
    let headers = initial;
    const streamed: Uint8Array[] = [];
    let streamedBytes = 0;
    for (;;) {
      const event = await this.#nextEvent(reader);
      if (event.kind === 'stop') throw new Stop(event.reply);
      if (event.kind === 'continue') {
        // Processing ended early (fail open, or the EPP closed cleanly): what the gateway still
        // holds goes upstream. In full duplex that is the EPP's body so far plus what came after.
        const rest = await this.#bodyOrStop(reader.kept);
        return { headers, body: hasBody ? Buffer.concat([...streamed, rest]) : undefined };
      }
      if (event.direction !== 'request') continue;
      const common = commonOf(event.message);
      if (event.phase === 'headers') {
        headers = this.#applyCommon(headers, common);
        if (!hasBody || mode === 'none') return { headers, body: hasBody ? await this.#bodyOrStop(reader.kept) : undefined };
        // BUFFERED: Envoy sends the whole body once the headers reply is in.
        if (mode === 'buffered') await session.sendBody('request', await this.#bodyOrStop(reader.kept), true);
        continue;
      }
      if (event.phase !== 'body') continue;
      if (mode === 'buffered') {
        headers = this.#applyCommon(headers, common);
        return { headers, body: this.#bufferedBody(headers, await this.#bodyOrStop(reader.kept), common) };
      }
      const mutation = common?.bodyMutation?.mutation;
      if (mutation?.$case === 'streamedResponse') {
        streamedBytes += mutation.value.body.length;
        if (streamedBytes > this.#ctx.options.maxBodyBytes) {
          throw new Stop(gatewayError(413, 'request_too_large', `request body exceeds ${this.#ctx.options.maxBodyBytes} bytes`));
        }
        streamed.push(mutation.value.body);
      }
      if (event.endOfBody) return { headers, body: Buffer.concat(streamed) };
    }
  }

  /**
   * The body after a BUFFERED body reply (ProcessorState::handleBufferedBodyCallback): a body
   * mutation replaces or clears it (a streamed_response changes nothing), and a mutated body must
   * match a content-length header (validateContentLength), else the request fails.
   */
  #bufferedBody(headers: Headers, body: Buffer, common: CommonResponse | undefined): Buffer {
    const mutation = common?.bodyMutation?.mutation;
    if (mutation === undefined) return body;
    const replacement = mutation.$case === 'body' ? Buffer.from(mutation.value) : Buffer.alloc(0);
    const declared = headers.find(([name]) => name === 'content-length')?.[1];
    if (declared !== undefined && /^\d+$/.test(declared) && Number(declared) !== replacement.length) {
      throw new Stop(this.#session.mutationFailed('mismatch between content length and the length of the mutated body'));
    }
    return mutation.$case === 'streamedResponse' ? body : replacement;
  }

  /** The session's next event, unless reading the client's body failed first. */
  async #nextEvent(reader: BodyReader): Promise<EppEvent> {
    const event = await this.#session.next();
    if (event.kind === 'interrupted') throw this.#bodyFailure(reader.failure);
    this.#checkAlive();
    return event;
  }

  async #bodyOrStop(body: Promise<Buffer>): Promise<Buffer> {
    try {
      return await body;
    } catch (error) {
      throw this.#bodyFailure(error);
    }
  }

  #bodyFailure(error: unknown): Stop {
    this.#checkAlive();
    if (error instanceof BodyTooLarge) {
      return new Stop(gatewayError(413, 'request_too_large', `request body exceeds ${error.limit} bytes`));
    }
    if (error instanceof BodyReadError) return new Stop(undefined);
    throw error;
  }

  /** The client left or the request timed out while the exchange waited. */
  #checkAlive(): void {
    if (this.#gone) throw new Stop(undefined);
    if (this.#timedOut) {
      throw new Stop(gatewayError(504, 'request_timeout', `no complete response within ${this.#ctx.options.requestTimeoutMs} ms`));
    }
  }

  #applyCommon(headers: Headers, response: CommonResponse | undefined): Headers {
    try {
      return applyHeaderMutation(headers, response?.headerMutation);
    } catch (error) {
      if (error instanceof ProtocolViolation) throw new Stop(this.#session.mutationFailed(error.message));
      throw error;
    }
  }

  // ---- router: the EPP's list, the fallback policy, retries ------------------------------------

  async #forward(request: ForwardRequest): Promise<Answer> {
    const { health, stats, options } = this.#ctx;
    const entries = destinationEntries(destinationOf(this.#metadata, request.headers));
    this.#destination = entries.length > 0 ? entries.join(',') : undefined;
    const servers = this.#ctx.servers;
    const table = servers.table;
    const walk = new DestinationWalk(entries, table, options.passthrough);
    // Protocol headers (the EPP's destination) are routing state, not something a model server needs.
    const upstreamRequest: UpstreamRequest = {
      method: this.#req.method ?? 'GET',
      path: this.#req.url ?? '/',
      headers: request.headers.filter(([name]) => !name.startsWith(DESTINATION_HEADER_PREFIX) && name !== 'content-length'),
      body: request.body,
    };
    const budget = options.retries + 1;
    let address: string | undefined;
    let failure: LocalReply | undefined;
    try {
      for (let attempt = 1; attempt <= budget; attempt++) {
        if (attempt > 1) await this.#backOff(attempt - 1);
        const listed = walk.next();
        address = listed ?? servers.fallback.pick();
        if (address === undefined) {
          // Envoy's "no healthy upstream": a local reply, never retried.
          failure = gatewayError(503, 'no_healthy_upstream', 'no host to send the request to');
          break;
        }
        if (listed === undefined) stats.fallbackPick();
        this.#attempts = attempt;
        // selected_host_key: written after every pick, so response messages name the host used.
        this.#metadata.setServed(address);
        const result = await this.#attempt(address, upstreamRequest);
        const retriesLeft = attempt < budget;
        if (!result.ok) {
          health.reportFailure(address);
          this.#ctx.logger.info({ endpoint: address, reason: result.reason, message: result.message }, 'upstream attempt failed');
          failure =
            result.reason === 'timeout'
              ? gatewayError(504, 'upstream_timeout', `upstream ${address}: ${result.message}`)
              : gatewayError(503, 'upstream_unavailable', `upstream ${address} ${result.reason}: ${result.message}`);
          if (retriesLeft && retriesFailure(options.retryOn, result.reason)) continue;
          break;
        }
        const status = result.response.statusCode;
        if (status >= 500 && retriesLeft && retriesStatus(options.retryOn, status)) {
          health.reportFailure(address);
          this.#ctx.logger.info({ endpoint: address, status }, 'upstream answered 5xx, retrying');
          result.response.discard();
          continue;
        }
        return { address, response: result.response, local: false };
      }
    } finally {
      stats.unknownSkipped(walk.skipped);
    }
    // The router's local reply goes through the filters' response path like any response.
    return { address, response: localResponse(failure as LocalReply), local: true };
  }

  /** One attempt, unless the EPP's stream stops the request meanwhile (an error reply replaces it). */
  async #attempt(address: string, request: UpstreamRequest): Promise<SettledAttempt> {
    const cancel = new AbortController();
    const signal = AbortSignal.any([this.#abort.signal, cancel.signal]);
    const stopped = this.#session.stopped.then((reply) => ({ stopped: reply }));
    const outcome = await Promise.race([this.#ctx.upstreams.attempt(address, request, signal), stopped]);
    if ('stopped' in outcome) {
      cancel.abort();
      throw new Stop(outcome.stopped);
    }
    if (!outcome.ok && outcome.reason === 'aborted') {
      this.#checkAlive();
      throw new Stop(undefined);
    }
    return outcome as SettledAttempt;
  }

  /** The route's retry back-off before retry `retry` (1 = first). */
  async #backOff(retry: number): Promise<void> {
    const ms = retryBackOffMs(retry, this.#ctx.random);
    try {
      await sleep(ms, undefined, { signal: this.#abort.signal });
    } catch {
      this.#checkAlive();
    }
  }

  // ---- response path: headers (and body) to the EPP, then the client ---------------------------

  async #responsePhase({ address, response, local }: Answer): Promise<void> {
    const { health, stats } = this.#ctx;
    this.#served = address;
    if (!local && address !== undefined) {
      if (response.statusCode >= 500) health.reportFailure(address);
      else health.reportSuccess(address);
      const first = destinationEntries(this.#destination)[0];
      stats.served(address, first === undefined || this.#ctx.servers.table.lookup(first)?.address !== address);
    }
    const session = this.#session;
    session.responseHeadersArrived();
    const upstreamHeaders = responseHeaders(response.headers);
    const { bodiless } = response;
    // Full duplex: the body goes to the EPP as it arrives, even before the headers reply.
    const fullDuplex = !bodiless && session.bodyMode('response') === 'full-duplex';
    let headers = upstreamHeaders;
    let reader: BodyReader | undefined;
    const startReader = (): BodyReader =>
      new BodyReader(response.body, {
        direction: 'response',
        session,
        toEpp: fullDuplex,
        retain: 'stream',
        limit: Number.POSITIVE_INFINITY,
        onFailure: () => session.interrupt(),
      });
    try {
      if (session.sendsHeaders('response')) {
        await session.sendResponseHeaders([[':status', String(response.statusCode)], ...upstreamHeaders], bodiless);
        if (fullDuplex) reader = startReader();
        headers = await this.#responseHeadersReply(headers, reader, address);
      }
      // In FULL_DUPLEX_STREAMED Envoy drops content-length: the EPP may change the body.
      const processed = fullDuplex && !session.complete;
      if (processed) headers = headers.filter(([name]) => name !== 'content-length');
      this.#res.writeHead(response.statusCode, [...flat(headers), ...flat(this.#observability())]);
      this.#res.flushHeaders();
      if (bodiless) {
        this.#res.end();
        return;
      }
      reader ??= startReader();
      if (fullDuplex) await this.#streamedResponseBody(reader, address);
      else await this.#passThrough(reader.passthrough, address);
      this.#res.end();
    } finally {
      // Stops reading the upstream if the EPP or the client ended the exchange early.
      response.discard();
    }
  }

  /** Waits for the response headers reply; `continue` keeps the headers as they are. */
  async #responseHeadersReply(headers: Headers, reader: BodyReader | undefined, address: string | undefined): Promise<Headers> {
    for (;;) {
      const event = await this.#nextResponseEvent(reader, address);
      if (event.kind === 'stop') throw new Stop(event.reply);
      if (event.kind === 'continue') return headers;
      if (event.direction === 'response' && event.phase === 'headers') return this.#applyCommon(headers, commonOf(event.message));
    }
  }

  /** The EPP's streamed_response replies to the client; once processing ends, the rest passes through. */
  async #streamedResponseBody(reader: BodyReader, address: string | undefined): Promise<void> {
    for (;;) {
      const event = await this.#nextResponseEvent(reader, address);
      if (event.kind === 'stop') throw new Stop(event.reply);
      if (event.kind === 'continue') return this.#passThrough(reader.passthrough, address);
      if (event.direction !== 'response' || event.phase !== 'body') continue;
      const mutation = commonOf(event.message)?.bodyMutation?.mutation;
      if (mutation?.$case === 'streamedResponse' && mutation.value.body.length > 0) await this.#write(mutation.value.body);
      if (event.endOfBody) return;
    }
  }

  /** The next session event, unless the upstream body fails first (the client response is cut). */
  async #nextResponseEvent(reader: BodyReader | undefined, address: string | undefined): Promise<EppEvent> {
    const event = await this.#session.next();
    if (event.kind === 'interrupted') throw this.#upstreamFailure(reader?.failure, address);
    this.#checkAlive();
    return event;
  }

  async #passThrough(body: AsyncIterable<Uint8Array>, address: string | undefined): Promise<void> {
    try {
      for await (const chunk of body) await this.#write(chunk);
    } catch (error) {
      throw this.#upstreamFailure(error, address);
    }
  }

  /** An upstream that fails mid-body ends the exchange at once, as Envoy resets the downstream stream. */
  #upstreamFailure(error: unknown, address: string | undefined): unknown {
    if (error instanceof Stop) return error;
    this.#checkAlive();
    const message = error instanceof Error ? error.message : String(error);
    if (address !== undefined) this.#ctx.health.reportFailure(address);
    this.#ctx.stats.upstreamReset();
    this.#ctx.logger.warn(
      { endpoint: address, message, clientHasHeaders: this.#res.headersSent },
      'upstream failed mid-response; ending the client response',
    );
    return new Stop(gatewayError(502, 'upstream_reset', `upstream ${address ?? '(none)'} failed during the response: ${message}`));
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
    res.writeHead(reply.status, [...flat(headers), ...flat(this.#observability())]);
    res.end(reply.body);
  }

  #close(): void {
    if (this.#res.headersSent && !this.#gone) this.#ctx.stats.status(this.#res.statusCode);
    this.#ctx.stats.attempts(this.#attempts);
    // Filter::onDestroy: a stream still open is closed (half-close and reset) with the exchange.
    this.#session.close();
    this.#abort.abort();
  }
}

async function* noBody(): AsyncIterable<Uint8Array> {
  // A request without a body: nothing to read.
}

function commonOf(message: ProcessingResponse): CommonResponse | undefined {
  const response = message.response;
  switch (response?.$case) {
    case 'requestHeaders':
    case 'responseHeaders':
    case 'requestBody':
    case 'responseBody':
      return response.value.response;
    default:
      return undefined;
  }
}

/** The router's local reply as a response on the filters' response path (content-length set). */
function localResponse(reply: LocalReply): UpstreamResponse {
  const headers: Record<string, string> = { 'content-length': String(reply.body.length) };
  for (const [name, value] of reply.headers) headers[name] = value;
  const body = reply.body;
  return {
    statusCode: reply.status,
    headers,
    bodiless: body.length === 0,
    body: (async function* () {
      yield body;
    })(),
    discard: () => undefined,
  };
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
