import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { decodeEvent } from '@spillway/events';
import { eventually, freePort, startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startHostileServers, type HostileServers } from './helpers/hostile-servers.js';
import { spawnCollector, spawnSim, type Child, type SimChild } from './helpers/processes.js';

/** User + system CPU seconds of a process so far (Linux /proc; clock ticks of 1/100 s). */
function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

/**
 * Hostile model servers (docs/hardening.md) must not degrade the collector for every pod. Real
 * processes: the `spillway-collector` binary scrapes a `spillway-sim` next to three misbehaving
 * servers (50 MB and 15 MB expositions, one that trickles forever) and publishes to a private
 * nats-server. Before the fix, the collector buffered up to 16 MB per target and retried them
 * every second: over 1 GB RSS, seconds of event-loop lag and a healthy pod gone stale.
 */
describe('spillway-collector next to hostile model servers', () => {
  let nats: NatsServerHandle;
  let nc: NatsConnection;
  let sim: SimChild;
  let hostile: HostileServers;
  let collector: Child;
  let metricsPort: number;
  /** Healthy pod's samples: arrival time and the event's observedAt (scrape start). */
  const samples: { at: number; observedAt: number }[] = [];
  const rss: number[] = [];

  beforeAll(async () => {
    nats = await startNatsServer({ forcePrivate: true });
    nc = await connect({ servers: nats.url });
    const sub = nc.subscribe('spillway.v1.llama.zone-a.healthy.metrics');
    void (async () => {
      for await (const msg of sub) {
        const decoded = decodeEvent(msg.data, msg.subject);
        if (decoded.ok) samples.push({ at: Date.now(), observedAt: decoded.event.observedAt });
      }
    })();
    [sim, hostile] = await Promise.all([spawnSim(['--model', 'm']), startHostileServers()]);
    const file = join(mkdtempSync(join(tmpdir(), 'spillway-hostile-')), 'endpoints.yaml');
    writeFileSync(
      file,
      [
        `- { pod: healthy, address: "${sim.address}", engine: vllm }`,
        `- { pod: huge, address: "${hostile.addresses.huge}", engine: vllm }`,
        `- { pod: large, address: "${hostile.addresses.large}", engine: vllm }`,
        `- { pod: trickle, address: "${hostile.addresses.trickle}", engine: vllm }`,
      ].join('\n'),
    );
    metricsPort = await freePort();
    // Default sample interval (100 ms), scrape timeout (500 ms) and probe interval (1 s).
    collector = spawnCollector([
      '--pool',
      'llama',
      '--zone',
      'zone-a',
      '--endpoints',
      file,
      '--nats',
      nats.url,
      '--metrics-port',
      String(metricsPort),
      '--metrics-host',
      '127.0.0.1',
      '--log-level',
      'warn',
    ]);
  });

  afterAll(async () => {
    await collector?.kill('SIGKILL');
    await Promise.all([sim?.kill('SIGKILL'), hostile?.close()]);
    await nc?.close();
    await nats?.stop();
  });

  it(
    'keeps publishing the healthy pod at its interval, in bounded memory, and backs the hostile ones off',
    { timeout: 90_000 },
    async () => {
      await eventually(() => expect(samples.length).toBeGreaterThan(0), 20_000);
      const pid = collector.proc.pid!;
      const sampler = setInterval(() => {
        const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
        if (match) rss.push(Number(match[1]) * 1024);
      }, 100);
      const from = samples.length;
      const start = Date.now();
      const cpuBefore = cpuSeconds(pid);
      const seconds = 12;
      await new Promise((r) => setTimeout(r, seconds * 1000));
      clearInterval(sampler);
      const cpuPercent = ((cpuSeconds(pid) - cpuBefore) / seconds) * 100;
      const window = samples.slice(from);

      const ages = window.map((s) => s.at - s.observedAt).sort((a, b) => a - b);
      // Gaps between scrape starts: the collector's own rhythm, whatever delays the test process.
      const gaps = window.slice(1).map((s, i) => s.observedAt - window[i]!.observedAt);
      const pct = (values: number[], p: number): number =>
        values[Math.min(values.length - 1, Math.floor((p / 100) * values.length))] ?? NaN;
      const maxRss = Math.max(...rss);
      const attempts = await hostile.attempts();
      const inWindow = (times: number[]): number[] => times.filter((t) => t >= start);
      const report = {
        healthySamples: window.length,
        expected: seconds * 10,
        ageMs: { p50: pct(ages, 50), p99: pct(ages, 99), max: ages.at(-1) },
        maxGapMs: Math.max(...gaps),
        maxRssMB: Math.round(maxRss / 2 ** 20),
        cpuPercentOfOneCore: Math.round(cpuPercent),
        hostileAttempts: {
          huge: inWindow(attempts.huge).length,
          large: inWindow(attempts.large).length,
          trickle: inWindow(attempts.trickle).length,
        },
      };
      console.log(`hostile-servers figures: ${JSON.stringify(report)}`);

      // The healthy pod keeps its rhythm: most samples arrive, none is missing long enough to go
      // stale at the EPP (1 s), and a typical sample is fresh when it lands on NATS.
      expect(window.length).toBeGreaterThan(report.expected * 0.5);
      expect(report.maxGapMs).toBeLessThan(1_000);
      expect(report.ageMs.p50).toBeLessThan(200);
      // Memory stays bounded: no exposition is buffered whole (Node's own baseline is ~60-90 MB).
      expect(maxRss).toBeLessThan(250 * 2 ** 20);
      // CPU time, robust to a busy machine: reading 15 MB ten times a second took a whole core.
      expect(cpuPercent).toBeLessThan(50);
      // The hostile servers are backed off exponentially: over 12 s, at most a handful of attempts
      // each, at growing intervals (the previous code retried them every second).
      for (const name of ['huge', 'large'] as const) {
        const times = inWindow(attempts[name]);
        expect(times.length).toBeLessThanOrEqual(6);
        const all = attempts[name];
        const spacing = all.slice(1).map((t, i) => t - all[i]!);
        expect(spacing.at(-1)!).toBeGreaterThan(spacing[0]! * 2);
      }
      expect(report.hostileAttempts.trickle).toBeLessThanOrEqual(8);

      // Failures are counted by reason on the collector's own /metrics.
      const own = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
      const failures = (reason: string): number =>
        Number(new RegExp(`spillway_collector_scrape_failures_total\\{reason="${reason}"\\} (\\d+)`).exec(own)?.[1] ?? 0);
      expect(failures('too-large')).toBeGreaterThanOrEqual(4);
      expect(failures('timeout')).toBeGreaterThanOrEqual(3);
      expect(own).toMatch(/spillway_collector_endpoints\{state="scrape-failing"\} 3/);
    },
  );
});
