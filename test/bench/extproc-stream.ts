import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { startNatsServer, TestPublisher } from '@spillway/testkit';
import { markdownTable, median, percentile, type BenchContext, type BenchPart } from './part.js';
import { probeChunks } from './extproc/chunk-probe.js';
import { displayCommand, H2LOAD_INSTALL, h2loadVersion, processCpuMicros, runH2load, type LoadResult } from './extproc/h2load.js';
import { keepPodsFresh, mirrorPeer, podPool, startBareServer, startEppChild, type Child } from './extproc/processes.js';
import { assertRouted, chatBody, encodedExchange, sendOnce, type EncodedExchange } from './extproc/request.js';
import { LOCAL_ZONE, MODEL, PODS, REFRESH_MS, SUBSET, ZONES } from './extproc/setup.js';

/**
 * A streamed completion through ext_proc in the two response modes the EPP supports, spillway-epp
 * against the bare grpc-js server doing the same minimal exchange, h2load-driven with pre-encoded
 * messages as the `extproc` part is. One request is a chat completion with `stream: true` (a 1 KB
 * body) whose response is 256 SSE chunks as vLLM streams them (a role chunk, 253 one-token deltas,
 * the usage chunk, `data: [DONE]`):
 *
 * - headers only (`response_body_mode: NONE`, the shipped config): Envoy sends the processor
 *   request_headers, the body and response_headers, and closes the stream after the reply to
 *   response_headers; the chunks go from the model server to the client without the processor.
 * - FULL_DUPLEX_STREAMED response bodies: response_headers, then every chunk as a response_body
 *   message, each echoed as streamed_response (the EPP also keeps the tail to read the usage).
 *
 * Per request: the server's CPU from /proc over the measured window, less what it spends idle (the
 * EPP follows its event stream whether requests come or not), at a fixed rate. Per chunk: the CPU
 * difference between the modes / 256, and the round trip one chunk takes through the processor,
 * sent alone as a model server paces its tokens (extproc/chunk-probe.ts), with no other load and
 * beside the h2load run.
 */
export const extprocStream: BenchPart = {
  name: 'extproc-stream',
  title: 'ext_proc: a streamed completion, headers-only against FULL_DUPLEX_STREAMED response bodies (h2load)',
  run,
};

const CHUNKS = 256;
const CLIENTS = 2;
const STREAMS = 16;

interface Plan {
  /** Requests per second (each carrying 256 chunks in the streamed mode). */
  rate: number;
  seconds: number;
  warmupSeconds: number;
  repeats: number;
  /** The idle window each server's background CPU is measured over. */
  idleSeconds: number;
  probeStreams: number;
  /** Between a chunk's reply and the next chunk (a model server's inter-token time, shortened). */
  gapMs: number;
}
const FULL: Plan = { rate: 100, seconds: 6, warmupSeconds: 2, repeats: 3, idleSeconds: 5, probeStreams: 4, gapMs: 2 };
const QUICK: Plan = { rate: 100, seconds: 3, warmupSeconds: 1, repeats: 1, idleSeconds: 3, probeStreams: 2, gapMs: 2 };

type ServerName = 'bare' | 'epp';
type Mode = 'headers-only' | 'streamed';
const MODES: readonly Mode[] = ['headers-only', 'streamed'];
const LABEL: Record<ServerName, string> = { bare: 'bare grpc-js server', epp: 'spillway-epp' };
const MODE_LABEL: Record<Mode, string> = {
  'headers-only': 'headers only (response body NONE)',
  streamed: 'response body FULL_DUPLEX_STREAMED',
};

interface Run {
  server: ServerName;
  mode: Mode;
  repeat: number;
  result: LoadResult;
  /** CPU per request less the server's idle CPU over the same window, µs. */
  netCpu: number;
  /** Chunk round trips of the probe run beside it (streamed mode), ms. */
  probe: Float64Array | undefined;
}

/** The SSE events of one streamed chat completion as vLLM writes them, one response chunk each. */
function sseChunks(): Uint8Array[] {
  const head = { id: 'chatcmpl-5f1d0c2e9a8b4c7d', object: 'chat.completion.chunk', created: 1_764_420_000, model: MODEL };
  const words = [' the', ' of', ' and', ' to', ' in', ' is', ' it', ' for', ' on', ' as', ' at', ' by', ' we', ' an', ' be', ' or'];
  const events: object[] = [
    { ...head, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }] },
  ];
  const tokens = CHUNKS - 3;
  for (let i = 0; i < tokens; i++) {
    const finish = i === tokens - 1 ? 'length' : null;
    events.push({
      ...head,
      choices: [{ index: 0, delta: { content: words[(i * 7) % words.length] }, logprobs: null, finish_reason: finish }],
    });
  }
  events.push({ ...head, choices: [], usage: { prompt_tokens: 230, total_tokens: 230 + tokens, completion_tokens: tokens } });
  const utf8 = new TextEncoder();
  return [...events.map((e) => utf8.encode(`data: ${JSON.stringify(e)}\n\n`)), utf8.encode('data: [DONE]\n\n')];
}

/** Output tokens the EPP read from response usage so far (every series summed). */
async function outputTokens(metricsPort: number): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  let total = 0;
  for (const match of text.matchAll(/^inference_objective_output_tokens_sum\{[^}]*\} (\S+)$/gm)) total += Number(match[1]);
  return total;
}

/** The CPU a process spends per second with no request, µs/s. */
async function idleCpuRate(pid: number | undefined, seconds: number): Promise<number> {
  const before = processCpuMicros(pid);
  await sleep(seconds * 1000);
  const after = processCpuMicros(pid);
  return before === undefined || after === undefined ? Number.NaN : (after - before) / seconds;
}

const ms = (n: number): string => (Number.isFinite(n) ? n.toFixed(2) : '–');
const us = (n: number): string => (Number.isFinite(n) ? n.toFixed(0) : '–');

async function run(context: BenchContext): Promise<string> {
  const title = `## ${extprocStream.title}`;
  const version = h2loadVersion();
  if (version === undefined) {
    context.log(H2LOAD_INSTALL);
    return [title, '', `**Not measured: ${H2LOAD_INSTALL}**`].join('\n');
  }
  const plan = context.quick ? QUICK : FULL;
  const pods = podPool(PODS, ZONES);
  const subset = pods
    .filter((p) => p.zone === LOCAL_ZONE)
    .slice(0, SUBSET)
    .map((p) => p.address);
  const dir = mkdtempSync(join(tmpdir(), 'spillway-bench-extproc-stream-'));
  const children: Child[] = [];
  let stopRefresh: (() => void) | undefined;
  let publisher: TestPublisher | undefined;
  const nats = await startNatsServer({ forcePrivate: true });
  const killNats = (): void => void nats.kill();
  process.once('exit', killNats);
  try {
    publisher = await TestPublisher.connect(nats.url);
    stopRefresh = await keepPodsFresh(publisher, pods, REFRESH_MS);
    const epp = await startEppChild(nats.url, LOCAL_ZONE);
    children.push(epp);
    // Sharing on with a peer as busy as the EPP, as in the `extproc` part.
    mirrorPeer(publisher, LOCAL_ZONE);
    const bare = await startBareServer();
    children.push(bare);
    const servers: Record<ServerName, { port: number; pid: number | undefined }> = {
      bare: { port: bare.port, pid: bare.pid },
      epp: { port: epp.grpcPort, pid: epp.pid },
    };
    context.log(`spillway-epp pid ${epp.pid} on :${epp.grpcPort}; bare server pid ${bare.pid} on :${bare.port}; ${version}`);

    const body = chatBody(MODEL, 1024, true);
    const routing = encodedExchange({ path: '/v1/chat/completions', body, subset, chunkBytes: 16 * 1024 });
    const [first] = await sendOnce(epp.grpcPort, routing.bytes, 1);
    assertRouted('spillway-epp', first ? [first] : [], routing.bodyBytes);
    const destination = first?.destination as string;
    const sse = sseChunks();
    const exchanges = Object.fromEntries(
      MODES.map((mode) => [
        mode,
        encodedExchange({
          path: '/v1/chat/completions',
          body,
          subset,
          chunkBytes: 16 * 1024,
          response: {
            served: destination.split(',')[0] as string,
            destination,
            bodyMode: mode === 'streamed' ? 'full-duplex' : 'none',
            contentType: 'text/event-stream',
            chunks: sse,
          },
        }),
      ]),
    ) as Record<Mode, EncodedExchange>;
    const files = Object.fromEntries(MODES.map((mode) => [mode, join(dir, `${mode}.bin`)])) as Record<Mode, string>;
    for (const mode of MODES) writeFileSync(files[mode], exchanges[mode].bytes);

    // Checked once, over node:http2: both servers route, answer response_headers, and in the
    // streamed mode echo every chunk; the EPP reads the usage from the last chunks.
    const tokensBefore = await outputTokens(epp.metricsPort);
    for (const mode of MODES) {
      const exchange = exchanges[mode];
      for (const server of ['bare', 'epp'] as const) {
        const answers = await sendOnce(servers[server].port, exchange.bytes, 3);
        assertRouted(`${LABEL[server]} (${mode})`, answers, exchange.bodyBytes, 1, exchange.responseBodyBytes);
      }
    }
    const tokensRead = (await outputTokens(epp.metricsPort)) - tokensBefore;
    if (tokensRead !== 3 * (CHUNKS - 3))
      throw new Error(`spillway-epp read ${tokensRead} output tokens from 3 streamed responses, expected ${3 * (CHUNKS - 3)}`);
    context.log(`checked: both servers route both modes and echo all ${CHUNKS} chunks; the EPP read the usage (${tokensRead} tokens)`);

    const idle: Record<ServerName, number> = { bare: Number.NaN, epp: Number.NaN };
    for (const server of ['bare', 'epp'] as const) idle[server] = await idleCpuRate(servers[server].pid, plan.idleSeconds);
    context.log(`idle CPU: bare ${us(idle.bare)} µs/s, spillway-epp ${us(idle.epp)} µs/s`);
    // One chunk at a time with nothing else running: the hop's own latency.
    const alone: Record<ServerName, Float64Array> = {
      bare: (await probeChunks(bare.port, exchanges.streamed, plan.probeStreams, plan.gapMs)).roundTripsMs,
      epp: (await probeChunks(epp.grpcPort, exchanges.streamed, plan.probeStreams, plan.gapMs)).roundTripsMs,
    };

    const runs: Run[] = [];
    for (let repeat = 0; repeat < plan.repeats; repeat++) {
      const serverOrder: ServerName[] = repeat % 2 === 0 ? ['bare', 'epp'] : ['epp', 'bare'];
      const modeOrder: Mode[] = repeat % 2 === 0 ? ['headers-only', 'streamed'] : ['streamed', 'headers-only'];
      for (const mode of modeOrder) {
        for (const server of serverOrder) {
          const { port, pid } = servers[server];
          const load = runH2load(
            {
              port,
              file: files[mode],
              clients: CLIENTS,
              streamsPerClient: STREAMS,
              seconds: plan.seconds,
              warmupSeconds: plan.warmupSeconds,
              rate: plan.rate,
              logFile: join(dir, 'latency.tsv'),
            },
            pid,
          );
          let probe: Float64Array | undefined;
          if (mode === 'streamed') {
            await sleep(plan.warmupSeconds * 1000);
            probe = (await probeChunks(port, exchanges[mode], plan.probeStreams, plan.gapMs)).roundTripsMs;
          }
          const result = await load;
          if (result.failed + result.errored + result.timeout > 0)
            throw new Error(
              `h2load against ${LABEL[server]} (${mode}): ${result.failed} failed, ${result.errored} errored, ${result.timeout} timed out`,
            );
          const netCpu = result.serverCpuMicrosPerRequest - idle[server] / result.requestsPerSecond;
          runs.push({ server, mode, repeat, result, netCpu, probe });
          context.log(
            `#${repeat + 1} ${mode} ${LABEL[server]}: ${result.requestsPerSecond.toFixed(0)} req/s, p50 ${ms(result.p50)} p99 ${ms(result.p99)} ms, ` +
              `${us(result.serverCpuMicrosPerRequest)} µs CPU/request (${us(netCpu)} above idle)` +
              (probe === undefined ? '' : `; chunk round trip p50 ${ms(percentile(probe, 50))} p99 ${ms(percentile(probe, 99))} ms`),
          );
        }
      }
    }
    return report({
      plan,
      runs,
      version,
      exchanges,
      idle,
      alone,
      quiet: context.quiet.quiet,
      load: { before: context.quiet.load, after: loadavg()[0] as number },
    });
  } finally {
    stopRefresh?.();
    for (const child of children.reverse()) await child.stop();
    await publisher?.close().catch(() => undefined);
    await nats.stop();
    process.off('exit', killNats);
    rmSync(dir, { recursive: true, force: true });
  }
}

interface ReportInput {
  plan: Plan;
  runs: Run[];
  version: string;
  exchanges: Record<Mode, EncodedExchange>;
  idle: Record<ServerName, number>;
  alone: Record<ServerName, Float64Array>;
  quiet: boolean;
  load: { before: number; after: number };
}

function pooled(values: Float64Array[]): Float64Array {
  const total = values.reduce((n, v) => n + v.length, 0);
  const out = new Float64Array(total);
  let at = 0;
  for (const v of values) {
    out.set(v, at);
    at += v.length;
  }
  return out.sort();
}

function report(input: ReportInput): string {
  const { plan, runs } = input;
  const of = (server: ServerName, mode: Mode) => runs.filter((r) => r.server === server && r.mode === mode);
  const cell = (server: ServerName, mode: Mode) => {
    const these = of(server, mode);
    const latencies = pooled(these.map((r) => r.result.latenciesMs));
    return {
      rate: median(these.map((r) => r.result.requestsPerSecond)),
      p50: percentile(latencies, 50),
      p99: percentile(latencies, 99),
      cpu: median(these.map((r) => r.result.serverCpuMicrosPerRequest)),
      net: median(these.map((r) => r.netCpu)),
      probe: pooled(these.flatMap((r) => (r.probe === undefined ? [] : [r.probe]))),
    };
  };
  const cells = {
    bare: { 'headers-only': cell('bare', 'headers-only'), streamed: cell('bare', 'streamed') },
    epp: { 'headers-only': cell('epp', 'headers-only'), streamed: cell('epp', 'streamed') },
  };
  const rows = (['headers-only', 'streamed'] as const).flatMap((mode) =>
    (['bare', 'epp'] as const).map((server) => {
      const c = cells[server][mode];
      return [
        MODE_LABEL[mode],
        LABEL[server],
        input.exchanges[mode].messages,
        c.rate.toFixed(0),
        ms(c.p50),
        ms(c.p99),
        us(c.cpu),
        us(c.net),
      ];
    }),
  );
  const perChunk = (server: ServerName) => (cells[server].streamed.net - cells[server]['headers-only'].net) / CHUNKS;
  const eppHeaders = cells.epp['headers-only'].net;
  const eppStreamed = cells.epp.streamed.net;
  const probeRow = (server: ServerName) => {
    const a = input.alone[server];
    const l = cells[server].streamed.probe;
    return [LABEL[server], a.length, ms(percentile(a, 50)), ms(percentile(a, 99)), l.length, ms(percentile(l, 50)), ms(percentile(l, 99))];
  };
  const added = (p: number, which: 'alone' | 'load') => {
    const e = which === 'alone' ? input.alone.epp : cells.epp.streamed.probe;
    const b = which === 'alone' ? input.alone.bare : cells.bare.streamed.probe;
    return percentile(e, p) - percentile(b, p);
  };
  const serial = (server: ServerName) => ((cells[server].streamed.p50 - cells[server]['headers-only'].p50) * 1000) / CHUNKS;
  const spec = { clients: CLIENTS, streamsPerClient: STREAMS, seconds: plan.seconds, warmupSeconds: plan.warmupSeconds, rate: plan.rate };
  const busy = input.quiet
    ? `The machine was quiet when the part started (1-minute load average ${input.load.before.toFixed(2)}, ${input.load.after.toFixed(2)} after).`
    : `**The machine was not quiet** (1-minute load average ${input.load.before.toFixed(1)} before this part, ${input.load.after.toFixed(1)} after, on ${cpus().length} shared cores): latencies are pessimistic; the CPU per request, from /proc, depends least on it. Provisional until a run on a quiet machine.`;
  const coresAt = (requestsPerSecond: number, micros: number) => ((requestsPerSecond * micros) / 1e6).toFixed(2);
  return [
    `## ${extprocStream.title}`,
    '',
    `One request is a chat completion with \`stream: true\` (a ${input.exchanges.streamed.bodyBytes}-byte body) whose response is ${CHUNKS} SSE chunks as vLLM streams them (a role chunk, ${CHUNKS - 3} one-token deltas, the usage chunk, \`data: [DONE]\`; ${input.exchanges.streamed.responseBodyBytes} bytes), pre-encoded as the ext_proc messages Envoy sends in each response mode, with a ${SUBSET}-entry subset hint and \`envoy.lb\` on every message, and driven by ${input.version} at a fixed ${plan.rate} requests/s (${CLIENTS} connections × ${STREAMS} streams) for ${plan.seconds} s after ${plan.warmupSeconds} s of warm-up, ${plan.repeats} repeat${plan.repeats > 1 ? 's' : ''} per server and mode (alternating):`,
    '',
    `- **headers only** (\`response_body_mode: NONE\`, the shipped config): request_headers, the body, response_headers (${input.exchanges['headers-only'].messages} messages); Envoy closes the stream after the reply to response_headers, and the chunks never reach the processor.`,
    `- **FULL_DUPLEX_STREAMED response bodies**: the same, then every chunk as a response_body message (${input.exchanges.streamed.messages} messages), each echoed as streamed_response; the EPP keeps the response's tail and reads the usage from it (checked before measuring: it counted ${CHUNKS - 3} output tokens per response).`,
    `- Against the bare grpc-js server (\`test/bench/extproc/bare-server.ts\`) doing the same minimal exchange, echoing each chunk too. The EPP runs as in the \`extproc\` part (${PODS} pods, metrics refreshed every ${REFRESH_MS} ms, a peer sending back every state batch it publishes). CPU per request is the server's user+system time from /proc over the measured window divided by requests done; "above idle" subtracts what the server spends with no request over the same time (measured for ${plan.idleSeconds} s before the load: bare ${us(input.idle.bare)} µs/s, spillway-epp ${us(input.idle.epp)} µs/s, following its event stream).`,
    `- ${busy}`,
    '',
    '```',
    `${displayCommand(spec)}   # --rps is per connection: rate / ${CLIENTS}`,
    '```',
    '',
    markdownTable(['response mode', 'server', 'messages', 'req/s done', 'p50 ms', 'p99 ms', 'CPU µs/req', 'CPU µs/req above idle'], rows),
    '',
    `Per chunk, from the difference between the modes (above idle): spillway-epp **${perChunk('epp').toFixed(1)} µs of CPU per chunk**, the bare server ${perChunk('bare').toFixed(1)} µs. A streamed response of ${CHUNKS} chunks costs the EPP **${us(eppStreamed)} µs** of CPU against **${us(eppHeaders)} µs** with headers only (**${(eppStreamed / eppHeaders).toFixed(1)}×**); per 1,000 such requests a second at this cost per request, ${coresAt(1000, eppStreamed)} cores against ${coresAt(1000, eppHeaders)}.`,
    '',
    `**Latency per chunk.** With headers only the chunks do not pass through the processor: nothing is added to them. With the response body streamed, each chunk makes a round trip through the processor before Envoy sends it on. Measured one chunk at a time, as a model server paces its tokens (\`test/bench/extproc/chunk-probe.ts\`: one stream, each chunk sent ${plan.gapMs} ms after the previous one's reply, the round trip to its streamed_response timed by a node:http2 client), with nothing else running and beside the h2load run of the streamed mode (${plan.probeStreams} streams per run):`,
    '',
    markdownTable(
      ['server', 'chunks alone', 'p50 ms', 'p99 ms', 'chunks under load', 'p50 ms', 'p99 ms'],
      [probeRow('bare'), probeRow('epp')],
    ),
    '',
    `spillway-epp − bare server, per chunk's round trip: alone p50 ${ms(added(50, 'alone'))} ms, p99 ${ms(added(99, 'alone'))} ms; under load p50 ${ms(added(50, 'load'))} ms, p99 ${ms(added(99, 'load'))} ms (what the EPP adds to the transport's own hop; differences within a few hundredths of a ms are noise). The whole round trip, the EPP's row, is what each token waits in the streamed mode, plus Envoy's own work on both legs.`,
    '',
    `Sent back to back instead (h2load sends a request's messages at once, so the processor works through its chunks without waiting), a chunk takes (p50 streamed − p50 headers only) / ${CHUNKS}: spillway-epp ${serial('epp').toFixed(1)} µs, the bare server ${serial('bare').toFixed(1)} µs.`,
  ].join('\n');
}
