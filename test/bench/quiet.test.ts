import { describe, expect, it } from 'vitest';
import { describeLoad, quietWaitFromEnv, waitForQuiet } from './quiet.js';

/** A virtual clock: sleeping advances it, and the load average follows a script over time. */
function virtual(loadAt: (ms: number) => number) {
  let t = 0;
  const sleeps: number[] = [];
  return {
    now: () => t,
    sleep: async (ms: number) => {
      sleeps.push(ms);
      t += ms;
    },
    load: () => loadAt(t),
    sleeps,
  };
}

describe('waitForQuiet', () => {
  it('returns at once, without waiting, when the machine is already quiet', async () => {
    const clock = virtual(() => 0.4);
    const quiet = await waitForQuiet({ ...clock, maxWaitMs: 60_000 });
    expect(quiet).toEqual({ quiet: true, load: 0.4, threshold: 1, waitedMs: 0, maxWaitMs: 60_000 });
    expect(clock.sleeps).toEqual([]);
  });

  it('waits until the load average falls below the threshold', async () => {
    const clock = virtual((t) => (t < 10_000 ? 3 : 0.8));
    const messages: string[] = [];
    const quiet = await waitForQuiet({ ...clock, maxWaitMs: 60_000, pollMs: 2_000, log: (m) => messages.push(m) });
    expect(quiet.quiet).toBe(true);
    expect(quiet.load).toBe(0.8);
    expect(quiet.waitedMs).toBe(10_000);
    expect(messages).toHaveLength(2);
    expect(messages[1]).toContain('quiet after 10 s');
  });

  it('gives up at the bound and says the machine was not quiet', async () => {
    const clock = virtual(() => 2.5);
    const messages: string[] = [];
    const quiet = await waitForQuiet({ ...clock, maxWaitMs: 5_000, pollMs: 2_000, log: (m) => messages.push(m) });
    expect(quiet).toMatchObject({ quiet: false, load: 2.5, waitedMs: 5_000 });
    // Never sleeps past the bound.
    expect(clock.sleeps).toEqual([2_000, 2_000, 1_000]);
    expect(messages[1]).toContain('not quiet after 5 s');
    expect(describeLoad(quiet, 2.7)).toContain('**not quiet**');
  });

  it('does not wait at all with a bound of 0', async () => {
    const clock = virtual(() => 4);
    const quiet = await waitForQuiet({ ...clock, maxWaitMs: 0 });
    expect(quiet).toMatchObject({ quiet: false, waitedMs: 0 });
    expect(clock.sleeps).toEqual([]);
  });

  it('reads the bound from SPILLWAY_BENCH_QUIET_WAIT_S and rejects nonsense', () => {
    expect(quietWaitFromEnv(1234, {})).toBe(1234);
    expect(quietWaitFromEnv(1234, { SPILLWAY_BENCH_QUIET_WAIT_S: '30' })).toBe(30_000);
    expect(quietWaitFromEnv(1234, { SPILLWAY_BENCH_QUIET_WAIT_S: '0' })).toBe(0);
    expect(() => quietWaitFromEnv(1234, { SPILLWAY_BENCH_QUIET_WAIT_S: 'soon' })).toThrow(/SPILLWAY_BENCH_QUIET_WAIT_S/);
    expect(() => quietWaitFromEnv(1234, { SPILLWAY_BENCH_QUIET_WAIT_S: '-1' })).toThrow(/SPILLWAY_BENCH_QUIET_WAIT_S/);
  });

  it('describes a quiet start with the load before and after', () => {
    const line = describeLoad({ quiet: true, load: 0.42, threshold: 1, waitedMs: 12_000, maxWaitMs: 180_000 }, 1.3);
    expect(line).toBe('1-minute load average 0.42 before this part after waiting 12 s, 1.30 after; the machine was quiet (below 1).');
  });
});
