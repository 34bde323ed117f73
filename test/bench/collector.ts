import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  Collector,
  CollectorMetrics,
  createAgent,
  DEFAULT_SCRAPE_LIMITS,
  ENGINE_FAMILIES,
  getStreamedPlain,
  METRICS_BATCH_MS,
  NatsSink,
  parseExposition,
  parseKept,
  parseSampleLine,
  KeptParser,
  FamilyFilter,
  selectFamilies,
  type EndpointSpec,
} from '@spillway/collector';
import { natsOptionsFromFlags } from '@spillway/bus';
import { startNatsServer } from '@spillway/testkit';
import { pino } from 'pino';
import { markdownTable, percentile, type BenchContext, type BenchPart } from './part.js';

/**
 * Collector throughput: endpoints scraped per second and event lag (scrape start to the
 * event handed to NATS) for 100 and 500 endpoints at the default 100 ms sample interval, next to a
 * baseline measured in the same run: plain keep-alive undici GETs of the same endpoints on the same
 * schedule, without parsing, mapping, validating or publishing.
 *
 * Endpoints are lightweight node:http servers in one child process, each serving the same fixed
 * vLLM v0.10 exposition (services/collector/test/fixtures/vllm-v0.10.prom, 5.3 KB with histograms);
 * they are not simulators. Collector and servers share the machine's two cores.
 */
export const collector: BenchPart = {
  name: 'collector',
  title: 'Collector: endpoints scraped per second and scrape-to-publish lag',
  run,
};

const here = dirname(fileURLToPath(import.meta.url));
const FIXTURE = join(here, '..', '..', 'services', 'collector', 'test', 'fixtures', 'vllm-v0.10.prom');
const INTERVAL_MS = 100;
const TIMEOUT_MS = 1_000;

// One child process holds every endpoint, so serving does not share the collector's event loop.
const SERVERS = `
import { createServer } from 'node:http';
import { readFileSync } from 'node:fs';
const [count, file] = process.argv.slice(1);
const body = readFileSync(file);
const ports = [];
for (let i = 0; i < Number(count); i++) {
  const server = createServer((req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4', 'content-length': body.length });
    res.end(body);
  });
  server.keepAliveTimeout = 60_000;
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  ports.push(server.address().port);
}
process.stdout.write(JSON.stringify(ports) + '\\n');
`;

async function startServers(count: number): Promise<{ child: ChildProcess; addresses: string[] }> {
  const child = spawn(process.execPath, ['--input-type=module', '-e', SERVERS, String(count), FIXTURE], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const ports = await new Promise<number[]>((resolve, reject) => {
    let out = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes('\n')) resolve(JSON.parse(out) as number[]);
    });
    child.once('exit', (code) => reject(new Error(`endpoint servers exited ${code}`)));
  });
  return { child, addresses: ports.map((p) => `127.0.0.1:${p}`) };
}

interface Measured {
  perSecond: number;
  p50: number;
  p99: number;
  failures: number;
  cpuPercent: number;
  /** Process CPU per scrape, µs: the steadier comparison on a shared machine. */
  cpuPerScrape: number;
}

/** The collector's targets, at TARGET_ENDPOINTS endpoints: scrape rate ≥ this × the baseline's, lag p99 under TARGET_LAG_P99_MS. */
const TARGET_RATE_RATIO = 0.9;
const TARGET_LAG_P99_MS = 50;
const TARGET_ENDPOINTS = 500;

function summarise(lags: number[], seconds: number, failures: number, cpu: NodeJS.CpuUsage): Measured {
  lags.sort((a, b) => a - b);
  return {
    perSecond: lags.length / seconds,
    p50: percentile(lags, 50),
    p99: percentile(lags, 99),
    failures,
    cpuPercent: ((cpu.user + cpu.system) / 1e6 / seconds) * 100,
    cpuPerScrape: lags.length > 0 ? (cpu.user + cpu.system) / lags.length : Number.NaN,
  };
}

/**
 * One plain GET: undici's `request()` API, the body's chunks collected and read as text (what the
 * collector's own GET was before it moved to a dispatch handler; kept as `getStreamedPlain`).
 */
async function plainGet(agent: ReturnType<typeof createAgent>, address: string): Promise<string> {
  const chunks: Buffer[] = [];
  await getStreamedPlain(
    agent,
    { origin: `http://${address}`, path: '/metrics', timeoutMs: TIMEOUT_MS, maxBytes: DEFAULT_SCRAPE_LIMITS.maxBytes },
    (chunk) => chunks.push(chunk),
  );
  return Buffer.concat(chunks).toString('utf8');
}

/** Baseline: the same endpoints GETted on the same per-endpoint schedule, body read and dropped. */
async function baseline(addresses: string[], warmupMs: number, seconds: number): Promise<Measured> {
  const agent = createAgent();
  let lags: number[] = [];
  let failures = 0;
  const timers: NodeJS.Timeout[] = [];
  for (const address of addresses) {
    let busy = false;
    const tick = (): void => {
      if (busy) return;
      busy = true;
      const start = performance.now();
      plainGet(agent, address)
        .then(() => lags.push(performance.now() - start))
        .catch(() => failures++)
        .finally(() => (busy = false));
    };
    timers.push(setTimeout(() => timers.push(setInterval(tick, INTERVAL_MS)), Math.random() * INTERVAL_MS));
  }
  await new Promise((r) => setTimeout(r, warmupMs));
  lags = [];
  failures = 0;
  const cpu = process.cpuUsage();
  await new Promise((r) => setTimeout(r, seconds * 1000));
  const used = process.cpuUsage(cpu);
  const result = summarise(lags, seconds, failures, used);
  for (const t of timers) clearInterval(t);
  await agent.destroy();
  return result;
}

async function measureCollector(addresses: string[], natsUrl: string, warmupMs: number, seconds: number): Promise<Measured> {
  const logger = pino({ level: 'silent' });
  const sink = new NatsSink({ settings: natsOptionsFromFlags({ nats: natsUrl }, {}), stream: 'SPILLWAY', logger });
  await sink.ready();
  const metrics = new CollectorMetrics();
  const agent = createAgent();
  let lags: number[] = [];
  const collector = new Collector({
    pool: 'bench',
    defaultEngine: undefined, // auto-detect, as a default deployment does
    sampleIntervalMs: INTERVAL_MS,
    scrapeTimeoutMs: TIMEOUT_MS,
    scrapeFailureThreshold: 3,
    scrapeBackoffMaxMs: 30_000,
    scrapeLimits: DEFAULT_SCRAPE_LIMITS,
    ratesWindowMs: 2_000,
    metricsPath: '/metrics',
    probe: { intervalMs: 0, timeoutMs: 500, path: '/health', successThreshold: 1, failureThreshold: 2 },
    readinessRepublishMs: 30_000,
    sink,
    dispatcher: agent,
    logger,
    metrics,
    // The sink may hold a sample up to its batch window before the NATS client has it: counted in full.
    onMetricsPublished: (_event, lagMs) => lags.push(lagMs + sink.metricsBatchMs),
  });
  collector.start();
  const endpoints: EndpointSpec[] = addresses.map((address, i) => ({
    pod: `vllm-${i}`,
    address,
    zone: 'zone-a',
    region: undefined,
    engine: undefined,
    labels: undefined,
    sourceReady: true,
  }));
  collector.setEndpoints('bench', endpoints);
  await new Promise((r) => setTimeout(r, warmupMs));
  lags = [];
  const failuresBefore = (await metrics.scrapeFailures.get()).values.reduce((s, v) => s + v.value, 0);
  const cpu = process.cpuUsage();
  await new Promise((r) => setTimeout(r, seconds * 1000));
  const used = process.cpuUsage(cpu);
  const failures = (await metrics.scrapeFailures.get()).values.reduce((s, v) => s + v.value, 0) - failuresBefore;
  const result = summarise(lags, seconds, failures, used);
  await collector.stop();
  await agent.destroy();
  await sink.close();
  return result;
}

/**
 * The read of one exposition alone, before and after in the same run, µs per scrape (median of
 * rounds, alternating): the kept lines of the fixture parsed by the general parser
 * (`parseExposition`: parse-prometheus-text-format plus its checks) and by `parseKept`; and the
 * whole text read as a scrape reads it — as before, filtered to a text and then parsed by
 * `parseKept` with the general line parser (today's filter, though); now, each kept line parsed as
 * the filter finds it, plain lines by the fast line reader (FamilyFilter into KeptParser).
 */
function parseStep(rounds: number): { general: number; fast: number; filterThenParse: number; streamed: number } {
  const text = readFileSync(FIXTURE, 'utf8');
  const kept = selectFamilies(text, ENGINE_FAMILIES.vllm);
  const per = (work: () => unknown): number => {
    const started = process.hrtime.bigint();
    for (let i = 0; i < 200; i++) work();
    return Number(process.hrtime.bigint() - started) / 200 / 1000;
  };
  const runs = {
    general: () => parseExposition(kept),
    fast: () => parseKept(kept),
    filterThenParse: () => parseKept(selectFamilies(text, ENGINE_FAMILIES.vllm), parseSampleLine),
    streamed: () => {
      const parser = new KeptParser();
      const filter = new FamilyFilter(ENGINE_FAMILIES.vllm, DEFAULT_SCRAPE_LIMITS, parser);
      filter.push(text);
      filter.finish();
      return parser.finish();
    },
  };
  const times = { general: [] as number[], fast: [] as number[], filterThenParse: [] as number[], streamed: [] as number[] };
  for (let r = 0; r < rounds; r++) for (const key of Object.keys(runs) as (keyof typeof runs)[]) times[key].push(per(runs[key]));
  const median = (values: number[]): number => values.sort((a, b) => a - b)[Math.floor(values.length / 2)] as number;
  return {
    general: median(times.general),
    fast: median(times.fast),
    filterThenParse: median(times.filterThenParse),
    streamed: median(times.streamed),
  };
}

async function run(context: BenchContext): Promise<string> {
  const seconds = context.quick ? 3 : 10;
  const warmupMs = context.quick ? 1_000 : 2_000;
  const nats = await startNatsServer({ forcePrivate: true });
  const rows: (string | number)[][] = [];
  const verdicts: string[] = [];
  try {
    for (const count of [100, 500]) {
      const { child, addresses } = await startServers(count);
      try {
        context.log(`${count} endpoints: baseline (plain GETs)`);
        const base = await baseline(addresses, warmupMs, seconds);
        context.log(`${count} endpoints: collector`);
        const coll = await measureCollector(addresses, nats.url, warmupMs, seconds);
        const target = (count * 1000) / INTERVAL_MS;
        const fmt = (n: number) => n.toFixed(1);
        rows.push([
          count,
          target,
          'baseline: undici request() GET, body read',
          Math.round(base.perSecond),
          fmt(base.p50),
          fmt(base.p99),
          base.failures,
          Math.round(base.cpuPercent),
          Math.round(base.cpuPerScrape),
        ]);
        rows.push([
          count,
          target,
          'spillway-collector (parse, map, validate, publish)',
          Math.round(coll.perSecond),
          fmt(coll.p50),
          fmt(coll.p99),
          coll.failures,
          Math.round(coll.cpuPercent),
          Math.round(coll.cpuPerScrape),
        ]);
        if (count === TARGET_ENDPOINTS) {
          const ratio = coll.perSecond / base.perSecond;
          const verdict = (met: boolean): string => (met ? '**MET**' : '**NOT MET**');
          verdicts.push(
            `- Scrape rate ≥ ${TARGET_RATE_RATIO}× the plain-GET baseline's: ${Math.round(coll.perSecond)} /s against ${Math.round(base.perSecond)} /s = ${ratio.toFixed(2)}× — ${verdict(ratio >= TARGET_RATE_RATIO)}` +
              ` (CPU per scrape ${Math.round(coll.cpuPerScrape)} µs against ${Math.round(base.cpuPerScrape)} µs for a plain GET: ${(coll.cpuPerScrape / base.cpuPerScrape).toFixed(2)}×).`,
            `- Lag p99 < ${TARGET_LAG_P99_MS} ms: ${fmt(coll.p99)} ms — ${verdict(coll.p99 < TARGET_LAG_P99_MS)}.`,
          );
        }
      } finally {
        child.kill('SIGKILL');
      }
    }
  } finally {
    await nats.stop();
  }
  const size = readFileSync(FIXTURE).length;
  const parse = parseStep(context.quick ? 5 : 21);
  context.log(
    `parse step: general ${parse.general.toFixed(1)} µs, parseKept ${parse.fast.toFixed(1)} µs; read: filter then parse ${parse.filterThenParse.toFixed(1)} µs, streamed ${parse.streamed.toFixed(1)} µs`,
  );
  const provisional = context.quiet.quiet ? '' : ' The machine was not quiet when this part ran (see below): the figures are provisional.';
  return [
    '## Collector: endpoints scraped per second and scrape-to-publish lag',
    '',
    `Each endpoint is scraped every ${INTERVAL_MS} ms (the default; target = endpoints × 10 per second) with a ${TIMEOUT_MS} ms timeout over keep-alive undici connections.`,
    `Endpoints are lightweight \`node:http\` servers in one child process, each serving the same fixed vLLM v0.10 exposition (${size} bytes, with histograms), not simulators.`,
    "The collector starts its scrapes from one scheduler that spreads them evenly over the interval, GETs through undici's dispatch handler, detects the engine, keeps only the mapped families and parses each kept line as it is found (`parseKept`'s reading of `parse-prometheus-text-format`, plain lines by native searches, tested equal to it), maps the sample, checks the event with the schema's compiled accept-check (tested equal to zod) and core-publishes it to a private nats-server.",
    `Lag is from the start of the scrape (timer fired) to the event handed to the NATS client, the sink's batch window (${METRICS_BATCH_MS} ms, samples share a socket write) counted in full; the baseline lag is the plain GET (request start to body read).`,
    "CPU is the collector process's user+system time as a percentage of one core, and per scrape; the servers and nats-server run in other processes on the same two cores.",
    '',
    markdownTable(
      ['endpoints', 'target /s', 'scraper', 'scraped /s', 'lag p50 ms', 'lag p99 ms', 'failures', 'CPU % (1 core)', 'CPU µs/scrape'],
      rows,
    ),
    '',
    `Parse step alone (the fixture's ${ENGINE_FAMILIES.vllm.size} vLLM families kept, same run): the general parser ${parse.general.toFixed(1)} µs, \`parseKept\` ${parse.fast.toFixed(1)} µs per scrape. The whole exposition read as a scrape reads it: filtered to a text, then \`parseKept\` with the general line parser (as before) ${parse.filterThenParse.toFixed(1)} µs; each kept line parsed as the filter finds it, plain lines by native searches (now) ${parse.streamed.toFixed(1)} µs.`,
    '',
    `Targets at ${TARGET_ENDPOINTS} endpoints × 10 samples/s.${provisional}`,
    '',
    ...verdicts,
  ].join('\n');
}
