/**
 * `npm start`: the local three-zone demo. Starts NATS, simulated model servers, and per zone a
 * collector, an EPP (locality mode) and a development gateway, then drives streaming completions into
 * every zone's gateway while a scenario plays: balanced load, one zone overloaded, one zone's model
 * servers killed, recovery. Prints a per-zone table every second and a summary at the end.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { CliError, parseCommandLine, renderHelp } from '@spillway/cli';
import { PRESETS } from '@spillway/engine';
import { INSTALL_HINT, natsServerAvailable } from '@spillway/proc';
import {
  emptyWindow,
  formatPrefixCache,
  formatSummary,
  formatTick,
  mergeWindows,
  prefixCacheDelta,
  prefixCacheFromMetrics,
  record,
  tickHeader,
  zonePodsFromMetrics,
  type PrefixCacheTotals,
  type Style,
  type ZonePods,
  type ZoneWindow,
} from './report.js';
import { MIN_DURATION_S, phaseAt, planScenario, serverCapacity, type Phase, type PhaseAction } from './scenario.js';
import { LocalSystem, MODEL, zoneSpecsOf, type ZoneSpec } from './system.js';
import { loadTopology } from '../topology.js';
import { TrafficDriver, type Outcome } from './traffic.js';

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));

/** The zones, regions and model servers of infra/topology.yaml, as the manifests deploy them. */
const ZONES: ZoneSpec[] = zoneSpecsOf(loadTopology());
if (ZONES.length < 2) throw new Error('infra/topology.yaml: the demo needs at least two zones (one overloads, one goes down)');
const OVERLOAD_ZONE = ZONES[0]!.zone;
const DOWN_ZONE = ZONES[1]!.zone;
const OVERLOAD_FACTOR = 1.75;

/**
 * Simulator calibration: real-time latencies of a 70B model on 4 H100s, but batches of 2 and short
 * completions, so a zone's capacity is ~6-9 req/s and every request is a handful of SSE chunks. The
 * whole demo peaks around 20 req/s: on two shared cores the model servers, not the request path
 * (gateway, EPP, driver), must be what saturates, or nothing would spill.
 */
const PRESET = 'llama-70b-tp4-h100' as const;
const MAX_NUM_SEQS = 2;
const MAX_WAITING = 16;
const MAX_TOKENS = 6;
const PROMPT_TOKENS = 15; // the driver's prompts are ~60 characters, 4 characters a token
// The demo's overload rates come from the closed-form capacity estimate (serverCapacity), so its servers run that mode.
const SIM_ARGS = [
  '--preset',
  PRESET,
  '--engine-mode',
  'closed-form',
  '--max-num-seqs',
  String(MAX_NUM_SEQS),
  '--max-waiting',
  String(MAX_WAITING),
];
const MAX_IN_FLIGHT_PER_ZONE = 40;
/** --shared-prefixes: customers, each with a context every one of its prompts starts with. */
const SHARED_CONTEXTS = 12;
const CONTEXT_TOKENS = 240;
const CONTEXT_WORDS = 'river reservoir spillway crest chute gate basin flood inflow outflow weir dam culvert storm design freeboard'.split(
  ' ',
);
/** Customer c's context: ~CONTEXT_TOKENS tokens of words drawn from a fixed sequence, distinct per customer. */
function sharedContext(c: number): string {
  const words: string[] = [`Customer ${c} operating manual.`];
  let s = 7919 * (c + 1);
  for (let i = 0; i < CONTEXT_TOKENS - 8; i++) {
    s = (s * 16807) % 2147483647;
    words.push(CONTEXT_WORDS[s % CONTEXT_WORDS.length]!);
  }
  return `${words.join(' ')}.\n`;
}
const CONTEXTS = Array.from({ length: SHARED_CONTEXTS }, (_, c) => sharedContext(c));
const TOKENIZER = 'qwen3';
/**
 * The EPP's queue threshold (default 5 waiting requests) scaled to batches of 2: a server with 2
 * waiting behind 2 running is as full as a 256-sequence vLLM with a queue of 5 is not, so the zone
 * spills before its queues add seconds to the time to first token.
 */
const EPP_CONFIG = { queueThreshold: 2 };

const FLAGS = {
  duration: {
    description: `seconds of traffic; the scenario's phases are scaled to fit, then the demo stops (min ${MIN_DURATION_S}; default: play the scenario, then balanced load until Ctrl-C)`,
    schema: z.coerce.number().int().min(MIN_DURATION_S).max(86_400).optional(),
    placeholder: 'N',
  },
  natsTopology: {
    description: 'single: one nats-server; zones: a JetStream domain per zone joined to a hub by leaf nodes (default single)',
    schema: z.enum(['single', 'zones']).default('single'),
    placeholder: 'single|zones',
  },
  natsUrl: {
    description: 'use this NATS server (JetStream enabled) instead of starting one; single topology only (also NATS_URL)',
    schema: z.string().min(1).optional(),
    placeholder: 'URL',
  },
  rate: {
    description: "base requests per second sent to each zone's gateway (default 2.5)",
    schema: z.coerce.number().positive().max(50).default(2.5),
    placeholder: 'R',
  },
  kvEvents: {
    description:
      'precise prefix-cache routing: the model servers publish their KV-cache events (ZeroMQ), the collectors relay them over NATS, the EPPs tokenize prompts (Qwen3) and route by them; implies --shared-prefixes',
    schema: z.boolean().default(false),
    boolean: true,
  },
  sharedPrefixes: {
    description: `every prompt starts with one of ${SHARED_CONTEXTS} customers' shared contexts (~${CONTEXT_TOKENS} tokens), so routing by prefix matters; compare a run with --kv-events against one without`,
    schema: z.boolean().default(false),
    boolean: true,
  },
  dir: {
    description: 'where logs and generated files go (default .data/demo/<timestamp>)',
    schema: z.string().min(1).optional(),
    placeholder: 'DIR',
  },
};

const SUMMARY =
  `Spillway local demo: the zones of infra/topology.yaml (${ZONES.map((z) => `${z.zone} in region ${z.region}`).join(', ')}) on loopback,\n` +
  'each with simulated model servers, a collector, an EPP (locality mode) and a development gateway. A driver\n' +
  'sends streaming completions to every gateway while a scenario plays: balanced -> overload\n' +
  `(${OVERLOAD_ZONE} past its capacity) -> zone-down (${DOWN_ZONE}'s servers killed) -> recovery. Ctrl-C stops everything.`;

function out(line = ''): void {
  process.stdout.write(`${line}\n`);
}

async function main(): Promise<number> {
  let parsed;
  try {
    parsed = parseCommandLine(FLAGS, process.argv.slice(2), process.env);
  } catch (error) {
    if (error instanceof CliError) {
      process.stderr.write(`error: ${error.message}\n\n${renderHelp('npm start --', SUMMARY, FLAGS)}`);
      return 2;
    }
    throw error;
  }
  if (parsed.help) {
    out(renderHelp('npm start --', SUMMARY, FLAGS));
    return 0;
  }
  const flags = parsed.values;
  const natsUrl = flags.natsUrl ?? (flags.natsTopology === 'single' ? process.env['NATS_URL'] || undefined : undefined);
  if (flags.natsUrl && flags.natsTopology === 'zones') {
    process.stderr.write('error: --nats-url works with --nats-topology single only (the zones topology starts its own servers)\n');
    return 2;
  }
  if (!natsUrl && !natsServerAvailable()) {
    process.stderr.write(`error: ${INSTALL_HINT}\n`);
    return 1;
  }

  const style: Style = { color: process.stdout.isTTY === true && !process.env['NO_COLOR'] };
  const dir = resolve(flags.dir ?? join(ROOT, '.data', 'demo', new Date().toISOString().replace(/[:.]/g, '-')));
  mkdirSync(dir, { recursive: true });

  // Ctrl-C / SIGTERM: abort the start, or end the scenario early; a second one exits at once.
  const abort = new AbortController();
  let signals = 0;
  const onSignal = (signal: NodeJS.Signals) => {
    signals++;
    if (signals === 1) {
      out(`\n${signal}: stopping...`);
      abort.abort(new Error(`interrupted (${signal})`));
    } else {
      process.stderr.write(`${signal} again: exiting without waiting (check \`pgrep -f spillway-\`)\n`);
      process.exit(130);
    }
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  const sharedPrefixes = flags.sharedPrefixes || flags.kvEvents;
  // Uncached prompts bound the capacity: prefix hits only add headroom.
  const promptTokens = sharedPrefixes ? PROMPT_TOKENS + CONTEXT_TOKENS : PROMPT_TOKENS;
  const capacity = Object.fromEntries(
    ZONES.map((z) => [z.zone, z.servers * serverCapacity({ ...PRESETS[PRESET], maxNumSeqs: MAX_NUM_SEQS }, promptTokens, MAX_TOKENS)]),
  );
  const phases = planScenario({
    zones: ZONES.map((z) => z.zone),
    baseRate: flags.rate,
    capacity,
    overloadZone: OVERLOAD_ZONE,
    overloadFactor: OVERLOAD_FACTOR,
    downZone: DOWN_ZONE,
    ...(flags.duration !== undefined && { durationMs: flags.duration * 1000 }),
  });

  const eppConfig = join(dir, 'epp-config.json');
  writeFileSync(eppConfig, `${JSON.stringify(EPP_CONFIG, null, 2)}\n`);

  out(`Spillway demo — logs in ${dir}`);
  let system: LocalSystem;
  try {
    system = await LocalSystem.start(
      {
        dir,
        zones: ZONES,
        natsTopology: flags.natsTopology,
        ...(natsUrl && { natsUrl }),
        simArgs: SIM_ARGS,
        eppArgs: ['--config', eppConfig],
        // The production loop: each zone's gateway takes its model servers and subset from the zone's spillway-xds.
        xds: true,
        ...(flags.kvEvents && { kvEvents: { tokenizer: TOKENIZER } }),
        logLevel: 'warn',
        signal: abort.signal,
      },
      (line) => out(`  ${line}`),
    );
  } catch (error) {
    if (abort.signal.aborted) {
      out('stopped before the system was up; every process started so far is stopped');
      return 0;
    }
    process.stderr.write(`error: the system did not start: ${(error as Error).message}\nlogs: ${join(dir, 'logs')}\n`);
    return 1;
  }

  const perServer = capacity[OVERLOAD_ZONE]! / ZONES.find((z) => z.zone === OVERLOAD_ZONE)!.servers;
  out('');
  out(`Model servers: spillway-sim --preset ${PRESET} --max-num-seqs ${MAX_NUM_SEQS} --max-waiting ${MAX_WAITING}`);
  out(`  (real-time latencies, small batches); requests stream ${MAX_TOKENS} tokens: ~${perServer.toFixed(1)} req/s per server.`);
  out(`EPPs: --subset-mode locality, queueThreshold ${EPP_CONFIG.queueThreshold} (default 5, scaled to the small batches).`);
  if (sharedPrefixes) out(`Prompts: each starts with one of ${SHARED_CONTEXTS} customers' contexts (~${CONTEXT_TOKENS} tokens).`);
  if (flags.kvEvents) {
    out(
      `KV events: every model server publishes them (spillway-sim --kv-events, --tokenizer ${TOKENIZER}); each collector relays its zone's`,
    );
    out(
      `  on spillway.kv.${'<pool>.<zone>.<pod>'} and snapshots them into the stream; the EPPs tokenize prompts (--tokenizer '*=${TOKENIZER}').`,
    );
  }
  out("Gateways: endpoints by EDS and subset hints by ECDS from each zone's spillway-xds (nodes it serves):");
  for (const z of ZONES) out(`  ${z.zone} xds: http://127.0.0.1:${system.zone(z.zone).xds?.ports.metrics}/debug/nodes`);
  out(`Live view of each zone's EPP (open in a browser; watch ${OVERLOAD_ZONE} spill in the overload phase):`);
  for (const z of ZONES) out(`  ${z.zone}: http://127.0.0.1:${system.zone(z.zone).eppPorts.metrics}/`);
  out('Zone capacity:');
  for (const z of ZONES) out(`  ${z.zone} (region ${z.region}): ${z.servers} servers, ~${Math.round(capacity[z.zone]!)} req/s`);
  out('Scenario:');
  for (const p of phases) {
    const span = Number.isFinite(p.endMs) ? `${fmtS(p.startMs)}-${fmtS(p.endMs)}` : `${fmtS(p.startMs)}-`;
    out(`  ${p.name.padEnd(10)} ${span.padEnd(9)} ${p.description}`);
  }
  out('Each second, per zone (by the gateway the requests were sent to):');
  out('  sat/rdy      saturated/ready model servers of the zone, as its own EPP sees them');
  out('  req/s        requests finished per second; p50ms/p99ms: time to first token');
  out('  in-zone      share served in the zone itself; spilled: served in another zone');
  out("  fallbk       requests the gateway needed more than one attempt for (it walked the EPP's list)");
  out(`  429/503/err  failed requests; shed: not sent, ${MAX_IN_FLIGHT_PER_ZONE} already in flight`);
  out(flags.duration === undefined ? 'Ctrl-C stops.' : `Stops after ${flags.duration} s of traffic (Ctrl-C stops earlier).`);

  let exitCode = 1;
  try {
    exitCode = await play(system, phases, style, abort.signal, { sharedPrefixes, kvEvents: flags.kvEvents });
  } finally {
    out('');
    out('stopping every process...');
    await system.stop();
    out('stopped.');
  }
  process.off('SIGINT', onSignal);
  process.off('SIGTERM', onSignal);
  return exitCode;
}

async function play(
  system: LocalSystem,
  phases: Phase[],
  style: Style,
  signal: AbortSignal,
  workload: { sharedPrefixes: boolean; kvEvents: boolean },
): Promise<number> {
  const zones = ZONES.map((z) => z.zone);
  const tick = new Map<string, ZoneWindow>(zones.map((z) => [z, emptyWindow()]));
  const byPhase = new Map<string, Map<string, ZoneWindow>>();
  const phaseWindow = (phase: string, zone: string) => {
    let m = byPhase.get(phase);
    if (!m) byPhase.set(phase, (m = new Map(zones.map((z) => [z, emptyWindow()]))));
    return m.get(zone)!;
  };
  const played = new Map<string, { startMs: number; endMs: number }>();
  const phaseName = (at: number) => phaseAt(phases, at)?.name ?? phases[phases.length - 1]!.name;

  const driver: TrafficDriver = new TrafficDriver({
    gateways: Object.fromEntries(zones.map((z) => [z, system.zone(z).gatewayUrl])),
    model: MODEL,
    maxTokens: MAX_TOKENS,
    ...(workload.sharedPrefixes && {
      prompt: (n: number, zone: string) => `${CONTEXTS[n % SHARED_CONTEXTS]}Request ${n} from ${zone}: summarise the manual.`,
    }),
    maxInFlight: MAX_IN_FLIGHT_PER_ZONE,
    timeoutMs: 30_000,
    onOutcome: (o: Outcome) => {
      const servedZone = o.served === undefined ? undefined : system.zoneOfAddress(o.served);
      const attributed = {
        status: o.status,
        attempts: o.attempts,
        ...(o.ttftMs !== undefined && { ttftMs: o.ttftMs }),
        ...(servedZone && { servedZone }),
        ...(o.broken && { broken: true }),
      };
      record(tick.get(o.zone)!, o.zone, attributed);
      record(phaseWindow(phaseName(o.startedAt), o.zone), o.zone, attributed);
    },
    onShed: (zone) => {
      tick.get(zone)!.shed++;
      phaseWindow(phaseName(driver.now()), zone).shed++;
    },
  });

  const pending = new Set<Promise<void>>();
  const act = (action: PhaseAction) => {
    const sims = system.simsOf(action.zone);
    const t0 = performance.now();
    let job: Promise<void>;
    if (action.kind === 'kill-servers') {
      out(`>> ${action.zone}: killing its ${sims.length} model servers (SIGKILL)`);
      job = Promise.all(sims.map((s) => s.process.kill())).then(() => undefined);
    } else {
      out(`>> ${action.zone}: restarting its ${sims.length} model servers`);
      job = Promise.all(sims.filter((s) => !s.process.running).map((s) => s.process.start())).then(() =>
        out(`>> ${action.zone}: model servers listening again after ${((performance.now() - t0) / 1000).toFixed(1)} s`),
      );
    }
    const tracked: Promise<void> = job
      .catch((error: unknown) => out(`>> ${action.zone}: ${action.kind} failed: ${(error as Error).message.split('\n')[0]}`))
      .finally(() => pending.delete(tracked));
    pending.add(tracked);
  };

  // Once interrupted, nothing more is counted: with Ctrl-C in a terminal the children get the
  // signal too and die under requests still in flight.
  signal.addEventListener('abort', () => driver.stop(), { once: true });
  out('');
  out('warming up (a few requests per zone, not counted)...');
  await driver.warmUp(6, 3, 3000);
  const prefixBefore = await prefixCacheOf(system);
  let current: Phase | undefined;
  const enter = (phase: Phase, now: number) => {
    if (current) played.get(current.name)!.endMs = now;
    current = phase;
    played.set(phase.name, { startMs: now, endMs: now });
    driver.setRates(phase.rates);
    out('');
    out(`${style.color ? '\x1b[1m' : ''}== ${phase.name}: ${phase.description}${style.color ? '\x1b[0m' : ''}`);
    for (const action of phase.actions) act(action);
    out(tickHeader(style));
  };
  driver.start();
  enter(phases[0]!, driver.now());
  const aborted = new Promise<void>((resolve) =>
    signal.aborted ? resolve() : signal.addEventListener('abort', () => resolve(), { once: true }),
  );
  const end = phases[phases.length - 1]!.endMs;
  let second = 0;
  let lastTick = driver.now();
  while (!signal.aborted) {
    // Phase boundaries are whole seconds of traffic time: wake at the next one (or the end).
    const target = Math.min(end, (second + 1) * 1000);
    await Promise.race([sleep(target - driver.now()), aborted]);
    if (signal.aborted) break;
    const at = driver.now();
    const windows = zones.map((zone) => ({ zone, window: tick.get(zone)! }));
    for (const zone of zones) tick.set(zone, emptyWindow());
    const pods = await Promise.all(zones.map((zone) => podsOf(system, zone)));
    const rows = windows.map((w, i) => ({ ...w, pods: pods[i] }));
    for (const line of formatTick(at / 1000, current!.name, rows, (at - lastTick) / 1000, style)) out(line);
    lastTick = at;
    second = Math.round(target / 1000);
    if (target >= end) break;
    const next = phaseAt(phases, target);
    if (next === undefined) break;
    if (next !== current) enter(next, at);
  }
  const trafficMs = driver.now();
  if (current) played.get(current.name)!.endMs = trafficMs;
  driver.stop();
  await Promise.all(pending);
  const prefix = prefixCacheDelta(prefixBefore, await prefixCacheOf(system));

  out('');
  out(`Summary (${fmtS(trafficMs)} of traffic; requests counted in the phase they were sent in):`);
  const rows = [...played.entries()].flatMap(([phase, span]) =>
    zones.map((zone) => ({
      phase,
      zone,
      window: byPhase.get(phase)?.get(zone) ?? emptyWindow(),
      seconds: (span.endMs - span.startMs) / 1000,
    })),
  );
  for (const line of formatSummary(rows, zones, style)) out(line);
  const total = rows.reduce((acc, r) => mergeWindows(acc, r.window), emptyWindow());
  out(
    `Total: ${total.finished} requests, ${total.ok} ok, ${total.spilled} served in another zone, ${total.fallbacks} needed a fallback, ` +
      `${total.s429} x 429, ${total.s503} x 503, ${total.errors} other errors, ${total.shed} shed.`,
  );
  out(formatPrefixCache(prefix, workload.kvEvents));
  return 0;
}

/** The zone's saturated/ready pods as its own EPP sees them; undefined if the EPP does not answer quickly. */
async function podsOf(system: LocalSystem, zone: string): Promise<ZonePods | undefined> {
  try {
    const response = await fetch(`http://127.0.0.1:${system.zone(zone).eppPorts.metrics}/metrics`, { signal: AbortSignal.timeout(400) });
    return response.ok ? zonePodsFromMetrics(await response.text(), zone) : undefined;
  } catch {
    return undefined;
  }
}

/** Every model server's prefix-cache counters, in `system.sims` order; undefined for one that does not answer (killed). */
async function prefixCacheOf(system: LocalSystem): Promise<(PrefixCacheTotals | undefined)[]> {
  return Promise.all(
    system.sims.map(async (sim) => {
      try {
        const response = await fetch(`http://${sim.address}/metrics`, { signal: AbortSignal.timeout(1000) });
        return response.ok ? prefixCacheFromMetrics(await response.text()) : undefined;
      } catch {
        return undefined;
      }
    }),
  );
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
}

function fmtS(ms: number): string {
  return `${Math.round(ms / 1000)}s`;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`fatal: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(1);
  },
);
