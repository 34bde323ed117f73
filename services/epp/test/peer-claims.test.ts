/**
 * The second hardening round as the EPP wires it (docs/hardening.md): the view knows the EPP's own
 * zone (an address contested by zones routes only this zone's claimant), the zone cap and its
 * flag, the per-zone peer cap from the config file, sequence jumps, re-syncs and evictions counted
 * and exported, warm-start answers taken only from peers heard on their own subjects, and what a
 * decision tells (the request's id, stale subset entries counted and logged). Real EPPs, a private
 * nats-server, forged batches published with a raw connection. Each test uses zones of its own.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ensureStream } from '@spillway/bus';
import { decodeStateBatch, encodeStateBatch, stateSubjectFor, stateSyncFilter, type StateBatch, type StateEntry } from '@spillway/events';
import type { RunningEpp } from '@spillway/epp';
import { eventually, startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import {
  capturingLogger,
  completion,
  destinationOf,
  EnvoyStream,
  envoyRequestMessages,
  extProcClient,
  startTestEpp,
  TestPublisher,
  type PodSpec,
} from './helpers.js';

let nats: NatsServerHandle;
let publisher: TestPublisher;
let raw: NatsConnection;
const running: RunningEpp[] = [];
const published: PodSpec[] = [];
const dir = mkdtempSync(join(tmpdir(), 'spillway-peer-claims-'));
const config = join(dir, 'epp.yaml');
// Fast heartbeats and a short peer timeout keep the tests short; a small per-zone peer cap.
writeFileSync(config, 'sharedState: { heartbeatMs: 100, peerTimeoutMs: 1000, warmStartMs: 3000, maxPeersPerZone: 2 }\n');
const ARGS = ['--config', config, '--metrics-stale-ms', '600000'];

beforeAll(async () => {
  nats = await startNatsServer({ forcePrivate: true });
  publisher = await TestPublisher.connect(nats.url);
  raw = await connect({ servers: nats.url });
  await ensureStream(await jetstreamManager(raw), { name: 'SPILLWAY' });
});

afterEach(async () => {
  for (const epp of running.splice(0)) await epp.close();
  await publisher.pods(published.splice(0).map((p) => ({ ...p, ready: false })));
});

afterAll(async () => {
  await raw?.close();
  await publisher?.close();
  await nats?.stop();
});

async function pods(specs: PodSpec[]): Promise<PodSpec[]> {
  await publisher.pods(specs);
  published.push(...specs);
  return specs;
}

async function epp(zone: string, extra: string[] = [], logger = capturingLogger().logger): Promise<RunningEpp> {
  const started = await startTestEpp(nats.url, zone, [...ARGS, ...extra], logger);
  running.push(started);
  await started.ready;
  return started;
}

async function metrics(target: RunningEpp): Promise<string> {
  return (await fetch(`http://127.0.0.1:${target.metricsPort}/metrics`)).text();
}

/** One request through `target`; the destination list. */
async function route(target: RunningEpp, options: { subset?: string[]; headers?: Record<string, string> } = {}): Promise<string[]> {
  const client = extProcClient(target.grpcPort);
  const stream = new EnvoyStream(client);
  try {
    stream.send(envoyRequestMessages({ body: completion(), ...options }));
    const [first] = await stream.waitFor(1);
    return destinationOf(first).header?.split(',') ?? [];
  } finally {
    stream.close();
    client.close();
  }
}

async function debugDecisions(target: RunningEpp, limit: number): Promise<unknown[]> {
  const response = await fetch(`http://127.0.0.1:${target.metricsPort}/debug/decisions?limit=${limit}`);
  return ((await response.json()) as { decisions: unknown[] }).decisions;
}

function batch(origin: { zone: string; epp: string }, seq: number, entries: StateEntry[] = []): StateBatch {
  return { v: 1, pool: 'llama', ...origin, seq, sentAt: Date.now(), entries };
}

function send(b: StateBatch): void {
  raw.publish(stateSubjectFor(b), encodeStateBatch(b));
}

describe('the view is held for the EPP’s own zone', () => {
  it('an address claimed by two zones routes only the own zone’s claimant; a third zone routes to neither', async () => {
    // zone-p's collector announces a pod at zone-q's address, with forged idle metrics.
    const contested = '10.31.0.1:8000';
    await pods([
      { pod: 'q-real', zone: 'zone-q', address: contested, waiting: 3 },
      { pod: 'q-other', zone: 'zone-q', address: '10.31.0.2:8000', waiting: 3 },
      { pod: 'p-forged', zone: 'zone-p', address: contested },
      { pod: 'r-0', zone: 'zone-r', address: '10.31.0.3:8000', waiting: 3 },
    ]);
    const q = await epp('zone-q');
    const r = await epp('zone-r');
    await eventually(() => expect(q.core.fleet.pool('llama')?.readyInZone('zone-r').size).toBe(1));
    const claimants = (target: RunningEpp) =>
      target.core.fleet
        .pool('llama')
        ?.routableAt(contested)
        .map((e) => e.zone);
    expect(claimants(q)).toEqual(['zone-q']);
    expect(claimants(r)).toEqual([]);
    // zone-q's picks in its subset are its own pods; zone-r's EPP never lists the contested address.
    await route(q, { subset: [contested], headers: { 'x-request-id': 'q-1' } });
    const [decision] = (await debugDecisions(q, 1)) as { entries: { zone: string }[] }[];
    expect(decision?.entries[0]?.zone).toBe('zone-q');
    for (let i = 0; i < 10; i++) expect(await route(r)).not.toContain(contested);
    expect(await metrics(q)).toMatch(/spillway_events_total\{result="address-conflict"\} [1-9]/);
  });

  it('--max-zones-per-pool caps the zones the view holds; further zones are refused and counted', async () => {
    const target = await epp('zone-z0', ['--max-zones-per-pool', '2']);
    const names = Array.from({ length: 3 }, (_, i) => `zone-cap-${i}`);
    await pods(names.map((zone, i) => ({ pod: `${zone}-0`, zone, address: `10.32.0.${i + 1}:8000` })));
    await eventually(async () => expect(await metrics(target)).toMatch(/spillway_events_total\{result="too-many-zones"\} [1-9]/));
    const zones = [...(target.core.fleet.pool('llama')?.readyZones() ?? [])];
    expect(zones.length).toBeLessThanOrEqual(2);
    expect(zones).not.toContain('zone-cap-2');
  });
});

describe('the peer table and sequence numbers', () => {
  it('holds at most sharedState.maxPeersPerZone peers of a zone, the longest-silent evicted and counted', async () => {
    const target = await epp('zone-e');
    for (const id of ['fake-1', 'fake-2', 'fake-3']) {
      send(batch({ zone: 'zone-e2', epp: id }, 1));
      await raw.flush();
      await eventually(() => expect(target.core.scheduler.shared.knowsPeer('zone-e2', id)).toBe(true));
    }
    expect(target.core.scheduler.shared.knowsPeer('zone-e2', 'fake-1')).toBe(false);
    expect(target.core.scheduler.shared.peerCount).toBe(2);
    expect(target.sharedState?.peersEvicted).toBe(1);
    expect(await metrics(target)).toContain('spillway_shared_state_peers_evicted_total 1');
  });

  it('refuses a sequence number pushed far ahead (exported), and re-syncs a real count pushed behind (counted)', async () => {
    const { logger, lines } = capturingLogger();
    const target = await epp('zone-s', [], logger);
    const peer = { zone: 'zone-s2', epp: 'peer-s' };
    send(batch(peer, 1));
    // Far ahead: refused.
    send(batch(peer, Number.MAX_SAFE_INTEGER));
    // Within what the peer could have counted: taken, and the real count is now behind it.
    send(batch(peer, 1000));
    for (const seq of [2, 3, 4]) send(batch(peer, seq));
    await raw.flush();
    await eventually(() => expect(target.sharedState?.resyncs).toBe(1));
    expect(target.sharedState?.rejected).toEqual({ 'sequence-jump': 1, replayed: 2 });
    const text = await metrics(target);
    expect(text).toContain('spillway_shared_state_rejected_total{reason="sequence-jump"} 1');
    expect(text).toContain('spillway_shared_state_resyncs_total 1');
    expect(lines.some((l) => l['msg'] === "took up a peer's sequence afresh after consecutive refusals")).toBe(true);
    // After the re-sync the peer's count applies again.
    send(batch(peer, 5));
    await raw.flush();
    await eventually(() => expect(target.sharedState?.batchesIn).toBe(4));
  });
});

describe('warm start', () => {
  it('takes a snapshot only from a peer heard on its own subject: held until its batch comes, dropped if it never does', async () => {
    const [pod] = await pods([{ pod: 'w-0', zone: 'zone-w', address: '10.33.0.1:8000' }]);
    const pick = (id: number): StateEntry => [1, id, 'zone-w', pod?.pod as string, Date.now(), []];
    // Two responders answer every warm-start request of the pool: a real peer, which also sends
    // heartbeats on its own subject from a little later on, and a ghost, whose claimed id never
    // speaks for itself.
    let heartbeats: NodeJS.Timeout | undefined;
    let seq = 0;
    const responders = ['real', 'ghost'].map((id) =>
      raw.subscribe(stateSyncFilter('llama'), {
        callback: (_error, msg) => {
          const request = decodeStateBatch(msg.data);
          if (!request.ok || request.batch.zone !== 'zone-w') return;
          msg.respond(
            encodeStateBatch({ ...batch({ zone: 'zone-w2', epp: id }, 0, [pick(id === 'real' ? 1 : 2)]), snapshot: { last: true } }),
          );
          if (id === 'real')
            setTimeout(() => (heartbeats = setInterval(() => send(batch({ zone: 'zone-w2', epp: 'real' }, ++seq)), 100)), 300);
        },
      }),
    );
    try {
      const target = await epp('zone-w');
      expect(target.sharedState?.warmStartPeers).toBe(1);
      expect(target.core.scheduler.shared.remoteInFlight).toBe(1);
      expect(target.core.scheduler.shared.knowsPeer('zone-w2', 'ghost')).toBe(false);
      expect(target.sharedState?.rejected['unvouched-snapshot']).toBe(1);
      expect(await metrics(target)).toContain('spillway_shared_state_rejected_total{reason="unvouched-snapshot"} 1');
    } finally {
      clearInterval(heartbeats);
      for (const subscription of responders) subscription.unsubscribe();
    }
  }, 20_000);
});

describe('what a decision tells', () => {
  it('carries the gateway’s x-request-id to /debug/decisions; stale subset entries are counted, listed and logged once a minute', async () => {
    const [live] = await pods([{ pod: 'd-0', zone: 'zone-d', address: '10.34.0.1:8000' }]);
    const { logger, lines } = capturingLogger();
    const target = await epp('zone-d', ['--subset-mode', 'locality'], logger);
    const stale = ['10.34.9.1:8000', '10.34.9.2:8000'];
    for (const id of ['req-1', 'req-2']) {
      const destination = await route(target, { subset: [live?.address as string, ...stale], headers: { 'x-request-id': id } });
      expect(destination[0]).toBe(live?.address);
    }
    const decisions = (await debugDecisions(target, 2)) as {
      requestId: string;
      subsetUnmatchedEntries: string[];
      counts: { subsetUnmatched: number };
    }[];
    expect(decisions.map((d) => d.requestId)).toEqual(['req-2', 'req-1']);
    expect(decisions[0]?.subsetUnmatchedEntries).toEqual(stale);
    expect(decisions[0]?.counts.subsetUnmatched).toBe(2);
    expect(await metrics(target)).toContain('spillway_subset_entries_unmatched_total 4');
    const logged = lines.filter((l) => String(l['msg']).startsWith('subset hint names endpoints that are not routable'));
    expect(logged).toHaveLength(1);
    expect(logged[0]).toMatchObject({ unmatched: 2, entries: stale, requestId: 'req-1' });
  });
});
