/**
 * One zone's publisher names N fake pods (docs/hardening.md: fake pods within one zone's rights): how long a restarting
 * EPP's replay takes, what the view costs in heap, and how long a pick without a subset takes.
 * A standalone measurement, not a bench part (it needs a quiet machine to mean much):
 *
 *   node --conditions=@spillway/source --import tsx test/bench/fake-pods.ts [N] [tombstones|live]
 *
 * Prints one JSON line per replay (two replays, the second with a warm process).
 */
import { jetstreamManager } from '@nats-io/jetstream';
import { connectNats, ensureStream, EventPublisher, startReader } from '@spillway/bus';
import { encodeEvent, subjectOf, type MetricsEvent, type ReadinessEvent } from '@spillway/events';
import { Fleet } from '@spillway/fleet';
import { Scheduler } from '@spillway/scheduler';
import { startNatsServer } from '@spillway/testkit';

const count = Number(process.argv[2] ?? 100_000);
const mode = process.argv[3] === 'live' ? 'live' : 'tombstones';

const nats = await startNatsServer({ forcePrivate: true });
const nc = await connectNats({ servers: [nats.url] });
try {
  const jsm = await jetstreamManager(nc);
  await ensureStream(jsm);
  const publisher = new EventPublisher(nc);
  const t = Date.now();
  for (let i = 0; i < count; i++) {
    const pod = `fake-${i}`;
    const readiness: ReadinessEvent = {
      v: 1,
      kind: 'readiness',
      pool: 'llama',
      zone: 'zone-a',
      pod,
      address: `10.9.${(i >> 8) & 255}.${i & 255}:8000`,
      ready: mode === 'live',
      deleted: mode === 'tombstones',
      observedAt: t,
    };
    const sample: MetricsEvent = {
      v: 1,
      kind: 'metrics',
      pool: 'llama',
      zone: 'zone-a',
      pod,
      observedAt: t,
      waitingRequests: 0,
      runningRequests: 0,
      kvCacheUsage: 0,
    };
    nc.publish(subjectOf(readiness), encodeEvent(readiness));
    nc.publish(subjectOf(sample), encodeEvent(sample));
    if (i % 2_000 === 0) await nc.flush();
  }
  // Six real pods, three in the EPP's zone.
  for (let i = 0; i < 6; i++) {
    await publisher.publishReadiness({
      v: 1,
      kind: 'readiness',
      pool: 'llama',
      zone: i < 3 ? 'zone-a' : 'zone-b',
      pod: `real-${i}`,
      address: `10.1.0.${i}:8000`,
      ready: true,
      observedAt: t,
    });
  }
  for (;;) {
    const info = await jsm.streams.info('SPILLWAY');
    if (info.state.messages >= 2 * count + 6) break;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  for (let run = 0; run < 2; run++) {
    const fleet = new Fleet();
    const started = performance.now();
    const reader = startReader(nc, { pool: 'llama', sink: fleet });
    await reader.caughtUp;
    const replayMs = performance.now() - started;
    await reader.close();
    const scheduler = new Scheduler({ fleet, pool: 'llama', zone: 'zone-a', region: 'r1' });
    const now = Date.now();
    for (let i = 0; i < 50; i++) scheduler.pick({ model: 'm' }, now);
    const pickStarted = performance.now();
    for (let i = 0; i < 200; i++) scheduler.pick({ model: 'm' }, now);
    const pickUs = ((performance.now() - pickStarted) / 200) * 1000;
    const heapMB = process.memoryUsage().heapUsed / 1e6;
    console.log(
      JSON.stringify({
        count,
        mode,
        replayMs: Math.round(replayMs),
        counters: fleet.counters,
        ready: fleet.pool('llama')?.readyCount,
        pickUs: Math.round(pickUs),
        heapMB: Math.round(heapMB),
      }),
    );
  }
} finally {
  await nc.close();
  await nats.stop();
}
