import type { Engine } from '@spillway/events';
import { COUNTER_SPECS, counterFamilies } from './counters.js';
import { ENGINE_SPECS, gaugeFamilies } from './engines.js';

function familiesOf(engine: Engine): ReadonlySet<string> {
  return new Set([...gaugeFamilies(ENGINE_SPECS[engine]), ...counterFamilies(COUNTER_SPECS[engine])]);
}

/** The metric families read for each engine (gauges and rate counters): all a scrape keeps. */
export const ENGINE_FAMILIES: Readonly<Record<Engine, ReadonlySet<string>>> = {
  vllm: familiesOf('vllm'),
  sglang: familiesOf('sglang'),
  trtllm: familiesOf('trtllm'),
  triton: familiesOf('triton'),
};

/** Every engine's families: what a scrape keeps while its endpoint's engine is still unknown. */
export const ALL_FAMILIES: ReadonlySet<string> = new Set(Object.values(ENGINE_FAMILIES).flatMap((set) => [...set]));
