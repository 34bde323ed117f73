import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { startNatsServer, TestPublisher } from '@spillway/testkit';
import { markdownTable, median, type BenchContext, type BenchPart } from './part.js';
import { displayCommand, H2LOAD_INSTALL, h2loadVersion, runH2load, type LoadResult, type LoadSpec } from './extproc/h2load.js';
import {
  eppCounter,
  eppOutcomes,
  keepPodsFresh,
  mirrorPeer,
  podPool,
  startBareServer,
  startEppChild,
  type Child,
} from './extproc/processes.js';
import { eppInProcess, type InProcess } from './extproc/in-process.js';
import { assertRouted, encodedRequest, sendOnce } from './extproc/request.js';
import { CLIENTS, LOCAL_ZONE, MODEL, PODS, REFRESH_MS, STREAMS, SUBSET, ZONES } from './extproc/setup.js';

/**
 * ext_proc throughput, CPU and latency against the transport's limit: h2load drives the built spillway-epp
 * and, in the same run, a bare grpc-js ext_proc server doing the minimum valid exchange with a fixed
 * destination (the transport's limit). One h2load request = one ext_proc stream carrying what Envoy
 * sends for one `/v1/completions` request in the shipped config's mode: request_headers, the 1 KB
 * body (FULL_DUPLEX_STREAMED), and response_headers with the served endpoint; a 16-entry subset hint
 * on every message. The servers alternate (ABBA over repeats) so drift hits both; the server CPU per
 * request comes from /proc.
 *
 * `SPILLWAY_BENCH_NODE_FLAGS='--cpu-prof --cpu-prof-dir DIR'` passes node flags to both servers.
 */
export const extproc: BenchPart = {
  name: 'extproc',
  title: 'ext_proc: spillway-epp against a bare grpc-js server (h2load)',
  run,
};

/** The ext_proc targets, EPP against bare in the same run. */
const TARGET_CPU_RATIO = 1.2;
const TARGET_SATURATION_RATIO = 0.85;
const TARGET_RATE = 2000;
const TARGET_P99_RATIO = 1.5;

interface Plan {
  saturationSeconds: number;
  saturationRepeats: number;
  rates: number[];
  rateSeconds: number;
  rateRepeats: number;
  warmupSeconds: number;
}

const FULL: Plan = {
  saturationSeconds: 8,
  saturationRepeats: 4,
  rates: [1000, 2000, 3000],
  rateSeconds: 6,
  rateRepeats: 4,
  warmupSeconds: 2,
};
const QUICK: Plan = { saturationSeconds: 4, saturationRepeats: 2, rates: [2000], rateSeconds: 4, rateRepeats: 2, warmupSeconds: 1 };

/** Repeat r runs bare then EPP when r is even, EPP then bare when odd (ABBA): a drift hits both alike. */
const order = (repeat: number): readonly ServerName[] => {
  const servers: ServerName[] = BEFORE === undefined ? ['bare', 'epp'] : ['bare', 'epp', 'before'];
  return repeat % 2 === 0 ? servers : servers.reverse();
};

type ServerName = 'bare' | 'epp' | 'before';
const LABEL: Record<ServerName, string> = { bare: 'bare grpc-js server', epp: 'spillway-epp', before: 'spillway-epp (before)' };

/**
 * `SPILLWAY_BENCH_EPP_BEFORE=DIR`: a built checkout of another version of the repository, whose
 * spillway-epp then joins the rotation, so a change's effect (CPU per request before → after) is
 * measured in the same run on the same machine.
 */
const BEFORE = process.env['SPILLWAY_BENCH_EPP_BEFORE'];

interface Run {
  server: ServerName;
  repeat: number;
  rate: number | undefined;
  result: LoadResult;
}

const ms = (n: number): string => (Number.isFinite(n) ? n.toFixed(2) : '–');
const verdict = (met: boolean): string => (met ? '**MET**' : '**NOT MET**');
const ratioText = (r: number): string => (Number.isFinite(r) ? `${r.toFixed(2)}×` : '–');

async function run(context: BenchContext): Promise<string> {
  const title = '## ext_proc: spillway-epp against a bare grpc-js server (h2load)';
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
  const routing = encodedRequest(MODEL, subset);
  const dir = mkdtempSync(join(tmpdir(), 'spillway-bench-extproc-'));
  const file = join(dir, 'request.bin');

  const loadBefore = context.quiet.load;
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
    // Sharing on with a peer as busy as the EPP: every batch it publishes comes back as a peer's.
    const mirror = mirrorPeer(publisher, LOCAL_ZONE);
    const bare = await startBareServer();
    children.push(bare);
    // Another version, for a before → after comparison: a second EPP of the same pool and zone (a peer).
    const before = BEFORE === undefined ? undefined : await startEppChild(nats.url, LOCAL_ZONE, [], BEFORE);
    if (before !== undefined) {
      children.push(before);
      context.log(`spillway-epp (before) from ${BEFORE}: pid ${before.pid} on :${before.grpcPort}`);
    }
    context.log(`spillway-epp pid ${epp.pid} ready on :${epp.grpcPort}; bare server pid ${bare.pid} on :${bare.port}; ${version}`);

    // The served endpoint Envoy reports is the primary the EPP chose (the usual case): ask once.
    const [first] = await sendOnce(epp.grpcPort, routing.bytes, 1);
    assertRouted('spillway-epp', first ? [first] : [], routing.bodyBytes);
    const destination = first?.destination as string;
    const request = encodedRequest(MODEL, subset, { served: destination.split(',')[0] as string, destination });
    writeFileSync(file, request.bytes);

    // The one-off check that the request is routed (gRPC OK, destination set, body echoed, the
    // response headers answered), not an error path.
    const checks = 50;
    const eppAnswers = await sendOnce(epp.grpcPort, request.bytes, checks);
    assertRouted('spillway-epp', eppAnswers, request.bodyBytes, 1);
    assertRouted('the bare server', await sendOnce(bare.port, request.bytes, 3), request.bodyBytes, 1);
    const primaries = new Set(eppAnswers.map((a) => (a.destination as string).split(',')[0] as string));
    const outside = [...primaries].filter((p) => !subset.includes(p));
    if (outside.length > 0) throw new Error(`spillway-epp picked outside the subset hint: ${outside.join(', ')}`);
    const listLength = median(eppAnswers.map((a) => (a.destination as string).split(',').length));
    context.log(`checked: ${checks} EPP answers routed, ${primaries.size} distinct primaries, all inside the subset`);

    if (before !== undefined)
      assertRouted('spillway-epp (before)', await sendOnce(before.grpcPort, request.bytes, 3), request.bodyBytes, 1);
    const servers: Record<ServerName, { port: number; pid: number | undefined }> = {
      bare: { port: bare.port, pid: bare.pid },
      epp: { port: epp.grpcPort, pid: epp.pid },
      before: { port: before?.grpcPort ?? 0, pid: before?.pid },
    };
    // The EPP's own request path without the transport, in this process, before any load runs.
    const inProcessRequests = context.quick ? 20_000 : 100_000;
    const inProcess = {
      alone: eppInProcess(request, PODS, LOCAL_ZONE, inProcessRequests, false),
      shared: eppInProcess(request, PODS, LOCAL_ZONE, inProcessRequests, true),
    };
    context.log(
      `in-process request path: ${inProcess.alone.microsPerRequest.toFixed(1)} µs/request (${inProcess.shared.microsPerRequest.toFixed(1)} with the shared-state outbox)`,
    );
    const outcomesBefore = await eppOutcomes(epp.metricsPort);
    const servedBefore = await eppCounter(epp.metricsPort, 'spillway_served_fallback_total');
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
      for (const server of order(repeat)) await measure(server, repeat, undefined, plan.saturationSeconds);
    }
    for (const rate of plan.rates) {
      for (let repeat = 0; repeat < plan.rateRepeats; repeat++) {
        for (const server of order(repeat)) await measure(server, repeat, rate, plan.rateSeconds);
      }
    }
    const outcomesAfter = await eppOutcomes(epp.metricsPort);
    const servedElsewhere = (await eppCounter(epp.metricsPort, 'spillway_served_fallback_total')) - servedBefore;
    const outcomeDelta = [...outcomesAfter].map(([k, v]) => [k, v - (outcomesBefore.get(k) ?? 0)] as const).filter(([, v]) => v > 0);
    const eppDone = runs.filter((r) => r.server === 'epp').reduce((n, r) => n + r.result.done, 0);

    const load = { before: loadBefore, after: loadavg()[0] as number };
    return report({
      plan,
      runs,
      version,
      request,
      listLength,
      primaries: primaries.size,
      outcomeDelta,
      eppDone,
      load,
      quiet: context.quiet.quiet,
      servedElsewhere,
      inProcess,
      mirrored: mirror.echoed(),
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
  request: { bytes: Buffer; messages: number; bodyBytes: number };
  listLength: number;
  primaries: number;
  outcomeDelta: (readonly [string, number])[];
  eppDone: number;
  /** 1-minute load average before and after the part. */
  load: { before: number; after: number };
  /** Whether the load average was below 1 when the part started (run.ts waited for it, up to a bound). */
  quiet: boolean;
  /** Requests the EPP counted as served by a fallback (the served endpoint was not its primary). */
  servedElsewhere: number;
  /** The EPP's own request path in-process (no transport), without and with the shared-state outbox. */
  inProcess: { alone: InProcess; shared: InProcess };
  /** State batches the mirror peer sent the EPP back over the whole part. */
  mirrored: number;
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
  // Per repeat: the EPP's run against the bare run of the same repeat (adjacent in time).
  const pairRatios = sat('epp').map(
    (r) => r.result.requestsPerSecond / (sat('bare').find((b) => b.repeat === r.repeat)?.result.requestsPerSecond ?? Number.NaN),
  );
  const bareCpu = median(sat('bare').map((r) => r.result.serverCpuMicrosPerRequest));
  const eppCpu = median(sat('epp').map((r) => r.result.serverCpuMicrosPerRequest));
  const cpuRatio = eppCpu / bareCpu;
  const beforeRuns = sat('before');
  const beforeLine =
    beforeRuns.length === 0
      ? ''
      : `\n\nBefore → after (\`SPILLWAY_BENCH_EPP_BEFORE=${BEFORE ?? ''}\`, a second, older spillway-epp in the same rotation): CPU per request ${median(beforeRuns.map((r) => r.result.serverCpuMicrosPerRequest)).toFixed(0)} → ${eppCpu.toFixed(0)} µs, saturation ${median(beforeRuns.map((r) => r.result.requestsPerSecond)).toFixed(0)} → ${eppRps.toFixed(0)} req/s.`;

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
  let atTarget: { bareP99: number; eppP99: number; eppKept: boolean; bareKept: boolean; bareCpu: number; eppCpu: number } | undefined;
  for (const rate of plan.rates) {
    const at = (server: ServerName) => runs.filter((r) => r.rate === rate && r.server === server);
    const stats = { bare: pooled(at('bare')), epp: pooled(at('epp')), before: pooled(at('before')) };
    const cpu = {
      bare: median(at('bare').map((r) => r.result.serverCpuMicrosPerRequest)),
      epp: median(at('epp').map((r) => r.result.serverCpuMicrosPerRequest)),
      before: median(at('before').map((r) => r.result.serverCpuMicrosPerRequest)),
    };
    for (const server of ['bare', 'epp', 'before'] as const) {
      if (at(server).length === 0) continue;
      const s = stats[server];
      rateRows.push([
        rate,
        LABEL[server],
        s.rate.toFixed(0),
        ms(s.p50),
        ms(s.p99),
        ms(s.p999),
        at(server)
          .map((r) => ms(r.result.p99))
          .join(', '),
        cpu[server].toFixed(0),
      ]);
    }
    const added = { p50: stats.epp.p50 - stats.bare.p50, p99: stats.epp.p99 - stats.bare.p99, p999: stats.epp.p999 - stats.bare.p999 };
    const eppKept = stats.epp.rate >= 0.95 * rate;
    const bareKept = stats.bare.rate >= 0.95 * rate;
    if (rate === TARGET_RATE)
      atTarget = { bareP99: stats.bare.p99, eppP99: stats.epp.p99, eppKept, bareKept, bareCpu: cpu.bare, eppCpu: cpu.epp };
    const kept =
      eppKept && bareKept ? 'yes' : `no (${[eppKept ? '' : 'spillway-epp', bareKept ? '' : 'bare'].filter(Boolean).join(', ')} short)`;
    addedRows.push([rate, ms(added.p50), ms(added.p99), ms(added.p999), (stats.epp.p99 / stats.bare.p99).toFixed(2), kept]);
  }

  // A verdict needs a quiet machine (load average under 1); on a busy one it is given, marked provisional.
  const provisional = input.quiet ? '' : ' (provisional: the machine was not quiet, see above)';
  const p99Ratio = atTarget === undefined ? Number.NaN : atTarget.eppP99 / atTarget.bareP99;
  const p99Line =
    atTarget === undefined
      ? `- p99 at ${TARGET_RATE} req/s ≤ ${TARGET_P99_RATIO}× the bare server's: not measured in this run.`
      : !atTarget.eppKept
        ? `- p99 at ${TARGET_RATE} req/s ≤ ${TARGET_P99_RATIO}× the bare server's: spillway-epp did not sustain ${TARGET_RATE} req/s in this run (p99 of what was sent ${ms(atTarget.eppP99)} ms against ${ms(atTarget.bareP99)} ms) — ${verdict(false)}${provisional}.`
        : !atTarget.bareKept
          ? `- p99 at ${TARGET_RATE} req/s ≤ ${TARGET_P99_RATIO}× the bare server's: not shown — the bare baseline did not sustain ${TARGET_RATE} req/s in this run, so the ratio (${ratioText(p99Ratio)}) compares unequal loads — ${verdict(false)} (not demonstrated)${provisional}.`
          : `- p99 at ${TARGET_RATE} req/s ≤ ${TARGET_P99_RATIO}× the bare server's: ${ms(atTarget.eppP99)} ms against ${ms(atTarget.bareP99)} ms, **${ratioText(p99Ratio)}** — ${verdict(p99Ratio <= TARGET_P99_RATIO)}${provisional}.`;
  const saturationSpec = {
    clients: CLIENTS,
    streamsPerClient: STREAMS,
    seconds: plan.saturationSeconds,
    warmupSeconds: plan.warmupSeconds,
  };
  const rateSpec = { ...saturationSpec, seconds: plan.rateSeconds, rate: TARGET_RATE };
  const outcomes = input.outcomeDelta.map(([k, v]) => `${k}: ${v}`).join(', ') || 'none';
  const spread = (values: number[], digits = 2): string => `${Math.min(...values).toFixed(digits)}–${Math.max(...values).toFixed(digits)}`;
  const busy = input.quiet
    ? `The machine was quiet when the part started (1-minute load average ${input.load.before.toFixed(2)}, ${input.load.after.toFixed(2)} after); the load generator, nats-server and both servers still share its ${cpus().length} cores with each other.`
    : `**The machine was not quiet** (1-minute load average ${input.load.before.toFixed(1)} before this part, ${input.load.after.toFixed(1)} after, on ${cpus().length} cores shared by the load generator, nats-server, both servers and other work): the throughput and latency figures are pessimistic and noisy, and a starved baseline flatters the throughput ratio. The CPU per request, from /proc, depends least on how the cores were shared; every verdict below is provisional until a run on a quiet machine.`;

  return [
    '## ext_proc: spillway-epp against a bare grpc-js server (h2load)',
    '',
    `Load generator: ${input.version}, one thread. One request = one HTTP/2 POST to \`/envoy.service.ext_proc.v3.ExternalProcessor/Process\` (\`content-type: application/grpc\`, \`te: trailers\`) whose body is ${input.request.messages} pre-encoded ext_proc messages, each behind gRPC's 5-byte prefix (${input.request.bytes.length} bytes): what Envoy sends for one request in the shipped config's mode (\`infra/envoy\`: request headers SEND, request body FULL_DUPLEX_STREAMED, response headers SEND, response body NONE; \`envoy.lb\` and \`envoy.lb.subset_hint\` forwarded). That is request_headers (protocol_config, \`:path /v1/completions\`, content-type, a subset hint of ${SUBSET} local endpoints in \`metadata_context.filter_metadata["envoy.lb.subset_hint"]\`), one request_body with a ${input.request.bodyBytes}-byte JSON completions body and end_of_stream (the hint again: Envoy forwards the namespaces on every message), then response_headers (\`:status 200\`) with the served endpoint and the destination list in \`filter_metadata["envoy.lb"]\`. The request half-closes after the last message; each server answers with the headers response carrying the destination, the body echoed as streamed_response and a continue for the response headers, then ends the stream.`,
    '',
    `- **spillway-epp**: the built binary (\`services/epp/bin/spillway-epp.js --log-level warn\`, zone ${LOCAL_ZONE}, defaults otherwise: strict subset, up to 3 endpoints per list, sharing picks with peer EPPs over NATS, and a peer as busy as itself: every state batch it publishes comes back to it as another EPP's, with the same entries (${input.mirrored} batches over the part, \`test/bench/extproc/processes.ts\` \`mirrorPeer\`); flow control off, since a held request cannot take the pre-encoded response headers that follow its body here, as they never do behind Envoy — holding is the \`flow\` part's) following a private nats-server. The pool is ${PODS} pods over ${ZONES.length} zones; the bench publishes their readiness and refreshes every pod's metrics every ${REFRESH_MS} ms, so the view stays fresh and every pick scores real candidates. The served endpoint on the response headers is the primary the EPP chose for the first request (Envoy's usual case); ${input.servedElsewhere} measured requests were counted as served by a fallback.`,
    `- **bare grpc-js server** (\`test/bench/extproc/bare-server.ts\`): the same \`extProcService\` (codec) and server options, a fixed destination and the same response messages (\`routedResponses\`, \`responseHeadersResponse\`), nothing else: the minimum valid exchange, the transport's own limit.`,
    `- Checked before measuring, by sending the same bytes over node:http2 and decoding the answers: both servers return grpc-status 0, a destination header in the first response, the whole body echoed and one response_headers reply. ${input.primaries} distinct primaries over 50 EPP answers, all inside the subset (every request carries the same prompt, so the prefix-cache scorer keeps choosing the same endpoint); median list length ${input.listLength}. h2load sees only HTTP statuses (gRPC errors travel in trailers), so the EPP's own \`spillway_requests_total\` was also read before and after the runs: ${outcomes} (h2load completed ${input.eppDone} EPP requests in the measured windows; the rest were warm-up).`,
    `- Servers alternate over repeats (bare, EPP, EPP, bare, …) so drift hits both. Percentiles come from h2load's \`--log-file\` (per-request time to end of response), pooled over the repeats; \`CPU µs/req\` is the server process's user+system time over the measured window divided by requests done (from /proc).`,
    `- ${busy}`,
    '',
    `### Saturation (${CLIENTS} connections × ${STREAMS} streams, ${plan.saturationSeconds} s after ${plan.warmupSeconds} s warm-up)`,
    '',
    '```',
    displayCommand(saturationSpec),
    '```',
    '',
    markdownTable(['repeat', 'server', 'req/s', 'p50 ms', 'p99 ms', 'p99.9 ms', 'CPU µs/req'], saturationRows),
    '',
    `Median throughput: bare ${bareRps.toFixed(0)} req/s, spillway-epp ${eppRps.toFixed(0)} req/s: **ratio ${ratio.toFixed(2)}** (per-repeat ratios ${spread(pairRatios)}). Server CPU per request (median): bare ${bareCpu.toFixed(0)} µs, spillway-epp ${eppCpu.toFixed(0)} µs: **${ratioText(cpuRatio)}**, so with a core to itself the EPP would reach about ${(1 / cpuRatio).toFixed(2)} of the bare server's throughput. At saturation the latency is queueing behind ${CLIENTS * STREAMS} outstanding streams (Little's law), not service time.${beforeLine}`,
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
    'spillway-epp against the bare server (pooled percentiles; added = EPP − bare):',
    '',
    markdownTable(['req/s', 'added p50 ms', 'added p99 ms', 'added p99.9 ms', 'p99 EPP / bare', 'both kept the rate'], addedRows),
    '',
    '### Targets',
    '',
    `- Server CPU per request ≤ ${TARGET_CPU_RATIO}× the bare server's (saturation, medians): ${eppCpu.toFixed(0)} µs against ${bareCpu.toFixed(0)} µs, **${ratioText(cpuRatio)}**${atTarget === undefined ? '' : ` (at ${TARGET_RATE} req/s: ${atTarget.eppCpu.toFixed(0)} against ${atTarget.bareCpu.toFixed(0)} µs, ${ratioText(atTarget.eppCpu / atTarget.bareCpu)})`} — ${verdict(cpuRatio <= TARGET_CPU_RATIO)}${provisional}.`,
    `- Saturation throughput ≥ ${TARGET_SATURATION_RATIO}× the bare server's: ${eppRps.toFixed(0)} against ${bareRps.toFixed(0)} req/s, **${ratioText(ratio)}** (per repeat ${spread(pairRatios)}) — ${verdict(ratio >= TARGET_SATURATION_RATIO)}${provisional}.`,
    p99Line,
    '',
    "### Where the EPP's CPU per request goes",
    '',
    `The EPP's own request path, driven in-process with the same decoded messages and no transport (\`test/bench/extproc/in-process.ts\`: stream handler, body parse, pick, metrics, on a ${PODS}-pod view), costs **${input.inProcess.alone.microsPerRequest.toFixed(1)} µs per request** (${input.inProcess.shared.microsPerRequest.toFixed(1)} µs with the shared-state outbox filling; encoding and publishing its batches are not in that figure), against ${(eppCpu - bareCpu).toFixed(0)} µs between the two servers above. The rest of the difference is the EPP following its view (the event stream: every pod's metrics every ${REFRESH_MS} ms, ${((PODS * 1000) / REFRESH_MS).toFixed(0)} events/s, decoded, validated and applied whether requests come or not), publishing its picks to peer EPPs over NATS, and a process with more live state (a larger heap to collect). grpc-js, HTTP/2 and the protobuf codec are paid by both servers alike.`,
    '',
    REQUEST_PATH_NOTES,
  ].join('\n');
}

/**
 * What the request path's optimisations bought, measured while they were made on a
 * shared 2-core machine (load average 5–15): figures from one session each, before → after in the
 * same run. Static text: the part itself measures the current code only (see
 * SPILLWAY_BENCH_EPP_BEFORE for a before → after of two builds).
 */
const REQUEST_PATH_NOTES = [
  "### What the request path's optimisations bought",
  '',
  'Measured while they were made (shared machine, load average 5–15; CPU per operation from `process.cpuUsage`, each pair in one run):',
  '',
  markdownTable(
    ['change', 'before', 'after', 'per request'],
    [
      [
        'per-request histograms (pick time, list length, request size, duration) counted in a typed array, handed to prom-client on scrape (`services/epp/src/telemetry/pending-histogram.ts`)',
        'prom-client labelled observe 0.55–1.1 µs',
        '0.04–0.05 µs',
        '4 observations: about 2–4 µs',
      ],
      [
        '`metadata_context` Struct values decoded straight into plain values (`packages/protocol/src/decode.ts`; both servers use it)',
        'generated decoder, the 3 messages with a 16-entry hint each: 15.2–16.2 µs',
        '12.7–15.3 µs',
        'about 1–3 µs, for the bare server too',
      ],
      [
        'served endpoint equal to the primary taken without parsing (protocol, scheduler)',
        'two address parses, 0.3–0.5 µs each',
        'a string comparison',
        'about 0.6–1 µs',
      ],
      [
        'whole process, `SPILLWAY_BENCH_EPP_BEFORE` (the previous version as a second EPP in the same rotation, quick plan)',
        'saturation CPU 217 and 306 µs/request',
        '167 and 159 µs/request',
        'bare server 124 and 128 µs in the same run',
      ],
    ],
  ),
  '',
  "The JSON body is still parsed with `JSON.parse`, once: for the 1 KB completions body, UTF-8 check and decode plus `JSON.parse` cost 1.14–1.29 µs, a partial parser validating the bytes in JavaScript (as it must, since an invalid body is answered 400) 1.99–2.24 µs, and one that skipped string contents with native `indexOf` and a regular expression, validating less, 1.23–1.29 µs: no partial parser beats it, so none is used. The body forwarded is the client's own bytes unless the model is rewritten (unchanged).",
].join('\n');
