import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import { encodeKvBatch, kvSubjectFor } from '@spillway/events';
import { eventually, POOL, startNatsServer, TestPublisher } from '@spillway/testkit';
import { markdownTable, type BenchContext, type BenchPart } from './part.js';
import { displayCommand, H2LOAD_INSTALL, h2loadVersion, runH2load, type LoadResult } from './extproc/h2load.js';
import { PHASES, quantile, readPhases, shareAtMost, since, type Phase, type PhaseHistograms } from './extproc/phase-histogram.js';
import { keepPodsFresh, podPool, startBareServer, startEppChild, type Child, type RunningEppChild } from './extproc/processes.js';
import { assertRouted, chatBody, encodedExchange, sendOnce, type EncodedExchange } from './extproc/request.js';
import { LOCAL_ZONE, MODEL, PODS, REFRESH_MS, SUBSET, ZONES } from './extproc/setup.js';

/**
 * Where the EPP's time goes, by body size: chat-completion bodies of 1 KB, 16 KB, 256 KB and 1 MB
 * at a fixed 100 requests/s (h2load, pre-encoded; the body in 16 KiB request_body messages, as
 * Envoy forwards a body frame by frame), through spillway-epp without a tokenizer and with the
 * Qwen3 preset (`--tokenizer '*=qwen3'`, KV data present so prompts are tokenized), and through the
 * bare grpc-js server doing the same exchange (the transport's cost of each body, the baseline).
 * The EPP's own split comes from `spillway_request_phase_seconds` (docs/metrics.md), read from
 * /metrics after the warm-up and at the end of each run: receive, parse, tokenize, pick, answer,
 * and decide (the body's last byte in to the destination out), p50 and p99 each.
 */
export const extprocPhases: BenchPart = {
  name: 'extproc-phases',
  title: "ext_proc: where the EPP's time goes, by body size (h2load)",
  run,
};

const KIB = 1024;
const SIZES = [1 * KIB, 16 * KIB, 256 * KIB, 1024 * KIB];
const CHUNK_BYTES = 16 * KIB;
const RATE = 100;
const CLIENTS = 4;
const STREAMS = 8;
/** Targets for decide (last body byte in to destination out), p99 at 256 KB. */
const TARGET_SIZE = 256 * KIB;
const TARGETS: Record<Variant, number> = { plain: 0.002, qwen3: 0.01 };

interface Plan {
  seconds: number;
  warmupSeconds: number;
}
const FULL: Plan = { seconds: 10, warmupSeconds: 2 };
const QUICK: Plan = { seconds: 2, warmupSeconds: 1 };

type Variant = 'plain' | 'qwen3';
const VARIANT_LABEL: Record<Variant, string> = { plain: 'spillway-epp, no tokenizer', qwen3: "spillway-epp, --tokenizer '*=qwen3'" };

interface Measured {
  size: number;
  server: 'bare' | Variant;
  result: LoadResult;
  /** The EPP's phases over the measured window (EPP runs only). */
  phases: PhaseHistograms | undefined;
}

const ms = (seconds: number): string => (Number.isFinite(seconds) ? (seconds * 1000).toFixed(seconds < 0.001 ? 3 : 2) : '–');
const msOf = (n: number): string => (Number.isFinite(n) ? n.toFixed(2) : '–');
const sizeLabel = (bytes: number): string => (bytes >= 1024 * KIB ? `${bytes / (1024 * KIB)} MB` : `${bytes / KIB} KB`);

/** One h2load run at RATE against `port`, the EPP's phases read after the warm-up and at the end. */
async function measure(
  spec: { port: number; pid: number | undefined; file: string; dir: string; plan: Plan },
  metricsPort: number | undefined,
): Promise<{ result: LoadResult; phases: PhaseHistograms | undefined }> {
  const load = runH2load(
    {
      port: spec.port,
      file: spec.file,
      clients: CLIENTS,
      streamsPerClient: STREAMS,
      seconds: spec.plan.seconds,
      warmupSeconds: spec.plan.warmupSeconds,
      rate: RATE,
      logFile: join(spec.dir, 'latency.tsv'),
    },
    spec.pid,
  );
  let before: PhaseHistograms | undefined;
  if (metricsPort !== undefined) {
    await sleep(spec.plan.warmupSeconds * 1000);
    before = await readPhases(metricsPort);
  }
  const result = await load;
  const phases = metricsPort === undefined || before === undefined ? undefined : since(before, await readPhases(metricsPort));
  if (result.failed + result.errored + result.timeout > 0)
    throw new Error(`h2load: ${result.failed} failed, ${result.errored} errored, ${result.timeout} timed out`);
  return { result, phases };
}

/** Tokenizing waits for KV data: one pod of the pool reports an empty cache, and the EPP applies it. */
async function publishKvData(nc: NatsConnection, epp: RunningEppChild, zone: string, pod: string): Promise<void> {
  nc.publish(
    kvSubjectFor({ pool: POOL, zone, pod }),
    encodeKvBatch({ v: 1, pool: POOL, zone, pod, seq: 0, observedAt: Date.now(), blockSize: 16, events: [[3]] }),
  );
  await nc.flush();
  await eventually(async () => {
    const text = await (await fetch(`http://127.0.0.1:${epp.metricsPort}/metrics`)).text();
    if (!/^spillway_kv_batches_total\{result="applied"\} [1-9]/m.test(text)) throw new Error('the EPP has not applied the KV batch');
  }, 10_000);
}

async function run(context: BenchContext): Promise<string> {
  const title = `## ${extprocPhases.title}`;
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
  const dir = mkdtempSync(join(tmpdir(), 'spillway-bench-extproc-phases-'));
  const children: Child[] = [];
  let stopRefresh: (() => void) | undefined;
  let publisher: TestPublisher | undefined;
  let raw: NatsConnection | undefined;
  const nats = await startNatsServer({ forcePrivate: true });
  const killNats = (): void => void nats.kill();
  process.once('exit', killNats);
  try {
    publisher = await TestPublisher.connect(nats.url);
    raw = await connect({ servers: nats.url });
    stopRefresh = await keepPodsFresh(publisher, pods, REFRESH_MS);
    const bare = await startBareServer();
    children.push(bare);
    const exchanges = new Map<number, { exchange: EncodedExchange; file: string }>();
    for (const size of SIZES) {
      const exchange = encodedExchange({ path: '/v1/chat/completions', body: chatBody(MODEL, size), subset, chunkBytes: CHUNK_BYTES });
      const file = join(dir, `chat-${size}.bin`);
      writeFileSync(file, exchange.bytes);
      exchanges.set(size, { exchange, file });
    }
    const runs: Measured[] = [];
    const tokenizedShare = new Map<number, number>();
    for (const variant of ['plain', 'qwen3'] as const) {
      const epp: RunningEppChild = await startEppChild(nats.url, LOCAL_ZONE, variant === 'qwen3' ? ['--tokenizer', '*=qwen3'] : []);
      children.push(epp);
      if (variant === 'qwen3') await publishKvData(raw, epp, LOCAL_ZONE, pods[0]?.pod as string);
      context.log(`${VARIANT_LABEL[variant]}: pid ${epp.pid} on :${epp.grpcPort}`);
      for (const size of SIZES) {
        const { exchange, file } = exchanges.get(size) as { exchange: EncodedExchange; file: string };
        // Checked once: routed, the whole body echoed; with the tokenizer, the prompt tokenized (or,
        // past --tokenize-max-chars, deliberately not).
        const checkBefore = await readPhases(epp.metricsPort);
        assertRouted(`${VARIANT_LABEL[variant]} (${sizeLabel(size)})`, await sendOnce(epp.grpcPort, exchange.bytes, 3), exchange.bodyBytes);
        if (variant === 'qwen3') tokenizedShare.set(size, since(checkBefore, await readPhases(epp.metricsPort)).phases.tokenize.count / 3);
        if (variant === 'plain') {
          assertRouted(`the bare server (${sizeLabel(size)})`, await sendOnce(bare.port, exchange.bytes, 3), exchange.bodyBytes);
          const b = await measure({ port: bare.port, pid: bare.pid, file, dir, plan }, undefined);
          runs.push({ size, server: 'bare', ...b });
          context.log(
            `${sizeLabel(size)} bare: ${b.result.requestsPerSecond.toFixed(0)} req/s, p50 ${msOf(b.result.p50)} p99 ${msOf(b.result.p99)} ms`,
          );
        }
        const m = await measure({ port: epp.grpcPort, pid: epp.pid, file, dir, plan }, epp.metricsPort);
        runs.push({ size, server: variant, ...m });
        const p = m.phases as PhaseHistograms;
        context.log(
          `${sizeLabel(size)} ${variant}: ${m.result.requestsPerSecond.toFixed(0)} req/s, p50 ${msOf(m.result.p50)} p99 ${msOf(m.result.p99)} ms; ` +
            PHASES.map((phase) => `${phase} ${ms(quantile(p, phase, 0.5))}/${ms(quantile(p, phase, 0.99))}`).join(', '),
        );
      }
      await epp.stop();
      children.splice(children.indexOf(epp), 1);
    }
    return report({
      plan,
      runs,
      version,
      exchanges,
      tokenizedShare,
      quiet: context.quiet.quiet,
      load: { before: context.quiet.load, after: loadavg()[0] as number },
    });
  } finally {
    stopRefresh?.();
    for (const child of children.reverse()) await child.stop();
    await raw?.close().catch(() => undefined);
    await publisher?.close().catch(() => undefined);
    await nats.stop();
    process.off('exit', killNats);
    rmSync(dir, { recursive: true, force: true });
  }
}

interface ReportInput {
  plan: Plan;
  runs: Measured[];
  version: string;
  exchanges: Map<number, { exchange: EncodedExchange }>;
  /** Share of the check requests whose prompt the qwen3 EPP tokenized, by size. */
  tokenizedShare: Map<number, number>;
  quiet: boolean;
  load: { before: number; after: number };
}

function report(input: ReportInput): string {
  const { plan, runs } = input;
  const find = (size: number, server: Measured['server']) => runs.find((r) => r.size === size && r.server === server);
  const endToEnd = SIZES.flatMap((size) =>
    (['bare', 'plain', 'qwen3'] as const).map((server) => {
      const r = find(size, server) as Measured;
      const bare = find(size, 'bare') as Measured;
      const added = server === 'bare' ? ['', ''] : [msOf(r.result.p50 - bare.result.p50), msOf(r.result.p99 - bare.result.p99)];
      const label = server === 'bare' ? 'bare grpc-js server' : VARIANT_LABEL[server];
      return [
        sizeLabel(size),
        label,
        r.result.requestsPerSecond.toFixed(0),
        msOf(r.result.p50),
        msOf(r.result.p99),
        ...added,
        r.result.serverCpuMicrosPerRequest.toFixed(0),
      ];
    }),
  );
  const phaseRows = SIZES.flatMap((size) =>
    (['plain', 'qwen3'] as const).map((variant) => {
      const p = (find(size, variant) as Measured).phases as PhaseHistograms;
      const cell = (phase: Phase) =>
        p.phases[phase].count === 0 ? '–' : `${ms(quantile(p, phase, 0.5))} / ${ms(quantile(p, phase, 0.99))}`;
      return [sizeLabel(size), variant === 'plain' ? 'none' : 'Qwen3', ...PHASES.map(cell), p.phases.decide.count];
    }),
  );
  const verdict = (variant: Variant): string => {
    const p = (find(TARGET_SIZE, variant) as Measured).phases as PhaseHistograms;
    const bound = TARGETS[variant];
    const share = shareAtMost(p, 'decide', bound);
    const met = share >= 0.99;
    const provisional = input.quiet ? '' : ' (provisional: the machine was not quiet)';
    return `- ${sizeLabel(TARGET_SIZE)} ${variant === 'plain' ? 'without a tokenizer' : 'with the Qwen3 tokenizer'}: last body byte in to destination out, p99 < ${bound * 1000} ms: ${(share * 100).toFixed(1)} % of ${p.phases.decide.count} requests within ${bound * 1000} ms (p99 ≈ ${ms(quantile(p, 'decide', 0.99))} ms) — ${met ? '**MET**' : '**NOT MET**'}${provisional}.`;
  };
  const spec = { clients: CLIENTS, streamsPerClient: STREAMS, seconds: plan.seconds, warmupSeconds: plan.warmupSeconds, rate: RATE };
  const busy = input.quiet
    ? `The machine was quiet when the part started (1-minute load average ${input.load.before.toFixed(2)}, ${input.load.after.toFixed(2)} after).`
    : `**The machine was not quiet** (1-minute load average ${input.load.before.toFixed(1)} before this part, ${input.load.after.toFixed(1)} after, on ${cpus().length} shared cores): every latency here includes waiting for a core; provisional until a run on a quiet machine.`;
  const tokenized = SIZES.map((s) => `${sizeLabel(s)} ${((input.tokenizedShare.get(s) ?? 0) * 100).toFixed(0)} %`).join(', ');
  const messages = SIZES.map((s) => `${sizeLabel(s)}: ${input.exchanges.get(s)?.exchange.messages}`).join(', ');
  return [
    `## ${extprocPhases.title}`,
    '',
    `Chat-completion bodies (one user message of prose-like text, so a tokenizer tokenizes all of it: no earlier turn to cache) at a fixed ${RATE} requests/s, driven by ${input.version} with pre-encoded messages (${CLIENTS} connections × ${STREAMS} streams, ${plan.seconds} s after ${plan.warmupSeconds} s of warm-up per row): request_headers with a ${SUBSET}-entry subset hint, then the body in ${CHUNK_BYTES / KIB} KiB request_body messages as Envoy forwards a body frame by frame (messages per request: ${messages}). Each server answers with the destination and echoes the body. Servers: the bare grpc-js server doing the same exchange (the baseline: what the transport costs for each body), spillway-epp without a tokenizer, and spillway-epp with \`--tokenizer '*=qwen3'\` and KV data present, so prompts are tokenized for precise prefix-cache routing (tokenized in the check before measuring: ${tokenized}; prompts over \`--tokenize-max-chars\`, 256 Ki characters, are not). The EPP runs as in the \`extproc\` part (${PODS} pods, metrics refreshed every ${REFRESH_MS} ms).`,
    '',
    `- ${busy}`,
    '',
    '```',
    `${displayCommand(spec)}   # --rps is per connection: rate / ${CLIENTS}`,
    '```',
    '',
    'End to end (h2load: per request, from its first byte sent to the end of the answer, the echoed body included; added = EPP − bare at the same percentile):',
    '',
    markdownTable(['body', 'server', 'req/s done', 'p50 ms', 'p99 ms', 'added p50 ms', 'added p99 ms', 'CPU µs/req'], endToEnd),
    '',
    "Inside the EPP (`spillway_request_phase_seconds`, read after the warm-up and at the end of each run; p50 / p99 in ms, estimated within the histogram's 1-2-5 buckets as Prometheus's `histogram_quantile` does). receive: first body message to the end of the body (the body's transfer and decoding, and any wait for the event loop); parse: the body to a request; tokenize: the prompt to token ids; pick; answer: the destination and the echoed body written; decide: the last body byte in to the destination out (parse + tokenize + pick + answer):",
    '',
    markdownTable(['body', 'tokenizer', ...PHASES.map((p) => `${p} p50 / p99`), 'requests'], phaseRows),
    '',
    '### Targets',
    '',
    "Verdicts from the histogram's own buckets (2 ms and 10 ms are bucket bounds, so the share within them is exact):",
    '',
    verdict('plain'),
    verdict('qwen3'),
    '',
    "For comparison, the published breakdown of the Gateway API Inference Extension's EPP (now in llm-d) for 220 KB prompts spends 286 ms, 260 of them streaming the body.",
  ].join('\n');
}
