import { describe, expect, it } from 'vitest';
import { resolveScenario, runStrategy, type MessageInfo, type ResolvedScenario } from '../src/index.js';
import { parse, smallScenario } from './helpers.js';

/** Whole simulations: generous on a busy machine. */
const SIM_TIMEOUT_MS = 180_000;

/** Two regions 60 ms apart: zone-a and zone-b in r1 (2 ms apart), zone-c in r2. */
const twoRegions = (overrides: Record<string, unknown> = {}): ResolvedScenario =>
  resolveScenario(
    parse(
      smallScenario({
        durationS: 10,
        network: { sameRegionMs: 2, crossRegionMs: 60 },
        zones: [
          { zone: 'zone-a', region: 'r1', replicas: 2 },
          { zone: 'zone-b', region: 'r1', replicas: 2 },
          { zone: 'zone-c', region: 'r2', replicas: 2 },
        ],
        ...overrides,
      }),
    ),
  );

function messages(s: ResolvedScenario, strategy: string): MessageInfo[] {
  const spec = s.strategies.find((x) => x.name === strategy);
  if (!spec) throw new Error(`no strategy ${strategy}`);
  const seen: MessageInfo[] = [];
  runStrategy(s, spec, 7, { onMessage: (m) => void seen.push(m) });
  return seen;
}

describe('physical delays between zones', () => {
  it(
    'shared state between regions arrives no sooner than half their round trip; within a region, half of its',
    () => {
      const s = twoRegions({ strategies: ['spillway'] });
      const state = messages(s, 'spillway').filter((m) => m.kind === 'state');
      const across = state.filter((m) => (m.fromZone === 2) !== (m.toZone === 2));
      const near = state.filter((m) => m.fromZone !== m.toZone && m.fromZone !== 2 && m.toZone !== 2);
      expect(across.length).toBeGreaterThan(20);
      expect(near.length).toBeGreaterThan(20);
      for (const m of across) expect(m.at - m.sentAt).toBeGreaterThanOrEqual(30);
      for (const m of near) expect(m.at - m.sentAt).toBeGreaterThanOrEqual(1);
      // ... plus the channel's own jitter (sharingDelayMs, default 1–3 ms), no more.
      for (const m of across) expect(m.at - m.sentAt).toBeLessThanOrEqual(33);
    },
    SIM_TIMEOUT_MS,
  );

  it(
    'metrics and readiness events and KV batches cross zones no sooner than half the round trip either',
    () => {
      const s = twoRegions({
        strategies: ['spillway-precise'],
        workload: { kind: 'shared-prefix', groups: 4, prefixTokens: [400, 800], questionTokens: [20, 200], outputTokens: 50 },
      });
      const seen = messages(s, 'spillway-precise');
      for (const kind of ['metrics', 'readiness', 'kv'] as const) {
        const across = seen.filter((m) => m.kind === kind && (m.fromZone === 2) !== (m.toZone === 2));
        expect(across.length, kind).toBeGreaterThan(0);
        for (const m of across) expect(m.at - m.sentAt, kind).toBeGreaterThanOrEqual(30);
      }
      // In its own zone a sample takes only the path's delay (delayMs, 5–20 ms by default).
      const local = seen.filter((m) => m.kind === 'metrics' && m.fromZone === m.toZone);
      expect(Math.min(...local.map((m) => m.at - m.sentAt))).toBeLessThan(20);
    },
    SIM_TIMEOUT_MS,
  );

  it(
    'a request served in another region pays the round trip to it; in its own zone it does not',
    () => {
      const s = twoRegions({ strategies: ['random', 'zone-local'], load: { clusterFraction: 0.2 } });
      const spec = (name: string) => s.strategies.find((x) => x.name === name) ?? s.strategies[0]!;
      const random = runStrategy(s, spec('random'), 7);
      const local = runStrategy(s, spec('zone-local'), 7);
      // A third of random's requests leave their region: its p90 carries the 60 ms, zone-local's does not.
      expect(random.ttftMs.p90 - local.ttftMs.p90).toBeGreaterThan(40);
    },
    SIM_TIMEOUT_MS,
  );
});
