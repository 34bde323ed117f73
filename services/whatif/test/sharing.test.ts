import { Rng } from '@spillway/engine';
import type { StateBatch, StateEntry } from '@spillway/events';
import { Fleet } from '@spillway/fleet';
import { Scheduler } from '@spillway/scheduler';
import { describe, expect, it } from 'vitest';
import { POOL } from '../src/routers.js';
import { HEARTBEAT_MS, SharingChannel } from '../src/sharing.js';

/** The modelled channel with a hand-driven queue: what leaves when, what arrives where, what is lost. */
function setup(options: { lossRate?: number; delayMs?: [number, number] } = {}) {
  const scheduled: { at: number; what: 'flush' | 'deliver'; peer: number; batch?: StateBatch }[] = [];
  let up = true;
  const rng = new Rng(1);
  const [lo, hi] = options.delayMs ?? [1, 3];
  const channel = new SharingChannel({
    batchMs: 5,
    delay: () => lo + rng.next() * (hi - lo),
    lossRate: options.lossRate ?? 0,
    rng,
    schedule: (at: number, what: 'flush' | 'deliver', peer: number, batch?: StateBatch) =>
      void scheduled.push({ at, what, peer, ...(batch ? { batch } : {}) }),
    up: () => up,
  });
  const fleets = [0, 1, 2].map(() => {
    const fleet = new Fleet();
    fleet.apply(
      { v: 1, kind: 'readiness', pool: POOL, zone: 'zone-a', pod: 'p0', address: '10.0.0.1:8000', ready: true, observedAt: 0 },
      0,
    );
    return fleet;
  });
  const schedulers = fleets.map((fleet, i) => {
    const outbox = channel.join(i, i === 2 ? 'zone-b' : 'zone-a', `epp-${i}-0`);
    const scheduler = new Scheduler({ fleet, pool: POOL, zone: 'zone-a', shared: { outbox } });
    channel.attach(i, scheduler.shared);
    return scheduler;
  });
  return { channel, scheduled, fleets, schedulers, setUp: (v: boolean) => (up = v) };
}

const pick = (s: Scheduler, now: number) => {
  const d = s.pick({ model: 'm' }, now);
  s.commit(d, now);
  return d;
};

describe('the modelled sharing channel', () => {
  it('batches an EPP’s entries batchMs after the first, and delivers them to every other EPP (all zones) after its delay', () => {
    const { channel, scheduled, fleets, schedulers } = setup();
    channel.now = 100;
    pick(schedulers[0] as Scheduler, 100);
    pick(schedulers[0] as Scheduler, 102);
    expect(scheduled).toEqual([{ at: 105, what: 'flush', peer: 0 }]);
    channel.flush(0, 105);
    const deliveries = scheduled.filter((e) => e.what === 'deliver');
    expect(deliveries.map((e) => e.peer)).toEqual([1, 2]);
    for (const d of deliveries) {
      expect(d.at).toBeGreaterThanOrEqual(106);
      expect(d.at).toBeLessThanOrEqual(108);
      expect(d.batch?.entries.map((e: StateEntry) => e[0])).toEqual([1, 1]);
      channel.deliver(d.peer, d.batch as StateBatch, d.at);
    }
    expect(fleets.map((f) => f.get(POOL, 'zone-a', 'p0')?.inFlight)).toEqual([2, 2, 2]);
    expect([channel.sent, channel.delivered, channel.lost]).toEqual([1, 2, 0]);
  });

  it('loses batches at lossRate and while NATS is down; a restarted EPP is a new peer whose old scheduler sends nothing', () => {
    const { channel, scheduled, schedulers, setUp } = setup({ lossRate: 0.99 });
    pick(schedulers[0] as Scheduler, 0);
    channel.flush(0, 5);
    expect(channel.lost).toBe(2);
    setUp(false);
    const quiet = setup();
    quiet.setUp(false);
    pick(quiet.schedulers[0] as Scheduler, 0);
    quiet.channel.flush(0, 5);
    expect([quiet.channel.lost, quiet.scheduled.filter((e) => e.what === 'deliver').length]).toEqual([2, 0]);

    const fresh = setup();
    const old = fresh.schedulers[1] as Scheduler;
    const d = pick(old, 0);
    fresh.channel.restart(1, 'epp-1-1');
    old.release(d, 10);
    fresh.channel.flush(1, 15);
    // The new peer's batch (a heartbeat) carries nothing of the old process.
    expect(
      fresh.scheduled.filter((e) => e.what === 'deliver').every((e) => e.batch?.entries.length === 0 && e.batch.epp === 'epp-1-1'),
    ).toBe(true);
    expect(scheduled.length).toBeGreaterThan(0);
  });

  it('idle EPPs send heartbeats, so their peers keep them; warm start hands a new EPP its peers’ state', () => {
    const { channel, scheduled, fleets, schedulers } = setup();
    channel.tick(HEARTBEAT_MS);
    expect(scheduled.filter((e) => e.what === 'deliver')).toHaveLength(6);
    for (const e of scheduled.filter((x) => x.what === 'deliver')) channel.deliver(e.peer, e.batch as StateBatch, e.at);
    expect((schedulers[0] as Scheduler).shared.peerCount).toBe(2);

    pick(schedulers[2] as Scheduler, 2000);
    channel.restart(0, 'epp-0-1');
    const restarted = new Scheduler({
      fleet: fleets[0] as Fleet,
      pool: POOL,
      zone: 'zone-a',
      shared: { outbox: { push: () => undefined } },
    });
    channel.attach(0, restarted.shared);
    channel.warmStart(0, 2001);
    expect(restarted.shared.remoteInFlight).toBe(1);
  });
});
