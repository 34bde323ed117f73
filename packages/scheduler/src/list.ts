import type { Ranking } from './rank.js';
import type { TopK } from './top-k.js';

export interface ListInput {
  readonly maxEndpoints: number;
  readonly crossZoneFallbacks: number;
  readonly ranking: Ranking;
  readonly keys: Float64Array;
  readonly tiers: Uint8Array;
  /** Canonical address of candidate i (two pods may share one: a stale pod and its successor). */
  address(index: number): string;
}

/**
 * Step 3 of a pick (picking v2, steps 2–3): which candidates the list holds, primary first.
 *
 * The primary is the cheapest candidate; the other slots go to the next cheapest, except that the
 * list holds at least `crossZoneFallbacks` remote entries when any remote candidate is eligible
 * (so a retry can leave a failing zone) and, when the primary is remote, the cheapest local one (so
 * a spilled request can still come home). Entries after the primary are in key order, and no
 * address appears twice. Returns the candidate indexes in `out`.
 */
export function chooseList(input: ListInput, out: number[]): void {
  out.length = 0;
  const { ranking, keys, tiers } = input;
  const max = input.maxEndpoints;
  const overall = ranking.overall;
  if (overall.size === 0) return;
  const primary = overall.index[0] as number;
  out.push(primary);
  if (max === 1) return;

  const primaryLocal = tiers[primary] === 0;
  // Required entries, capped so they never take more than the slots after the primary.
  const wantRemote = Math.min(input.crossZoneFallbacks - (primaryLocal ? 0 : 1), max - 1);
  const wantLocal = primaryLocal ? 0 : 1;
  const required = REQUIRED;
  required.length = 0;
  takeFrom(ranking.local, wantLocal, input, out, required);
  takeFrom(ranking.remote, Math.min(wantRemote, max - 1 - required.length), input, out, required);

  // The next cheapest fill what the required entries leave.
  for (let i = 1; i < overall.size && out.length + required.length < max; i++) {
    const candidate = overall.index[i] as number;
    if (!admissible(candidate, input, out, required)) continue;
    out.push(candidate);
  }
  for (const candidate of required) out.push(candidate);
  // Primary first, the rest cheapest first: an insertion sort in place (a list holds a few entries;
  // Array.prototype.sort with a comparator allocated on every pick).
  for (let i = 2; i < out.length; i++) {
    const candidate = out[i] as number;
    const key = keys[candidate] as number;
    let j = i - 1;
    while (j >= 1 && (keys[out[j] as number] as number) > key) {
      out[j + 1] = out[j] as number;
      j--;
    }
    out[j + 1] = candidate;
  }
}

/** Scratch for chooseList's required entries (a pick runs alone: nothing else uses it meanwhile). */
const REQUIRED: number[] = [];

function takeFrom(top: TopK, want: number, input: ListInput, out: number[], required: number[]): void {
  for (let i = 0; i < top.size && want > 0; i++) {
    const candidate = top.index[i] as number;
    // The primary is already counted in `want`; an address already listed is skipped.
    if (!admissible(candidate, input, out, required)) continue;
    required.push(candidate);
    want--;
  }
}

/** Not listed yet, and no listed entry has its address. */
function admissible(candidate: number, input: ListInput, out: number[], required: number[]): boolean {
  if (out.includes(candidate) || required.includes(candidate)) return false;
  const address = input.address(candidate);
  for (const other of out) if (input.address(other) === address) return false;
  for (const other of required) if (input.address(other) === address) return false;
  return true;
}
