/**
 * The demo's numbers and how they are printed: per-zone windows of request outcomes, the table
 * printed every second and the summary per phase and zone. Pure (no clock, no I/O) so it is unit-tested.
 */

/** What one finished request contributes, already attributed to zones. */
export interface Attributed {
  /** HTTP status; 0 when no response arrived. */
  status: number;
  ttftMs?: number;
  /** Zone of the model server that answered (from `x-spillway-served-endpoint`). */
  servedZone?: string;
  attempts: number;
  broken?: boolean;
}

/** Outcomes of one zone's requests (by the gateway they were sent to) over some window. */
export interface ZoneWindow {
  finished: number;
  ok: number;
  ttfts: number[];
  /** Successful requests served by a model server in the zone itself. */
  inZone: number;
  /** Successful requests served in another zone. */
  spilled: number;
  /** Requests the gateway needed more than one attempt for (it walked the EPP's fallback list). */
  fallbacks: number;
  s429: number;
  s503: number;
  /** Everything else that failed: other statuses, no response, a stream cut short. */
  errors: number;
  /** Arrivals the driver did not send because too many requests were already in flight. */
  shed: number;
  /** Successful requests by serving zone. */
  servedBy: Record<string, number>;
}

export function emptyWindow(): ZoneWindow {
  return { finished: 0, ok: 0, ttfts: [], inZone: 0, spilled: 0, fallbacks: 0, s429: 0, s503: 0, errors: 0, shed: 0, servedBy: {} };
}

export function record(window: ZoneWindow, zone: string, outcome: Attributed): void {
  window.finished++;
  if (outcome.attempts > 1) window.fallbacks++;
  if (outcome.status >= 200 && outcome.status < 300 && !outcome.broken) {
    window.ok++;
    if (outcome.ttftMs !== undefined) window.ttfts.push(outcome.ttftMs);
    if (outcome.servedZone !== undefined) {
      window.servedBy[outcome.servedZone] = (window.servedBy[outcome.servedZone] ?? 0) + 1;
      if (outcome.servedZone === zone) window.inZone++;
      else window.spilled++;
    }
  } else if (outcome.status === 429) window.s429++;
  else if (outcome.status === 503) window.s503++;
  else window.errors++;
}

/** Nearest-rank percentile (p in 0..100) of unsorted values; undefined when empty. */
export function percentile(values: readonly number[], p: number): number | undefined {
  if (values.length === 0) return undefined;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil((p / 100) * sorted.length)));
  return sorted[rank - 1];
}

export interface Style {
  color: boolean;
}

const ansi = (code: string) => (style: Style, text: string) => (style.color ? `\x1b[${code}m${text}\x1b[0m` : text);
const bold = ansi('1');
const dim = ansi('2');
const yellow = ansi('33');
const red = ansi('31');
const green = ansi('32');

/** Pads to width first, then colors, so columns line up with and without escape codes. */
function cell(text: string, width: number, paint?: (s: Style, t: string) => string, style?: Style, left = false): string {
  const padded = left ? text.padEnd(width) : text.padStart(width);
  return paint && style ? paint(style, padded) : padded;
}

const ms = (value: number | undefined) => (value === undefined ? '-' : String(Math.round(value)));
const pct = (part: number, whole: number) => (whole === 0 ? '-' : `${Math.round((100 * part) / whole)}%`);

const TICK_COLUMNS: Array<[string, number, boolean?]> = [
  ['t', 4],
  ['phase', 10, true],
  ['zone', 7, true],
  ['sat/rdy', 7],
  ['req/s', 6],
  ['p50ms', 6],
  ['p99ms', 6],
  ['in-zone', 7],
  ['spilled', 7],
  ['fallbk', 6],
  ['429', 4],
  ['503', 4],
  ['err', 4],
  ['shed', 4],
];

/** A zone's pods as its own EPP sees them: ready, and of those saturated (or stale). */
export interface ZonePods {
  ready: number;
  saturated: number;
}

/**
 * Reads `spillway_zone_ready_pods` and `spillway_zone_saturated_pods` for one zone from an EPP's
 * Prometheus text. A zone with no ready pod has no series: 0/0.
 */
export function zonePodsFromMetrics(text: string, zone: string): ZonePods {
  const value = (name: string) => {
    for (const line of text.split('\n')) {
      const m = /^(\w+)\{([^}]*)\}\s+(\S+)/.exec(line);
      if (m?.[1] === name && (m[2] ?? '').split(',').some((label) => label.trim() === `zone="${zone}"`)) return Number(m[3]);
    }
    return 0;
  };
  return { ready: value('spillway_zone_ready_pods'), saturated: value('spillway_zone_saturated_pods') };
}

/** The model servers' own prefix-cache counters (vLLM's names): prompt tokens looked up and found cached. */
export interface PrefixCacheTotals {
  hits: number;
  queries: number;
}

/** Sums `vllm:prefix_cache_hits_total` and `vllm:prefix_cache_queries_total` over every series of one server's /metrics. */
export function prefixCacheFromMetrics(text: string): PrefixCacheTotals {
  const totals = { hits: 0, queries: 0 };
  for (const line of text.split('\n')) {
    const m = /^vllm:prefix_cache_(hits|queries)_total(?:\{[^}]*\})?\s+(\S+)/.exec(line);
    const value = Number(m?.[2]);
    if (m && Number.isFinite(value)) totals[m[1] as 'hits' | 'queries'] += value;
  }
  return totals;
}

/**
 * What the servers' counters grew by between two readings of each server. A server restarted in
 * between (its counters reset) counts from zero; one that did not answer a reading counts nothing.
 */
export function prefixCacheDelta(
  before: readonly (PrefixCacheTotals | undefined)[],
  after: readonly (PrefixCacheTotals | undefined)[],
): PrefixCacheTotals {
  const total = { hits: 0, queries: 0 };
  after.forEach((end, i) => {
    if (end === undefined) return;
    const start = before[i];
    const reset = start === undefined || end.queries < start.queries || end.hits < start.hits;
    total.hits += reset ? end.hits : end.hits - start.hits;
    total.queries += reset ? end.queries : end.queries - start.queries;
  });
  return total;
}

/** The summary's line on the prefix cache. */
export function formatPrefixCache(totals: PrefixCacheTotals, kvEvents: boolean): string {
  const rate = totals.queries > 0 ? `${((100 * totals.hits) / totals.queries).toFixed(1)}%` : 'n/a';
  return (
    `Prefix cache (the model servers' own counters): ${rate} of prompt tokens were cached (${totals.hits} of ${totals.queries}); ` +
    (kvEvents
      ? "EPPs routed by the servers' KV events (precise)."
      : 'EPPs routed by their own prefix guesses (approximate); compare with --kv-events.')
  );
}

function header(columns: Array<[string, number, boolean?]>, style: Style): string {
  return dim(
    style,
    columns
      .map(([name, width, left]) => (left ? name.padEnd(width) : name.padStart(width)))
      .join(' ')
      .trimEnd(),
  );
}

export function tickHeader(style: Style): string {
  return header(TICK_COLUMNS, style);
}

/**
 * One second of the demo: a line per zone, the time and phase on the first. `seconds` is the
 * window length (for req/s); `pods` the zone's saturated/ready pods per its EPP (`?` if unknown).
 */
export function formatTick(
  tSeconds: number,
  phase: string,
  rows: ReadonlyArray<{ zone: string; window: ZoneWindow; pods?: ZonePods | undefined }>,
  seconds: number,
  style: Style,
): string[] {
  return rows.map(({ zone, window: w, pods }, i) => {
    const served = w.inZone + w.spilled;
    const podsText = pods ? `${pods.saturated}/${pods.ready}` : '?';
    const busy = pods !== undefined && (pods.ready === 0 || pods.saturated === pods.ready);
    const cells = [
      cell(i === 0 ? String(Math.round(tSeconds)) : '', 4),
      cell(i === 0 ? phase : '', 10, bold, style, true),
      cell(zone, 7, undefined, undefined, true),
      cell(podsText, 7, busy ? yellow : undefined, style),
      cell((w.finished / Math.max(seconds, 1e-3)).toFixed(1), 6),
      cell(ms(percentile(w.ttfts, 50)), 6),
      cell(ms(percentile(w.ttfts, 99)), 6),
      cell(pct(w.inZone, served), 7, served > 0 && w.inZone === served ? green : undefined, style),
      cell(String(w.spilled), 7, w.spilled > 0 ? yellow : undefined, style),
      cell(String(w.fallbacks), 6, w.fallbacks > 0 ? yellow : undefined, style),
      cell(String(w.s429), 4, w.s429 > 0 ? red : undefined, style),
      cell(String(w.s503), 4, w.s503 > 0 ? red : undefined, style),
      cell(String(w.errors), 4, w.errors > 0 ? red : undefined, style),
      cell(String(w.shed), 4, w.shed > 0 ? red : undefined, style),
    ];
    return cells.join(' ').trimEnd();
  });
}

/** `zone-a` -> `a`, for the compact "served in" column. */
export function shortZone(zone: string): string {
  return zone.replace(/^zone-/, '');
}

export interface SummaryRow {
  phase: string;
  zone: string;
  window: ZoneWindow;
  /** Length of the phase as played, seconds. */
  seconds: number;
}

/**
 * The end-of-run table: one line per phase and zone, with where its requests were served. `err`
 * here includes arrivals shed by the driver.
 */
export function formatSummary(rows: readonly SummaryRow[], zones: readonly string[], style: Style): string[] {
  const servedTitle = `served ${zones.map(shortZone).join('/')}`;
  const columns: Array<[string, number, boolean?]> = [
    ['phase', 10, true],
    ['zone', 7, true],
    ['reqs', 5],
    ['req/s', 5],
    ['ok', 4],
    ['p50ms', 5],
    ['p99ms', 5],
    ['in-zone', 7],
    ['spilled', 7],
    ['fallbk', 6],
    ['429', 4],
    ['503', 4],
    ['err', 4],
    [servedTitle, 0, true],
  ];
  const lines = [header(columns, style)];
  let lastPhase = '';
  for (const { phase, zone, window: w, seconds } of rows) {
    const served = w.inZone + w.spilled;
    const failed = w.s429 + w.s503 + w.errors;
    lines.push(
      [
        cell(phase === lastPhase ? '' : phase, 10, bold, style, true),
        cell(zone, 7, undefined, undefined, true),
        cell(String(w.finished), 5),
        cell((w.finished / Math.max(seconds, 1e-3)).toFixed(1), 5),
        cell(pct(w.ok, w.finished), 4, failed > 0 ? red : undefined, style),
        cell(ms(percentile(w.ttfts, 50)), 5),
        cell(ms(percentile(w.ttfts, 99)), 5),
        cell(pct(w.inZone, served), 7),
        cell(String(w.spilled), 7, w.spilled > 0 ? yellow : undefined, style),
        cell(String(w.fallbacks), 6, w.fallbacks > 0 ? yellow : undefined, style),
        cell(String(w.s429), 4),
        cell(String(w.s503), 4),
        cell(String(w.errors + w.shed), 4),
        zones.map((z) => String(w.servedBy[z] ?? 0)).join('/'),
      ].join(' '),
    );
    lastPhase = phase;
  }
  return lines;
}

/** Sums windows (e.g. the seconds of a phase). */
export function mergeWindows(into: ZoneWindow, from: ZoneWindow): ZoneWindow {
  into.finished += from.finished;
  into.ok += from.ok;
  for (const t of from.ttfts) into.ttfts.push(t);
  into.inZone += from.inZone;
  into.spilled += from.spilled;
  into.fallbacks += from.fallbacks;
  into.s429 += from.s429;
  into.s503 += from.s503;
  into.errors += from.errors;
  into.shed += from.shed;
  for (const [zone, n] of Object.entries(from.servedBy)) into.servedBy[zone] = (into.servedBy[zone] ?? 0) + n;
  return into;
}
