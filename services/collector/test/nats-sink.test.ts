import { connect, type NatsConnection } from '@nats-io/transport-node';
import { natsOptionsFromFlags } from '@spillway/bus';
import { decodeEvent, type MetricsEvent } from '@spillway/events';
import { eventually, startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NatsSink } from '../src/nats-sink.js';

/**
 * The sink batches metrics samples (METRICS_BATCH_MS) so that one socket write carries many: on a
 * private nats-server, every sample must still arrive exactly once and in order, a large burst must
 * not wait, and closing must send what is held.
 */
let nats: NatsServerHandle;
let nc: NatsConnection;
beforeAll(async () => {
  nats = await startNatsServer({ forcePrivate: true });
  nc = await connect({ servers: nats.url });
}, 30_000);
afterAll(async () => {
  await nc?.close();
  await nats?.stop();
});

function sample(pod: string, waitingRequests: number, lora?: MetricsEvent['lora']): MetricsEvent {
  const event: MetricsEvent = {
    v: 1,
    kind: 'metrics',
    pool: 'p',
    zone: 'z',
    pod,
    observedAt: 1_800_000_000_000 + waitingRequests,
    waitingRequests,
    runningRequests: 0,
    kvCacheUsage: 0,
  };
  if (lora !== undefined) event.lora = lora;
  return event;
}

async function sink(metricsBatchMs?: number): Promise<NatsSink> {
  const s = new NatsSink({
    settings: natsOptionsFromFlags({ nats: nats.url }, {}),
    stream: 'SPILLWAY',
    logger: pino({ level: 'silent' }),
    metricsBatchMs,
  });
  await s.ready();
  return s;
}

/** Every metrics sample published on the pool from now on, decoded, in arrival order. */
function received(): { events: MetricsEvent[]; stop: () => void } {
  const events: MetricsEvent[] = [];
  const sub = nc.subscribe('spillway.v1.p.>', {
    callback: (_error, msg) => {
      const decoded = decodeEvent(msg.data, msg.subject);
      if (decoded.ok && decoded.event.kind === 'metrics') events.push(decoded.event);
    },
  });
  return { events, stop: () => sub.unsubscribe() };
}

describe('NatsSink metrics batching', () => {
  it('every sample arrives once and in order, whatever the batch window', async () => {
    for (const window of [0, 5, 20]) {
      const s = await sink(window);
      const got = received();
      await nc.flush();
      const sent: MetricsEvent[] = [];
      for (let i = 0; i < 300; i++) {
        const event = sample(`pod-${window}-${i % 7}`, i);
        sent.push(event);
        expect(s.publishMetrics(event)).toBe(true);
        // Some samples a turn apart, some in the same turn.
        if (i % 13 === 0) await new Promise((r) => setImmediate(r));
      }
      await eventually(() => expect(got.events.length).toBe(sent.length));
      expect(got.events).toEqual(sent);
      got.stop();
      await s.close();
    }
  });

  it('a burst over the batch bound goes out without waiting for the window; a large one by its bytes', async () => {
    // A window far beyond the test's patience: only the bounds can send these.
    const s = await sink(3_600_000);
    const got = received();
    await nc.flush();
    for (let i = 0; i < 256; i++) s.publishMetrics(sample('burst', i));
    await eventually(() => expect(got.events.length).toBe(256));
    const names = Array.from({ length: 200 }, (_, i) => `adapter-${i}-${'x'.repeat(200)}`);
    for (let i = 0; i < 8; i++) s.publishMetrics(sample('big', i, { running: names, waiting: [], max: 1 }));
    await eventually(() => expect(got.events.length).toBeGreaterThan(256));
    got.stop();
    await s.close();
  });

  it('closing sends the samples still held', async () => {
    const s = await sink(3_600_000);
    const got = received();
    await nc.flush();
    for (let i = 0; i < 5; i++) s.publishMetrics(sample('held', i));
    await s.close();
    await eventually(() => expect(got.events.map((e) => e.waitingRequests)).toEqual([0, 1, 2, 3, 4]));
    got.stop();
  });
});
