import type { BenchPart } from './part.js';

/** Every part of `npm run bench`, in the order they run and appear in BENCHMARKS.md. */
export const parts: BenchPart[] = [];
