import type { BenchPart } from './part.js';
import { collector } from './collector.js';
import { decodeBench } from './decode.js';
import { events } from './events.js';
import { extproc } from './extproc.js';
import { extprocPhases } from './extproc-phases.js';
import { extprocStream } from './extproc-stream.js';
import { flow } from './flow.js';
import { kv } from './kv.js';
import { kvRelay } from './kv-relay.js';
import { pick } from './pick.js';
import { routing } from './routing.js';
import { scale } from './scale.js';
import { sharing } from './sharing.js';
import { xds } from './xds.js';

/** Every part of `npm run bench`, in the order they run and appear in BENCHMARKS.md. */
export const parts: BenchPart[] = [
  events,
  scale,
  pick,
  extproc,
  extprocStream,
  extprocPhases,
  sharing,
  collector,
  kvRelay,
  routing,
  flow,
  kv,
  decodeBench,
  xds,
];
