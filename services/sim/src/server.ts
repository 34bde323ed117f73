import { createServer } from 'node:http';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Rng } from '@spillway/engine';
import type { Engine } from '@spillway/engine';
import { pino } from 'pino';
import type { Logger } from 'pino';
import { handleCompletion } from './completions.js';
import type { CompletionContext } from './completions.js';
import { FaultPatch, Faults } from './faults.js';
import { readJson, sendError, sendJson } from './http.js';
import { createMetrics } from './metrics.js';
import { apiError, describeIssue } from './openai.js';
import { simOptions } from './options.js';
import type { SimOptions } from './options.js';
import { RealtimeEngine } from './runner.js';
import type { KvSink, LiveRequest } from './runner.js';
import { KvEventPublisher } from './kv-events.js';
import { loadTokenizer, TOKENIZER_PRESETS, tokenizerSpecFromFlag } from '@spillway/tokenizer';

export interface StartSimOptions extends Partial<SimOptions> {
  /** Defaults to a pino logger on stdout at `logLevel`. */
  logger?: Logger;
  /**
   * What an injected crash does. The binary exits the process; the default here only kills the
   * server (connections dropped, port closed), so tests can run the simulator in-process.
   */
  onCrash?: () => void;
}

export interface SimServer {
  /** `http://host:port`, with the bound port when started on port 0. */
  readonly url: string;
  readonly port: number;
  /** Rank 0's engine (the only one without data parallelism). */
  readonly engine: Engine<LiveRequest>;
  /** Every data-parallel rank's engine, in rank order. */
  readonly engines: ReadonlyArray<Engine<LiveRequest>>;
  readonly faults: Faults;
  readonly options: SimOptions;
  /** Rank 0's KV-event publisher (`--kv-events`), with its bound endpoints and counters. */
  readonly kvEvents: KvEventPublisher | undefined;
  /** Every rank's KV-event publisher, in rank order. */
  readonly kvPublishers: readonly KvEventPublisher[];
  close(): Promise<void>;
}

/** LoRA ids as vLLM numbers adapters: 1, 2, ... in the order they are served. */
function kvSink(publisher: KvEventPublisher, loras: readonly string[], blockSize: number): KvSink {
  return {
    stored: (seq, from, to) => {
      const r = seq.request;
      const hashes = r.blockHashes;
      if (!hashes) return;
      const lora = r.lora === undefined ? null : { id: loras.indexOf(r.lora) + 1, name: r.lora };
      publisher.stored({ tokens: r.tokenIds, hashes, from, to, blockSize, lora, salt: r.cacheSalt ?? null });
    },
    evicted: (hash) => publisher.evicted(hash),
    cleared: () => publisher.cleared(),
  };
}

/**
 * vLLM's `ZmqEventPublisher.offset_endpoint_port` (`vllm/distributed/kv_events.py`): data-parallel
 * rank `r` binds the configured port plus `r`; a `*` port (any free port) stays `*` for every rank.
 */
export function rankEndpoint(configured: string, rank: number): string {
  // A comma-separated list names each rank's endpoint (what a restart on the ports first bound needs).
  const list = configured.split(',');
  const named = list[rank];
  if (named !== undefined) return list.length > 1 ? named : rankEndpoint1(named, rank);
  return rankEndpoint1(list[list.length - 1] as string, rank - list.length + 1);
}

function rankEndpoint1(endpoint: string, rank: number): string {
  const colon = endpoint.lastIndexOf(':');
  const port = endpoint.slice(colon + 1);
  if (rank === 0 || !/^\d+$/.test(port)) return endpoint;
  return `${endpoint.slice(0, colon)}:${Number(port) + rank}`;
}

/** One data-parallel rank: its engine, driven in real time, and its KV-event stream. */
interface SimRankParts {
  runner: RealtimeEngine;
  kvEvents: KvEventPublisher | undefined;
}

function startRank(options: SimOptions, rank: number, logger: Logger): SimRankParts {
  const kvEvents =
    options.kvEvents === undefined
      ? undefined
      : new KvEventPublisher(
          {
            endpoint: rankEndpoint(options.kvEvents, rank),
            replayEndpoint: options.kvReplay === undefined ? undefined : rankEndpoint(options.kvReplay, rank),
            dataParallelRank: rank,
            layout: options.kvEventsLayout,
            topic: options.kvTopic,
            batchMaxEvents: options.kvBatchMaxEvents,
            batchMs: options.kvBatchMs,
            replayBuffer: options.kvReplayBuffer,
            slidingWindow: options.kvSlidingWindow,
            offloadBlocks: options.kvOffloadBlocks,
            replayBufferBytes: 64 * 1024 * 1024,
          },
          logger,
        );
  let sink: KvSink | undefined;
  const runner = new RealtimeEngine(
    {
      preset: options.preset,
      mode: options.engineMode,
      // Each rank's jitter of its own.
      seed: options.seed + rank,
      ...(options.maxNumSeqs === undefined ? {} : { maxNumSeqs: options.maxNumSeqs }),
      ...(options.numBlocks === undefined ? {} : { numBlocks: options.numBlocks }),
      ...(options.maxWaiting === undefined ? {} : { maxWaiting: options.maxWaiting }),
      ...(options.maxLoras === undefined ? {} : { maxLoras: options.maxLoras }),
    },
    options.timeScale,
    // The sink needs the engine's block size, known once the engine exists: bound late.
    kvEvents && { stored: (q, f, t) => sink?.stored(q, f, t), evicted: (h) => sink?.evicted(h), cleared: () => sink?.cleared() },
  );
  if (kvEvents) sink = kvSink(kvEvents, options.lora, runner.engine.config.blockSize);
  return { runner, kvEvents };
}

export async function startSim(input: StartSimOptions = {}): Promise<SimServer> {
  const { logger: givenLogger, onCrash, ...rest } = input;
  const options = simOptions(rest);
  const logger = givenLogger ?? pino({ level: options.logLevel, base: { service: 'spillway-sim' } });
  // Loaded before anything binds: a bad --tokenizer fails the start, naming the file or field.
  const tokenizer =
    options.tokenizer === undefined ? undefined : loadTokenizer(tokenizerSpecFromFlag(options.tokenizer, TOKENIZER_PRESETS));
  const ranks = Array.from({ length: options.dataParallelSize }, (_, rank) => startRank(options, rank, logger));
  const engines = ranks.map((r) => r.runner.engine);
  const engine = engines[0] as Engine<LiveRequest>;
  const kvPublishers = ranks.flatMap((r) => (r.kvEvents ? [r.kvEvents] : []));
  for (const publisher of kvPublishers) await publisher.start();
  const metrics = createMetrics(options.engineMetrics, options.model, engines);
  const errorRng = new Rng(options.seed ^ 0x5eed);

  const server = createServer();
  let closed = false;
  const kill = async (): Promise<void> => {
    if (closed) return;
    closed = true;
    for (const rank of ranks) rank.runner.stop();
    faults.dispose();
    await Promise.all(kvPublishers.map((p) => p.close()));
    const done = new Promise<void>((resolve) => server.close(() => resolve()));
    // Hung (stalled) and keep-alive connections would otherwise hold close() open forever.
    server.closeAllConnections();
    await done;
  };
  const faults = new Faults(
    options,
    onCrash ??
      (() => {
        logger.warn('injected crash: closing the server');
        void kill();
      }),
  );

  const ctx: CompletionContext = {
    model: options.model,
    loras: new Set(options.lora),
    ranks: ranks.map((r, rank) => ({ runner: r.runner, observe: metrics.engine(rank) })),
    errorInjected: () => faults.errorRate > 0 && errorRng.next() < faults.errorRate,
    logger,
    tokenizer,
  };

  const models = (): object => {
    const created = Math.floor(Date.now() / 1000);
    const card = (id: string, parent: string | null): object => ({
      id,
      object: 'model',
      created,
      owned_by: 'spillway-sim',
      root: id,
      parent,
    });
    return { object: 'list', data: [card(options.model, null), ...options.lora.map((l) => card(l, options.model))] };
  };

  const route = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const path = (req.url ?? '/').split('?')[0];
    const method = req.method ?? 'GET';
    if (path === '/admin/fault' && options.admin) return admin(req, res, method);
    if (path === '/reset_prefix_cache' && options.admin && method === 'POST') {
      // Every rank's cache, as vLLM's reset_prefix_cache does for all its engines.
      const reset = engines.map((e) => e.resetPrefixCache()).every(Boolean);
      return sendJson(res, reset ? 200 : 409, { reset });
    }
    // A stalled server accepts the connection and then says nothing, like a wedged process.
    if (faults.stall) return;
    switch (`${method} ${path}`) {
      case 'GET /health':
        res.writeHead(200).end();
        return;
      case 'GET /metrics': {
        const text = await metrics.registry.metrics();
        res.writeHead(200, { 'content-type': metrics.registry.contentType }).end(text);
        return;
      }
      case 'GET /v1/models':
        return sendJson(res, 200, models());
      case 'POST /v1/completions':
        return handleCompletion(ctx, 'completion', req, res);
      case 'POST /v1/chat/completions':
        return handleCompletion(ctx, 'chat', req, res);
    }
    const known = ['/health', '/metrics', '/v1/models', '/v1/completions', '/v1/chat/completions'];
    sendError(
      res,
      known.includes(path ?? '') ? apiError(405, `method ${method} not allowed on ${path}`) : apiError(404, `no route for ${path}`),
    );
  };

  const admin = async (req: IncomingMessage, res: ServerResponse, method: string): Promise<void> => {
    if (method === 'GET') return sendJson(res, 200, faults.state());
    if (method !== 'POST') return sendError(res, apiError(405, `method ${method} not allowed on /admin/fault`));
    const body = await readJson(req);
    if (!body.ok) return sendError(res, body.error);
    const patch = FaultPatch.safeParse(body.value);
    if (!patch.success) return sendError(res, apiError(400, describeIssue(patch.error)));
    const state = faults.update(patch.data);
    logger.info({ faults: state }, 'faults changed');
    sendJson(res, 200, state);
  };

  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    route(req, res).catch((err: unknown) => {
      logger.error({ err }, 'request failed');
      if (!res.headersSent) sendError(res, apiError(500, 'internal error'));
      else res.destroy();
    });
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  const host = options.host.includes(':') ? `[${options.host}]` : options.host;
  const url = `http://${host}:${port}`;
  const cfg = engine.config;
  logger.info(
    {
      url,
      model: options.model,
      lora: options.lora,
      preset: options.preset,
      timeScale: options.timeScale,
      maxNumSeqs: cfg.maxNumSeqs,
      numBlocks: cfg.numBlocks,
      engineMetrics: options.engineMetrics,
      tokenizer: tokenizer?.name,
      dataParallelSize: options.dataParallelSize,
      ...(kvPublishers.length > 0
        ? {
            kvEvents: kvPublishers[0]?.endpoint,
            kvReplay: kvPublishers[0]?.replayEndpoint,
            // Every rank's endpoints, in rank order (what an endpoints file's kvEvents list names).
            kvRanks: kvPublishers.map((p) => ({ events: p.endpoint, replay: p.replayEndpoint })),
            kvTopic: options.kvTopic,
          }
        : {}),
    },
    'listening',
  );

  return { url, port, engine, engines, faults, options, kvEvents: kvPublishers[0], kvPublishers, close: kill };
}
