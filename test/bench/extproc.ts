import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { startNatsServer, TestPublisher } from '@spillway/testkit';
import { markdownTable, type BenchContext, type BenchPart } from './part.js';
import { displayCommand, H2LOAD_INSTALL, h2loadVersion, runH2load, type LoadResult, type LoadSpec } from './extproc/h2load.js';
import { eppOutcomes, keepPodsFresh, podPool, startBareServer, startEppChild, type Child } from './extproc/processes.js';
import { assertRouted, encodedRequest, sendOnce } from './extproc/request.js';

/**
 * ext_proc throughput and latency (issue 4 "Benchmark", issue 7 part 2): h2load drives the built
 * spillway-epp and, in the same run, a bare grpc-js ext_proc server answering every request with a
 * fixed destination (the transport's limit). One h2load request = one ext_proc stream carrying the
 * messages Envoy sends for a full-duplex `/v1/completions` request with a 1 KB body and a 16-entry
 * subset hint. The two servers are measured alternately so drift on the shared machine hits both.
 *
 * `SPILLWAY_BENCH_NODE_FLAGS='--cpu-prof --cpu-prof-dir DIR'` passes node flags to both servers.
 */
export const extproc: BenchPart = {
  name: 'extproc',
  title: 'ext_proc: spillway-epp against a bare grpc-js server (h2load)',
  run,
};

const ZONES = ['zone-a', 'zone-b', 'zone-c'];
const LOCAL_ZONE = 'zone-a';
const PODS = 100;
const SUBSET = 16;
const MODEL = 'llama';
const REFRESH_MS = 250;
const CLIENTS = 4;
const STREAMS = 32;
const TARGET_RATIO = 0.8;
const TARGET_RATE = 2000;
const TARGET_ADDED_P99_MS = 5;

interface Plan {
  saturationSeconds: number;
  saturationRepeats: number;
  rates: number[];
  rateSeconds: number;
  rateRepeats: number;
  warmupSeconds: number;
}

const FULL: Plan = { saturationSeconds: 8, saturationRepeats: 3, rates: [500, 1000, 2000, 3000], rateSeconds: 6, rateRepeats: 3, warmupSeconds: 2 };
const QUICK: Plan = { saturationSeconds: 4, saturationRepeats: 1, rates: [2000], rateSeconds: 5, rateRepeats: 1, warmupSeconds: 1 };

type ServerName = 'bare' | 'epp';
const LABEL: Record<ServerName, string> = { bare: 'bare grpc-js server', epp: 'spillway-epp' };

interface Run {
  server: ServerName;
  repeat: number;
  rate: number | undefined;
  result: LoadResult;
}

const ms = (n: number): string => (Number.isFinite(n) ? n.toFixed(2) : '–');
const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
};
const verdict = (met: boolean): string => (met ? '**MET**' : '**NOT MET**');

async function run(context: BenchContext): Promise<string> {
  const title = '## ext_proc: spillway-epp against a bare grpc-js server (h2load)';
  const version = h2loadVersion();
  if (version === undefined) {
    context.log(H2LOAD_INSTALL);
    return [title, '', `**Not measured: ${H2LOAD_INSTALL}**`].join('\n');
  }
  const plan = context.quick ? QUICK : FULL;
  const pods = podPool(PODS, ZONES);
  const subset = pods.filter((p) => p.zone === LOCAL_ZONE).slice(0, SUBSET).map((p) => p.address);
  const request = encodedRequest(MODEL, subset);
  const dir = mkdtempSync(join(tmpdir(), 'spillway-bench-extproc-'));
  const file = join(dir, 'request.bin');
  writeFileSync(file, request.bytes);

  const loadBefore = loadavg()[0] as number;
  const children: Child[] = [];
  let stopRefresh: (() => void) | undefined;
  let publisher: TestPublisher | undefined;
  const nats = await startNatsServer({ forcePrivate: true });
  // Should the bench process die without running the finally below, take nats-server with it.
  const killNats = (): void => void nats.kill();
  process.once('exit', killNats);
  try {
    publisher = await TestPublisher.connect(nats.url);
    stopRefresh = await keepPodsFresh(publisher, pods, REFRESH_MS);
    context.log(`${PODS} pods over ${ZONES.length} zones published; metrics refreshed every ${REFRESH_MS} ms`);
    const epp = await startEppChild(nats.url, LOCAL_ZONE);
    children.push(epp);
    const bare = await startBareServer();
    children.push(bare);
    context.log(`spillway-epp pid ${epp.pid} ready on :${epp.grpcPort}; bare server pid ${bare.pid} on :${bare.port}; ${version}`);

    // The one-off check that the request is routed (gRPC OK, destination set, body echoed), not an error path.
    const checks = 50;
    const eppAnswers = await sendOnce(epp.grpcPort, request.bytes, checks);
    assertRouted('spillway-epp', eppAnswers, request.bodyBytes);
    assertRouted('the bare server', await sendOnce(bare.port, request.bytes, 3), request.bodyBytes);
    const primaries = new Set(eppAnswers.map((a) => (a.destination as string).split(',')[0] as string));
    const outside = [...primaries].filter((p) => !subset.includes(p));
    if (outside.length > 0) throw new Error(`spillway-epp picked outside the subset hint: ${outside.join(', ')}`);
    const listLength = median(eppAnswers.map((a) => (a.destination as string).split(',').length));
    context.log(`checked: ${checks} EPP answers routed, ${primaries.size} distinct primaries, all inside the subset`);

    const servers: Record<ServerName, { port: number; pid: number | undefined }> = {
      bare: { port: bare.port, pid: bare.pid },
      epp: { port: epp.grpcPort, pid: epp.pid },
    };
    const outcomesBefore = await eppOutcomes(epp.metricsPort);
    const runs: Run[] = [];
    const measure = async (server: ServerName, repeat: number, rate: number | undefined, seconds: number): Promise<void> => {
      const spec: LoadSpec = {
        port: servers[server].port,
        file,
        clients: CLIENTS,
        streamsPerClient: STREAMS,
        seconds,
        warmupSeconds: plan.warmupSeconds,
        rate,
        logFile: join(dir, 'latency.tsv'),
      };
      const result = await runH2load(spec, servers[server].pid);
      if (result.failed + result.errored + result.timeout > 0) {
        throw new Error(`h2load against ${LABEL[server]}: ${result.failed} failed, ${result.errored} errored, ${result.timeout} timed out`);
      }
      runs.push({ server, repeat, rate, result });
      context.log(
        `${rate === undefined ? 'saturation' : `${rate} req/s`} #${repeat + 1} ${LABEL[server]}: ${result.requestsPerSecond.toFixed(0)} req/s, ` +
          `p50 ${ms(result.p50)} p99 ${ms(result.p99)} p99.9 ${ms(result.p999)} ms, ${result.serverCpuMicrosPerRequest.toFixed(0)} µs CPU/request`,
      );
    };
    for (let repeat = 0; repeat < plan.saturationRepeats; repeat++) {
      for (const server of ['bare', 'epp'] as const) await measure(server, repeat, undefined, plan.saturationSeconds);
    }
    for (const rate of plan.rates) {
      for (let repeat = 0; repeat < plan.rateRepeats; repeat++) {
        for (const server of ['bare', 'epp'] as const) await measure(server, repeat, rate, plan.rateSeconds);
      }
    }
    const outcomesAfter = await eppOutcomes(epp.metricsPort);
    const outcomeDelta = [...outcomesAfter].map(([k, v]) => [k, v - (outcomesBefore.get(k) ?? 0)] as const).filter(([, v]) => v > 0);
    const eppDone = runs.filter((r) => r.server === 'epp').reduce((n, r) => n + r.result.done, 0);

    const load = { before: loadBefore, after: loadavg()[0] as number };
    return report({ plan, runs, version, request, listLength, primaries: primaries.size, outcomeDelta, eppDone, load });
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
  request: { bytes: Buffer; messages: number; bodyBytes: number };
  listLength: number;
  primaries: number;
  outcomeDelta: (readonly [string, number])[];
  eppDone: number;
  /** 1-minute load average before and after the part. */
  load: { before: number; after: number };
}

function pooled(runs: Run[]): { p50: number; p99: number; p999: number; rate: number } {
  const all = runs.flatMap((r) => Array.from(r.result.latenciesMs)).sort((a, b) => a - b);
  const at = (p: number): number => all[Math.min(all.length - 1, Math.max(0, Math.ceil((p / 100) * all.length) - 1))] as number;
  return { p50: at(50), p99: at(99), p999: at(99.9), rate: median(runs.map((r) => r.result.requestsPerSecond)) };
}

function report(input: ReportInput): string {
  const { plan, runs } = input;
  const saturation = runs.filter((r) => r.rate === undefined);
  const sat = (server: ServerName) => saturation.filter((r) => r.server === server);
  const bareRps = median(sat('bare').map((r) => r.result.requestsPerSecond));
  const eppRps = median(sat('epp').map((r) => r.result.requestsPerSecond));
  const ratio = eppRps / bareRps;
  const pairRatios = sat('epp').map((r, i) => r.result.requestsPerSecond / (sat('bare')[i]?.result.requestsPerSecond ?? Number.NaN));
  const bareCpu = median(sat('bare').map((r) => r.result.serverCpuMicrosPerRequest));
  const eppCpu = median(sat('epp').map((r) => r.result.serverCpuMicrosPerRequest));

  const saturationRows = saturation.map((r) => [
    r.repeat + 1,
    LABEL[r.server],
    r.result.requestsPerSecond.toFixed(0),
    ms(r.result.p50),
    ms(r.result.p99),
    ms(r.result.p999),
    r.result.serverCpuMicrosPerRequest.toFixed(0),
  ]);

  const rateRows: (string | number)[][] = [];
  const addedRows: (string | number)[][] = [];
  let addedAtTarget: { p99: number; eppKept: boolean; bareKept: boolean } | undefined;
  for (const rate of plan.rates) {
    const at = (server: ServerName) => runs.filter((r) => r.rate === rate && r.server === server);
    const stats = { bare: pooled(at('bare')), epp: pooled(at('epp')) };
    for (const server of ['bare', 'epp'] as const) {
      const s = stats[server];
      rateRows.push([
        rate,
        LABEL[server],
        s.rate.toFixed(0),
        ms(s.p50),
        ms(s.p99),
        ms(s.p999),
        at(server).map((r) => ms(r.result.p99)).join(', '),
        median(at(server).map((r) => r.result.serverCpuMicrosPerRequest)).toFixed(0),
      ]);
    }
    const added = { p50: stats.epp.p50 - stats.bare.p50, p99: stats.epp.p99 - stats.bare.p99, p999: stats.epp.p999 - stats.bare.p999 };
    const eppKept = stats.epp.rate >= 0.95 * rate;
    const bareKept = stats.bare.rate >= 0.95 * rate;
    if (rate === TARGET_RATE) addedAtTarget = { p99: added.p99, eppKept, bareKept };
    const kept = eppKept && bareKept ? 'yes' : `no (${[eppKept ? '' : 'spillway-epp', bareKept ? '' : 'bare'].filter(Boolean).join(', ')} short)`;
    addedRows.push([rate, ms(added.p50), ms(added.p99), ms(added.p999), kept]);
  }

  const ratioMet = ratio >= TARGET_RATIO;
  const latencyLine =
    addedAtTarget === undefined
      ? `- p99 added latency at ${TARGET_RATE} req/s under ${TARGET_ADDED_P99_MS} ms: not measured in this run.`
      : !addedAtTarget.eppKept
        ? `- p99 added latency at ${TARGET_RATE} req/s under ${TARGET_ADDED_P99_MS} ms: spillway-epp did not sustain ${TARGET_RATE} req/s in this run (added p99 of what was sent: ${ms(addedAtTarget.p99)} ms) — ${verdict(false)}.`
        : !addedAtTarget.bareKept
          ? `- p99 added latency at ${TARGET_RATE} req/s under ${TARGET_ADDED_P99_MS} ms: not shown — the bare baseline did not sustain ${TARGET_RATE} req/s in this run, so the difference (${ms(addedAtTarget.p99)} ms) compares unequal loads — ${verdict(false)} (not demonstrated).`
          : `- p99 added latency at ${TARGET_RATE} req/s under ${TARGET_ADDED_P99_MS} ms: ${ms(addedAtTarget.p99)} ms — ${verdict(addedAtTarget.p99 < TARGET_ADDED_P99_MS)}.`;
  const saturationSpec = { clients: CLIENTS, streamsPerClient: STREAMS, seconds: plan.saturationSeconds, warmupSeconds: plan.warmupSeconds };
  const rateSpec = { ...saturationSpec, seconds: plan.rateSeconds, rate: TARGET_RATE };
  const outcomes = input.outcomeDelta.map(([k, v]) => `${k}: ${v}`).join(', ') || 'none';
  const spread = (values: number[], digits = 2): string => `${Math.min(...values).toFixed(digits)}–${Math.max(...values).toFixed(digits)}`;

  return [
    '## ext_proc: spillway-epp against a bare grpc-js server (h2load)',
    '',
    `Load generator: ${input.version}, one thread. One request = one HTTP/2 POST to \`/envoy.service.ext_proc.v3.ExternalProcessor/Process\` (\`content-type: application/grpc\`, \`te: trailers\`) whose body is ${input.request.messages} pre-encoded ext_proc messages, each behind gRPC's 5-byte prefix (${input.request.bytes.length} bytes): request_headers as Envoy sends them in FULL_DUPLEX_STREAMED (protocol_config, \`:path /v1/completions\`, content-type, a subset hint of ${SUBSET} local endpoints in \`metadata_context.filter_metadata["envoy.lb.subset_hint"]\`), then one request_body with a ${input.request.bodyBytes}-byte JSON completions body and end_of_stream. The request half-closes after the body; each server answers with the headers response carrying the destination and the body echoed as streamed_response, then ends the stream.`,
    '',
    `- **spillway-epp**: the built binary (\`services/epp/bin/spillway-epp.js --log-level warn\`, zone ${LOCAL_ZONE}, defaults otherwise: strict subset, up to 3 endpoints per list) following a private nats-server. The pool is ${PODS} pods over ${ZONES.length} zones; the bench publishes their readiness and refreshes every pod's metrics every ${REFRESH_MS} ms, so the view stays fresh and every pick scores real candidates.`,
    `- **bare grpc-js server** (\`test/bench/extproc/bare-server.ts\`): the same \`extProcService\` and server options, a fixed destination and the same response messages (\`routedResponses\`), nothing else: the transport's own limit.`,
    `- Checked before measuring, by sending the same bytes over node:http2 and decoding the answers: both servers return grpc-status 0, a destination header in the first response and the whole body echoed. ${input.primaries} distinct primaries over 50 EPP answers, all inside the subset (every request carries the same prompt, so the prefix-cache scorer keeps choosing the same endpoint); median list length ${input.listLength}. h2load sees only HTTP statuses (gRPC errors travel in trailers), so the EPP's own \`spillway_requests_total\` was also read before and after the runs: ${outcomes} (h2load completed ${input.eppDone} EPP requests in the measured windows; the rest were warm-up).`,
    `- Servers and h2load alternate (bare, EPP, bare, EPP, …) so drift hits both. Percentiles come from h2load's \`--log-file\` (per-request time to end of response), pooled over the repeats; \`CPU µs/req\` is the server process's user+system time over the measured window divided by requests done (from /proc), a figure that does not depend on how the cores were shared.`,
    `- **The load generator, nats-server and both servers share the machine's ${cpus().length} cores with each other and with other engineers' work** (1-minute load average ${input.load.before.toFixed(1)} before this part, ${input.load.after.toFixed(1)} after), so absolute figures are pessimistic and noisy; the ratio and the added latency, measured in the same run, are what to read, with the spread between repeats as the noise.`,
    '',
    `### Saturation (${CLIENTS} connections × ${STREAMS} streams, ${plan.saturationSeconds} s after ${plan.warmupSeconds} s warm-up)`,
    '',
    '```',
    displayCommand(saturationSpec),
    '```',
    '',
    markdownTable(['repeat', 'server', 'req/s', 'p50 ms', 'p99 ms', 'p99.9 ms', 'CPU µs/req'], saturationRows),
    '',
    `Median throughput: bare ${bareRps.toFixed(0)} req/s, spillway-epp ${eppRps.toFixed(0)} req/s: **ratio ${(ratio * 100).toFixed(0)}%** (per-pair ratios ${spread(pairRatios)}). Server CPU per request: bare ${bareCpu.toFixed(0)} µs, spillway-epp ${eppCpu.toFixed(0)} µs (${(eppCpu / bareCpu).toFixed(2)}×), so with a core to itself the EPP would reach about ${((bareCpu / eppCpu) * 100).toFixed(0)}% of the bare server's throughput (the CPU-based ratio, less sensitive to how the cores were shared than req/s). At saturation the latency is queueing behind ${CLIENTS * STREAMS} outstanding streams (Little's law), not service time.`,
    '',
    `### Fixed request rates (${plan.rateSeconds} s each after ${plan.warmupSeconds} s warm-up, ${plan.rateRepeats} repeat${plan.rateRepeats > 1 ? 's' : ''} per server)`,
    '',
    '```',
    `${displayCommand(rateSpec)}   # --rps is per connection: rate / ${CLIENTS}`,
    '```',
    '',
    markdownTable(['req/s asked', 'server', 'req/s done', 'p50 ms', 'p99 ms', 'p99.9 ms', 'p99 per repeat', 'CPU µs/req'], rateRows),
    '',
    `h2load keeps at most ${CLIENTS} × ${STREAMS} = ${CLIENTS * STREAMS} requests outstanding, so a server whose latency grows past ${CLIENTS * STREAMS} / rate (${((CLIENTS * STREAMS * 1000) / TARGET_RATE).toFixed(0)} ms at ${TARGET_RATE} req/s) cannot be offered the full rate: "req/s done" then falls short, and the latency it reports is that of the requests that were sent.`,
    '',
    'Added latency of spillway-epp over the bare server (pooled percentiles, EPP − bare):',
    '',
    markdownTable(['req/s', 'added p50 ms', 'added p99 ms', 'added p99.9 ms', 'both kept the rate'], addedRows),
    '',
    '### Targets (issue 7)',
    '',
    `- Throughput ≥ ${TARGET_RATIO * 100}% of the bare server's: ${(ratio * 100).toFixed(0)}% measured (per-pair ${spread(pairRatios.map((r) => r * 100), 0)}%; CPU-based ${((bareCpu / eppCpu) * 100).toFixed(0)}%) — ${verdict(ratioMet)}.`,
    latencyLine,
  ].join('\n');
}
