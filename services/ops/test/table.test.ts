import { describe, expect, it } from 'vitest';
import { Fleet } from '@spillway/fleet';
import type { ReaderStatus } from '@spillway/bus';
import { metrics, readiness } from '@spillway/testkit';
import { fleetRows, renderFleetStatus, renderFleetTable, type FleetRow } from '../src/index.js';
import { formatAge } from '../src/table.js';

const row = (over: Partial<FleetRow>): FleetRow => ({
  zone: 'zone-a',
  pod: 'p',
  address: '10.0.0.1:8000',
  ready: 'ready',
  waiting: 1,
  running: 2,
  kvCacheUsage: 0.5,
  inFlight: 3,
  metricsAgeMs: 100,
  stale: false,
  ...over,
});

describe('fleet table', () => {
  it('builds rows from a fleet, sorted by zone then pod, with ages and stale marks at `now`', () => {
    const fleet = new Fleet({ staleAfterMs: 1_000 });
    fleet.apply(readiness('p', 1, 10), 1_000); // zone-b
    fleet.apply(readiness('p', 0, 10), 1_000); // zone-a
    fleet.apply(readiness('p', 3, 10, { ready: false }), 1_000); // zone-a
    fleet.apply(metrics('p', 0, 10, { waitingRequests: 4, runningRequests: 9, kvCacheUsage: 0.25 }), 1_000);
    fleet.apply(metrics('p', 1, 10), 400);
    fleet.apply(metrics('p', 7, 10), 1_000); // metrics only, no readiness yet
    const rows = fleetRows(fleet, 'p', 1_500, new Map([['zone-a/vllm-0', 2]]));
    expect(rows.map((r) => [r.zone, r.pod, r.ready, r.stale])).toEqual([
      ['zone-a', 'vllm-0', 'ready', false],
      ['zone-a', 'vllm-3', 'not ready', true],
      ['zone-b', 'vllm-1', 'ready', true],
      ['zone-b', 'vllm-7', 'unknown', false],
    ]);
    expect(rows[0]).toMatchObject({ waiting: 4, running: 9, kvCacheUsage: 0.25, inFlight: 2, metricsAgeMs: 500, address: '10.0.0.0:8000' });
    expect(rows[1]?.inFlight).toBe(0);
    // Not followed: unknown, not zero.
    expect(fleetRows(fleet, 'p', 1_500)[0]?.inFlight).toBeUndefined();
    expect(rows[2]?.metricsAgeMs).toBe(1_100);
    expect(fleetRows(fleet, 'nope', 0)).toEqual([]);
  });

  it('renders aligned columns with a header, percentages, ages, dashes and STALE', () => {
    const text = renderFleetTable([
      row({ pod: 'vllm-a-0', kvCacheUsage: 0.431 }),
      row({
        zone: 'zone-b',
        pod: 'x',
        address: '[fd00::1]:8000',
        ready: 'not ready',
        waiting: undefined,
        running: undefined,
        kvCacheUsage: undefined,
        inFlight: undefined,
        metricsAgeMs: undefined,
        stale: true,
      }),
    ]);
    const lines = text.split('\n');
    expect(lines).toHaveLength(3);
    expect(lines[0]).toMatch(/^ZONE\s+POD\s+ADDRESS\s+READY\s+WAITING\s+RUNNING\s+KV USE\s+IN FLIGHT\s+METRICS AGE\s+STALE$/);
    expect(lines[1]).toMatch(/^zone-a\s+vllm-a-0\s+10\.0\.0\.1:8000\s+ready\s+1\s+2\s+43\.1%\s+3\s+100ms$/);
    expect(lines[2]).toMatch(/^zone-b\s+x\s+\[fd00::1\]:8000\s+not ready\s+-\s+-\s+-\s+-\s+-\s+STALE$/);
    // Columns line up: every line starts its POD column at the same offset.
    expect(new Set(lines.map((l) => l.indexOf(l.split(/\s+/)[1] ?? '')))).toHaveProperty('size', 1);
  });

  it('says so when the pool is empty', () => {
    expect(renderFleetTable([])).toMatch(/\(no pods\)$/);
  });

  it('formats ages', () => {
    expect([formatAge(undefined), formatAge(-5), formatAge(999), formatAge(1_500), formatAge(61_000), formatAge(7_200_000)]).toEqual([
      '-',
      '0ms',
      '999ms',
      '1.5s',
      '1m1s',
      '2.0h',
    ]);
  });

  it('renders the status lines: connection, staleness, counters by reason', () => {
    const status: ReaderStatus = {
      connection: 'reconnecting',
      caughtUp: true,
      staleSince: 1_000,
      reconnects: 2,
      consumerRestarts: 2,
      lastSequence: 42,
      received: 10,
      lastReceivedAt: undefined,
      pending: 0,
      lastDelayMs: undefined,
      rejected: 3,
      rejectedByReason: { 'not-json': 2, invalid: 1 },
    };
    const text = renderFleetStatus({
      header: { pool: 'llama', stream: 'SPILLWAY', server: 'nats://x:1' },
      status,
      counters: { applied: 7, ignored: 0, rejected: 3, future: 0, overCapacity: 0, tooManyZones: 1, addressConflict: 2 },
      rows: [row({}), row({ ready: 'not ready', stale: true })],
      now: 4_000,
    });
    expect(text).toContain('pool llama  stream SPILLWAY');
    expect(text).toContain('connection reconnecting  reconnects 2  caught up  seq 42  STALE for 3.0s');
    expect(text).toContain('pods 2  ready 1  stale metrics 1');
    expect(text).toContain('events applied 7  ignored 0  rejected 3 (not-json=2 invalid=1)');
    expect(text).toContain('too many zones 1  address conflicts 2');
    expect(text).not.toContain('in flight');
    const shared = (epps: number, inFlight: number) =>
      renderFleetStatus({
        header: { pool: 'llama', stream: 'SPILLWAY', server: 'x' },
        status,
        counters: { applied: 0, ignored: 0, rejected: 0, future: 0, overCapacity: 0, tooManyZones: 0, addressConflict: 0 },
        rows: [],
        now: 0,
        shared: { epps, inFlight },
      });
    expect(shared(2, 5)).toContain('in flight 5 over 2 EPPs (their shared state)');
    expect(
      renderFleetStatus({
        header: { pool: 'llama', stream: 'SPILLWAY', server: 'x' },
        status,
        counters: { applied: 0, ignored: 0, rejected: 0, future: 0, overCapacity: 0, tooManyZones: 0, addressConflict: 0 },
        rows: [],
        now: 0,
        shared: { epps: 1, inFlight: 4, started: 3 },
      }),
    ).toContain('in flight 4 (3 started) over 1 EPP (their shared state)');
    expect(shared(0, 0)).toContain('in flight: no EPP shares its state');
  });
});
