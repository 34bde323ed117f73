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
  readonly engine: Engine<LiveRequest>;
  readonly faults: Faults;
  readonly options: SimOptions;
  /** The KV-event publisher (`--kv-events`), with its bound endpoints and counters. */
  readonly kvEvents: KvEventPublisher | undefined;
  close(): Promise<void>;
}

/** LoRA ids as vLLM numbers adapters: 1, 2, ... in the order they are served. */
function kvSink(publisher: KvEventPublisher, loras: readonly string[], blockSize: number): KvSink {
  return {
    stored: (seq, from, to) => {
      const r = seq.request;
      const hashes = r.blockHashes;
      if (!hashes) return;
      const lora = r.lora ?? null;
      publisher.stored(r.tokenIds, hashes, from, to, blockSize, lora === null ? null : loras.indexOf(lora) + 1, lora);
    },
    evicted: (hash) => publisher.evicted(hash),
    cleared: () => publisher.cleared(),
  };
}

export async function startSim(input: StartSimOptions = {}): Promise<SimServer> {
  const { logger: givenLogger, onCrash, ...rest } = input;
  const options = simOptions(rest);
  const logger = givenLogger ?? pino({ level: options.logLevel, base: { service: 'spillway-sim' } });
  // Loaded before anything binds: a bad --tokenizer fails the start, naming the file or field.
  const tokenizer =
    options.tokenizer === undefined ? undefined : loadTokenizer(tokenizerSpecFromFlag(options.tokenizer, TOKENIZER_PRESETS));
  const kvEvents =
    options.kvEvents === undefined
      ? undefined
      : new KvEventPublisher(
          {
            endpoint: options.kvEvents,
            replayEndpoint: options.kvReplay,
            topic: options.kvTopic,
            batchMaxEvents: options.kvBatchMaxEvents,
            batchMs: options.kvBatchMs,
            replayBuffer: options.kvReplayBuffer,
            replayBufferBytes: 64 * 1024 * 1024,
          },
          logger,
        );
  let sink: KvSink | undefined;
  const runner = new RealtimeEngine(
    {
      preset: options.preset,
      mode: options.engineMode,
      seed: options.seed,
      ...(options.maxNumSeqs === undefined ? {} : { maxNumSeqs: options.maxNumSeqs }),
      ...(options.numBlocks === undefined ? {} : { numBlocks: options.numBlocks }),
      ...(options.maxWaiting === undefined ? {} : { maxWaiting: options.maxWaiting }),
      ...(options.maxLoras === undefined ? {} : { maxLoras: options.maxLoras }),
    },
    options.timeScale,
    // The sink needs the engine's block size, known once the engine exists: bound late.
    kvEvents && { stored: (q, f, t) => sink?.stored(q, f, t), evicted: (h) => sink?.evicted(h), cleared: () => sink?.cleared() },
  );
  const engine = runner.engine;
  if (kvEvents) {
    sink = kvSink(kvEvents, options.lora, engine.config.blockSize);
    await kvEvents.start();
  }
  const metrics = createMetrics(options.engineMetrics, options.model, engine);
  const errorRng = new Rng(options.seed ^ 0x5eed);

  const server = createServer();
  let closed = false;
  const kill = async (): Promise<void> => {
    if (closed) return;
    closed = true;
    runner.stop();
    faults.dispose();
    await kvEvents?.close();
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
    runner,
    metrics,
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
      const reset = engine.resetPrefixCache();
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
      ...(kvEvents ? { kvEvents: kvEvents.endpoint, kvReplay: kvEvents.replayEndpoint, kvTopic: options.kvTopic } : {}),
    },
    'listening',
  );

  return { url, port, engine, faults, options, kvEvents, close: kill };
}
