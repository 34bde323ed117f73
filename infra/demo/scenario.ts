/**
 * The demo's scenario: which load each zone's gateway gets, and which faults happen, over time.
 * Pure: the plan is a list of phases with start and end offsets; `start.ts` plays it.
 *
 *   balanced  -> every zone at the base rate
 *   overload  -> one zone pushed past its capacity, the others at the base rate
 *   zone-down -> one zone's model servers killed (SIGKILL), every zone at the base rate
 *   recovery  -> the killed servers restarted, every zone at the base rate
 *   steady    -> (only without --duration) balanced load until interrupted
 */

export type PhaseAction = { kind: 'kill-servers'; zone: string } | { kind: 'restart-servers'; zone: string };

export interface Phase {
  name: string;
  /** One line for the output: what happens in this phase. */
  description: string;
  /** Offsets from the start of traffic, in ms; `endMs` is Infinity for the open-ended last phase. */
  startMs: number;
  endMs: number;
  /** Requests per second sent to each zone's gateway. */
  rates: Record<string, number>;
  /** Done once when the phase begins. */
  actions: PhaseAction[];
}

export interface ScenarioOptions {
  zones: readonly string[];
  /** Base requests per second per zone. */
  baseRate: number;
  /** Estimated capacity (req/s) of each zone, for the overload rate. */
  capacity: Record<string, number>;
  /** The zone pushed past its capacity. */
  overloadZone: string;
  /** Its load as a multiple of its capacity. */
  overloadFactor: number;
  /** The zone whose model servers are killed. */
  downZone: string;
  /** Total traffic time in ms; phases are scaled to fit. Absent: default lengths, then `steady` forever. */
  durationMs?: number;
}

/** Relative lengths; without a duration, one unit is one second. */
export const PHASE_WEIGHTS = { balanced: 15, overload: 25, 'zone-down': 15, recovery: 25 } as const;
export const MIN_DURATION_S = 8;

export function planScenario(options: ScenarioOptions): Phase[] {
  const { zones, baseRate, capacity, overloadZone, overloadFactor, downZone } = options;
  for (const zone of [overloadZone, downZone]) if (!zones.includes(zone)) throw new Error(`unknown zone ${zone}`);
  if (options.durationMs !== undefined && !(options.durationMs >= MIN_DURATION_S * 1000)) {
    throw new RangeError(`the scenario needs at least ${MIN_DURATION_S} s, got ${options.durationMs / 1000} s`);
  }
  const base = Object.fromEntries(zones.map((z) => [z, baseRate]));
  const overloadRate = round1(Math.max((capacity[overloadZone] ?? 0) * overloadFactor, baseRate * 2));
  const specs: Array<Omit<Phase, 'startMs' | 'endMs'> & { weight: number }> = [
    { name: 'balanced', weight: PHASE_WEIGHTS.balanced, rates: base, actions: [], description: `every zone at ${baseRate} req/s` },
    {
      name: 'overload',
      weight: PHASE_WEIGHTS.overload,
      rates: { ...base, [overloadZone]: overloadRate },
      actions: [],
      description: `${overloadZone} at ${overloadRate} req/s (${overloadFactor}x its capacity of ~${round1(capacity[overloadZone] ?? 0)}), others ${baseRate}`,
    },
    {
      name: 'zone-down',
      weight: PHASE_WEIGHTS['zone-down'],
      rates: base,
      actions: [{ kind: 'kill-servers', zone: downZone }],
      description: `${downZone}'s model servers killed (SIGKILL); every zone at ${baseRate} req/s`,
    },
    {
      name: 'recovery',
      weight: PHASE_WEIGHTS.recovery,
      rates: base,
      actions: [{ kind: 'restart-servers', zone: downZone }],
      description: `${downZone}'s model servers restarted; every zone at ${baseRate} req/s`,
    },
  ];
  const totalWeight = specs.reduce((sum, s) => sum + s.weight, 0);
  const unitMs = options.durationMs === undefined ? 1000 : options.durationMs / totalWeight;
  const phases: Phase[] = [];
  let at = 0;
  let weightSoFar = 0;
  for (const { weight, ...spec } of specs) {
    // Boundaries fall on whole seconds (the demo prints a line a second); rounding the running
    // total rather than each length keeps the sum exact and, from MIN_DURATION_S up, no phase empty.
    weightSoFar += weight;
    const end = Math.round((weightSoFar * unitMs) / 1000) * 1000;
    phases.push({ ...spec, startMs: at, endMs: end });
    at = end;
  }
  if (options.durationMs !== undefined) {
    // The last phase ends exactly at the duration, even one that is not a whole number of seconds.
    (phases[phases.length - 1] as Phase).endMs = options.durationMs;
  } else {
    phases.push({ name: 'steady', startMs: at, endMs: Infinity, rates: base, actions: [], description: `balanced load until Ctrl-C` });
  }
  return phases;
}

/** The phase running at `offsetMs`, or undefined once the scenario is over. */
export function phaseAt(phases: readonly Phase[], offsetMs: number): Phase | undefined {
  return phases.find((p) => offsetMs >= p.startMs && offsetMs < p.endMs);
}

/**
 * Rough capacity of one simulated model server in requests per second, from the engine's latency
 * model: at a full batch every sequence runs `loadFactor` times slower, so one request takes a prefill
 * (which yields the first token) plus `outputTokens - 1` decode steps at that speed, and `maxNumSeqs`
 * of them run at once.
 */
export function serverCapacity(
  engine: {
    maxNumSeqs: number;
    prefillOverheadMs: number;
    prefillPerTokenMs: number;
    interTokenMs: number;
    loadFactor: number;
  },
  promptTokens: number,
  outputTokens: number,
  timeScale = 1,
): number {
  const slow = engine.maxNumSeqs > 1 ? engine.loadFactor : 1;
  const serviceMs =
    (engine.prefillOverheadMs + promptTokens * engine.prefillPerTokenMs + Math.max(0, outputTokens - 1) * engine.interTokenMs) * slow;
  return (engine.maxNumSeqs * 1000 * timeScale) / serviceMs;
}

function round1(x: number): number {
  return Math.round(x * 10) / 10;
}
