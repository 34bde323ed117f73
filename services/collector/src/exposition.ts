import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import { BudgetError, DEFAULT_SCRAPE_LIMITS, type ScrapeLimits } from './budget.js';

/** One sample of a metric family, its value already read as a number (NaN when unreadable). */
export interface Sample {
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
  readonly timestampMs: number | undefined;
}

/** Metric name → its samples, in exposition order. */
export type Exposition = ReadonlyMap<string, readonly Sample[]>;

export class ExpositionError extends Error {
  override readonly name = 'ExpositionError';
}

// The text format's value grammar: a Go float, or NaN / ±Inf. Anything else is a malformed line
// (the parser keeps values as text and accepts garbage, and an empty value would read as 0).
const VALUE = /^[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|Inf|inf|NaN|nan)$/;
// A metric name at the start of a sample line (the text format allows `:` in names).
const NAME = /^[A-Za-z_:][A-Za-z0-9_:]*/;

function readValue(text: string | undefined, name: string): number {
  if (text === undefined || !VALUE.test(text)) throw new ExpositionError(`${name}: value ${JSON.stringify(text ?? '')} is not a number`);
  return Number(text.replace(/^([+-]?)inf$/i, '$1Infinity').replace(/^nan$/i, 'NaN'));
}

/**
 * Keeps only the samples and `# TYPE` lines of the wanted families, from text fed in pieces as it
 * arrives, so a scrape never holds more of the exposition than one line plus what it keeps. A vLLM
 * exposition is mostly histograms and help texts the collector never reads, and the parser walks
 * its input one character at a time, so parsing only a handful of series keeps a 100 ms scrape of
 * hundreds of endpoints cheap. (`# HELP` lines are dropped too: long, and never read.)
 *
 * Throws BudgetError (`too-large`) for a line longer than `maxLineLength` or once the kept lines
 * exceed `maxKeptLength` characters or `maxKeptLines` lines.
 */
export class FamilyFilter {
  private partial = '';
  private readonly kept: string[] = [];
  private keptLength = 0;

  constructor(
    private readonly wanted: ReadonlySet<string>,
    private readonly limits: Pick<ScrapeLimits, 'maxLineLength' | 'maxKeptLength' | 'maxKeptLines'> = DEFAULT_SCRAPE_LIMITS,
  ) {}

  push(piece: string): void {
    const text = this.partial.length > 0 ? this.partial + piece : piece;
    let start = 0;
    for (let newline = text.indexOf('\n'); newline >= 0; newline = text.indexOf('\n', start)) {
      this.line(text, start, newline);
      start = newline + 1;
    }
    this.partial = start === 0 ? text : text.slice(start);
    if (this.partial.length > this.limits.maxLineLength) {
      throw new BudgetError('too-large', `a line of the exposition exceeds ${this.limits.maxLineLength} characters`);
    }
  }

  /** The kept lines, newline-terminated; the text must have been fed completely. */
  finish(): string {
    if (this.partial.length > 0) this.line(this.partial, 0, this.partial.length);
    this.partial = '';
    return this.kept.length === 0 ? '' : `${this.kept.join('\n')}\n`;
  }

  /** Looks at text[from, to) without copying it unless it is kept. */
  private line(text: string, from: number, to: number): void {
    let start = from;
    while (start < to && isBlank(text.charCodeAt(start))) start++;
    if (start === to) return;
    let nameStart = start;
    if (text.charCodeAt(start) === HASH) {
      if (!text.startsWith('# TYPE ', start)) return;
      nameStart = start + 7;
    }
    let nameEnd = nameStart;
    while (nameEnd < to) {
      const c = text.charCodeAt(nameEnd);
      if (c === OPEN_BRACE || isBlank(c)) break;
      nameEnd++;
    }
    if (!this.wanted.has(text.slice(nameStart, nameEnd))) return;
    const line = text.slice(start, to).trimEnd();
    this.keptLength += line.length + 1;
    this.kept.push(line);
    if (this.keptLength > this.limits.maxKeptLength || this.kept.length > this.limits.maxKeptLines) {
      throw new BudgetError('too-large', `more than ${this.limits.maxKeptLines} lines or ${this.limits.maxKeptLength} characters of wanted series`);
    }
  }
}

const HASH = 0x23;
const OPEN_BRACE = 0x7b;

function isBlank(c: number): boolean {
  return c === 0x20 || c === 0x09 || c === 0x0d;
}

/** The wanted families of a complete exposition text (see FamilyFilter). */
export function selectFamilies(text: string, wanted: ReadonlySet<string>, limits?: ScrapeLimits): string {
  const filter = new FamilyFilter(wanted, limits);
  filter.push(text);
  return filter.finish();
}

/**
 * Parses Prometheus text format with `parse-prometheus-text-format`, then checks what that lenient
 * parser lets through: a sample whose value is not a number, or a line it could not split into
 * name and value, makes the whole exposition malformed (ExpositionError).
 */
export function parseExposition(text: string): Exposition {
  // The parser drops the final sample when the text lacks a trailing newline.
  const input = text.endsWith('\n') ? text : `${text}\n`;
  let families;
  try {
    families = parsePrometheusTextFormat(input);
  } catch (error) {
    throw new ExpositionError((error as Error).message);
  }
  const out = new Map<string, Sample[]>();
  for (const family of families) {
    if (!NAME.test(family.name) || NAME.exec(family.name)?.[0] !== family.name) {
      throw new ExpositionError(`malformed metric name ${JSON.stringify(family.name)}`);
    }
    const samples = out.get(family.name) ?? [];
    for (const sample of family.metrics) {
      // Histogram and summary families come back flattened (buckets, count, sum): not gauges,
      // never read by the collector, so they are not checked further.
      if (sample.value === undefined && (sample.buckets || sample.quantiles || sample.count !== undefined || sample.sum !== undefined)) continue;
      const timestamp = sample.timestamp_ms === undefined ? undefined : Number(sample.timestamp_ms);
      if (timestamp !== undefined && !Number.isFinite(timestamp)) {
        throw new ExpositionError(`${family.name}: timestamp ${JSON.stringify(sample.timestamp_ms)} is not a number`);
      }
      samples.push({ labels: sample.labels ?? {}, value: readValue(sample.value, family.name), timestampMs: timestamp });
    }
    out.set(family.name, samples);
  }
  return out;
}
