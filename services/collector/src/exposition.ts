import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import { BudgetError, DEFAULT_SCRAPE_LIMITS, type ScrapeLimits } from './budget.js';
import { ExpositionError } from './exposition-error.js';
import { invalidLine, readSampleLine, type RawSample } from './sample-line.js';

/** One sample of a metric family, its value already read as a number (NaN when unreadable). */
export interface Sample {
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
  readonly timestampMs: number | undefined;
}

/** Metric name → its samples, in exposition order. */
export type Exposition = ReadonlyMap<string, readonly Sample[]>;

export { ExpositionError };

// The text format's value grammar: a Go float, or NaN / ±Inf. Anything else is a malformed line
// (the parser keeps values as text and accepts garbage, and an empty value would read as 0).
const VALUE = /^[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|Inf|inf|NaN|nan)$/;
// A metric name at the start of a sample line (the text format allows `:` in names).
const NAME = /^[A-Za-z_:][A-Za-z0-9_:]*/;
// A whole metric name: what NAME matching all of a name says, in one match.
const WHOLE_NAME = /^[A-Za-z_:][A-Za-z0-9_:]*$/;

/**
 * Names already seen to be well formed: a scrape's families are the same few names every time,
 * and checking them twice by regex on every scrape was a tenth of its parse. Bounded (a server
 * inventing names must not grow it): past the bound, names are checked afresh.
 */
const goodNames = new Set<string>();
/** Characters the remembered names may hold in all (a real engine's names are a few dozen of ~40). */
const MAX_GOOD_NAME_CHARS = 64 * 1024;
/** A longer name is checked every time, never remembered. */
const MAX_REMEMBERED_NAME = 256;
let goodNameChars = 0;

function wellFormedName(name: string): boolean {
  if (goodNames.has(name)) return true;
  if (!WHOLE_NAME.test(name)) return false;
  if (name.length <= MAX_REMEMBERED_NAME && goodNameChars + name.length <= MAX_GOOD_NAME_CHARS) {
    goodNames.add(name);
    goodNameChars += name.length;
  }
  return true;
}

function readValue(text: string | undefined, name: string): number {
  if (text === undefined || !VALUE.test(text)) throw new ExpositionError(`${name}: value ${JSON.stringify(text ?? '')} is not a number`);
  // Past the grammar check a value ending in `f` is (±)Inf; everything else, NaN included, reads as is.
  if (text.charCodeAt(text.length - 1) === 0x66) return text.charCodeAt(0) === 0x2d ? Number.NEGATIVE_INFINITY : Number.POSITIVE_INFINITY;
  return Number(text);
}

/**
 * Keeps only the samples and `# TYPE` lines of the wanted families, from text fed in pieces as it
 * arrives, so a scrape never holds more of the exposition than one line plus what it keeps. A vLLM
 * exposition is mostly histograms and help texts the collector never reads, and the parser walks
 * its input one character at a time, so parsing only a handful of series keeps a 100 ms scrape of
 * hundreds of endpoints cheap. (`# HELP` lines are dropped too: long, and never read.)
 *
 * With a `sink` (a KeptParser), each kept line is handed over as it is found instead of being
 * kept: the scrape path parses lines as they come, and never joins them into a text to split
 * again. The limits count the same lines either way.
 *
 * Throws BudgetError (`too-large`) for a line longer than `maxLineLength` or once the kept lines
 * exceed `maxKeptLength` characters or `maxKeptLines` lines.
 */
export class FamilyFilter {
  private partial = '';
  private readonly kept: string[] = [];
  private keptLines = 0;
  private keptLength = 0;
  private readonly lengths: ReadonlySet<number>;
  // Where the next name-ending character is in the text being read (see NextOf).
  private readonly brace = new NextOf('{');
  private readonly space = new NextOf(' ');
  private readonly tab = new NextOf('\t');
  private readonly cr = new NextOf('\r');

  constructor(
    private readonly wanted: ReadonlySet<string>,
    private readonly limits: Pick<ScrapeLimits, 'maxLineLength' | 'maxKeptLength' | 'maxKeptLines'> = DEFAULT_SCRAPE_LIMITS,
    private readonly sink?: { line(line: string): void },
  ) {
    this.lengths = nameLengths(wanted);
  }

  push(piece: string): void {
    const text = this.partial.length > 0 ? this.partial + piece : piece;
    this.reset(text);
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

  /** The kept lines, newline-terminated ('' with a sink, which has had them); the text must have been fed completely. */
  finish(): string {
    if (this.partial.length > 0) {
      this.reset(this.partial);
      this.line(this.partial, 0, this.partial.length);
    }
    this.partial = '';
    return this.kept.length === 0 ? '' : `${this.kept.join('\n')}\n`;
  }

  private reset(text: string): void {
    this.brace.reset(text);
    this.space.reset(text);
    this.tab.reset(text);
    this.cr.reset(text);
  }

  /**
   * Looks at text[from, to) without copying it unless it is kept. The name runs to the first `{`
   * or blank; it is found with native searches rather than a loop over its characters (a loop
   * costs a few ns a character, and names are most of what is looked at), and a name of a length
   * no wanted name has is not even sliced.
   */
  private line(text: string, from: number, to: number): void {
    let start = from;
    while (start < to && isBlank(text.charCodeAt(start))) start++;
    if (start === to) return;
    let nameStart = start;
    if (text.charCodeAt(start) === HASH) {
      if (!text.startsWith('# TYPE ', start)) return;
      nameStart = start + 7;
    }
    const nameEnd = Math.min(to, this.brace.from(nameStart), this.space.from(nameStart), this.tab.from(nameStart), this.cr.from(nameStart));
    if (!this.lengths.has(nameEnd - nameStart) || !this.wanted.has(text.slice(nameStart, nameEnd))) return;
    const line = text.slice(start, to).trimEnd();
    this.keptLength += line.length + 1;
    this.keptLines++;
    if (this.sink !== undefined) this.sink.line(line);
    else this.kept.push(line);
    if (this.keptLength > this.limits.maxKeptLength || this.keptLines > this.limits.maxKeptLines) {
      throw new BudgetError(
        'too-large',
        `more than ${this.limits.maxKeptLines} lines or ${this.limits.maxKeptLength} characters of wanted series`,
      );
    }
  }
}

const HASH = 0x23;

/**
 * The next position of one character in a text, at or after a point (the text's length when
 * there is none). Points only move forward through a text, and a search starts where the previous
 * one found its character, so one pass over a text costs one native scan per character sought
 * however many lines ask — never a scan to the text's end for every line (a body of lines without
 * `{`, say).
 */
class NextOf {
  private text = '';
  private at = -1;

  constructor(private readonly char: string) {}

  reset(text: string): void {
    this.text = text;
    this.at = -1;
  }

  from(position: number): number {
    if (this.at < position) {
      const found = this.text.indexOf(this.char, position);
      this.at = found < 0 ? this.text.length : found;
    }
    return this.at;
  }
}

/** The lengths of the wanted names, remembered per wanted set (a handful of sets: one per engine, and all engines'). */
const lengthsOf = new WeakMap<ReadonlySet<string>, ReadonlySet<number>>();

function nameLengths(wanted: ReadonlySet<string>): ReadonlySet<number> {
  let lengths = lengthsOf.get(wanted);
  if (lengths === undefined) {
    lengths = new Set([...wanted].map((name) => name.length));
    lengthsOf.set(wanted, lengths);
  }
  return lengths;
}

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
      if (sample.value === undefined && (sample.buckets || sample.quantiles || sample.count !== undefined || sample.sum !== undefined))
        continue;
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

/**
 * The same result as `parseExposition`, for the few lines a scrape keeps (FamilyFilter), without
 * the general parser's cost: it splits the text into lines and walks each one character at a
 * time, building every name and value by concatenation, which made parsing the most expensive step
 * of a scrape. This reads the same grammar with the same (lenient) rules — a faithful port of
 * `parse-prometheus-text-format` followed by parseExposition's checks: families start where the
 * metric name changes (a histogram's or summary's `_sum`, `_count` and `_bucket` lines stay in its
 * family), a sample whose labels equal the previous one's is merged into it, the same malformed
 * lines are rejected — but slices the text instead of copying it a character at a time. Tests
 * check both agree on every fixture and on generated expositions.
 */
export function parseKept(text: string, readLine: (line: string) => RawSample = readSampleLine): Exposition {
  const parser = new KeptParser(readLine);
  // As parseExposition: a final newline is supplied, and the empty line after it ends the last family.
  const input = text.endsWith('\n') ? text : `${text}\n`;
  for (let start = 0; ;) {
    const newline = input.indexOf('\n', start);
    if (newline < 0) break;
    parser.line(input.slice(start, newline).trim());
    start = newline + 1;
  }
  return parser.finish();
}

/**
 * parseKept's reading, one line at a time, so the lines a FamilyFilter keeps can be parsed as
 * they are found instead of being joined into a text and split again. Lines come trimmed.
 *
 * As in the general parser, every line is read before any family is checked: a rejected line is
 * the error reported even when an earlier family also has a malformed name or value. And since a
 * scrape's filter must still see the whole exposition (a budget error there wins over a malformed
 * line, as when the kept text was parsed after filtering), a rejected line is remembered, not
 * thrown: finish() throws it. Lines after it are not parsed.
 */
export class KeptParser {
  private readonly families: Family[] = [];
  /** `readLine`: how a sample line is read (the general state machine alone, for the plain version). */
  constructor(private readonly readLine: (line: string) => RawSample = readSampleLine) {}

  private family: Family | undefined;
  private rejected: ExpositionError | undefined;

  line(line: string): void {
    if (this.rejected !== undefined) return;
    try {
      this.read(line);
    } catch (error) {
      if (!(error instanceof ExpositionError)) throw error;
      this.rejected = error;
    }
  }

  /** The exposition of the lines read; throws ExpositionError (the first rejected line's, else a malformed family's). */
  finish(): Exposition {
    if (this.rejected !== undefined) throw this.rejected;
    const family = this.family;
    if (family !== undefined && family.name) this.families.push(family);
    this.family = undefined;
    const out = new Map<string, Sample[]>();
    for (const each of this.families) emit(each, out);
    return out;
  }

  private read(line: string): void {
    let lineMetric: string | null = null;
    let lineType: string | null = null;
    let sample: RawSample | null = null;
    if (line.length === 0) {
      // blank
    } else if (line.startsWith('# ')) {
      const isHelp = line.startsWith('HELP ', 2);
      if (isHelp || line.startsWith('TYPE ', 2)) {
        const data = line.slice(7);
        const space = data.indexOf(' ');
        if (space < 0) throw invalidLine(line);
        lineMetric = data.slice(0, space);
        const remain = data.slice(space + 1);
        if (!isHelp) {
          if (remain.includes(' ')) throw invalidLine(line);
          lineType = remain.toUpperCase();
        }
      }
    } else {
      sample = this.readLine(line);
      lineMetric = sample.name;
    }
    let family = this.family;
    if (family !== undefined && lineMetric === family.name && family.type === null && lineType) family.type = lineType;
    if (lineMetric && !(family !== undefined && allowed(family, lineMetric))) {
      if (family !== undefined && family.name) this.families.push(family);
      family = { name: lineMetric, type: lineType || null, samples: [] };
      this.family = family;
    }
    if (sample !== null && family !== undefined) addSample(family, sample);
  }
}

interface Family {
  name: string | null;
  type: string | null;
  samples: RawSample[];
}

function allowed(family: Family, name: string): boolean {
  if (name === family.name) return true;
  const type = family.type;
  if (type !== 'SUMMARY' && type !== 'HISTOGRAM') return false;
  return name === `${family.name}_count` || name === `${family.name}_sum` || (type === 'HISTOGRAM' && name === `${family.name}_bucket`);
}

function addSample(family: Family, sample: RawSample): void {
  if (sample.name !== family.name) {
    const type = family.type;
    if (type === 'SUMMARY' || type === 'HISTOGRAM') {
      if (sample.name === `${family.name}_count`) sample.count = sample.value;
      else if (sample.name === `${family.name}_sum`) sample.sum = sample.value;
    }
    if (type === 'HISTOGRAM' && sample.name === `${family.name}_bucket`) sample.bucket = sample.value;
    sample.value = undefined;
  }
  const previous = family.samples[family.samples.length - 1];
  if (previous !== undefined && sameLabels(sample.labels, previous.labels)) {
    // Merged into the previous sample, as the general parser does: what this line has wins.
    if (sample.value !== undefined) previous.value = sample.value;
    if (sample.count !== undefined) previous.count = sample.count;
    if (sample.sum !== undefined) previous.sum = sample.sum;
    if (sample.bucket !== undefined) previous.bucket = sample.bucket;
    if (sample.timestamp !== undefined) previous.timestamp = sample.timestamp;
  } else {
    family.samples.push(sample);
  }
}

function sameLabels(a: Record<string, string> | undefined, b: Record<string, string> | undefined): boolean {
  if (a === b) return true;
  if (a === undefined || b === undefined) return false;
  const keys = Object.keys(a);
  if (Object.keys(b).length !== keys.length) return false;
  for (const key of keys) if (a[key] !== b[key] || !Object.hasOwn(b, key)) return false;
  return true;
}

/**
 * A histogram or summary family folded as the general parser folds it: into one entry without a
 * value, when any of its samples is a bucket (or quantile) or has no labels at all; undefined
 * when it is not folded (its samples are then read one by one).
 */
function folded(family: Family): { grouped: boolean; count: string | undefined; sum: string | undefined } | undefined {
  const type = family.type;
  if (type !== 'SUMMARY' && type !== 'HISTOGRAM') return undefined;
  const key = type === 'SUMMARY' ? 'quantile' : 'le';
  let out: { grouped: boolean; count: string | undefined; sum: string | undefined } | undefined;
  for (const sample of family.samples) {
    const grouping = type === 'SUMMARY' ? sample.value : sample.bucket;
    if (sample.labels !== undefined && sample.labels[key] && grouping) {
      out ??= { grouped: false, count: undefined, sum: undefined };
      out.grouped = true;
    } else if (sample.labels === undefined) {
      out ??= { grouped: false, count: undefined, sum: undefined };
      if (sample.count !== undefined) out.count = sample.count;
      if (sample.sum !== undefined) out.sum = sample.sum;
    }
  }
  return out;
}

/** Checks and converts one family as parseExposition does, appending to its name's samples. */
function emit(family: Family, out: Map<string, Sample[]>): void {
  const name = family.name as string;
  if (!wellFormedName(name)) throw new ExpositionError(`malformed metric name ${JSON.stringify(name)}`);
  const samples = out.get(name) ?? [];
  const fold = folded(family);
  if (fold !== undefined) {
    // Histogram and summary families are never read by the collector: nothing of them is kept,
    // but a folded entry with nothing in it has no value, which is malformed.
    if (!fold.grouped && fold.count === undefined && fold.sum === undefined) readValue(undefined, name);
  } else {
    for (const sample of family.samples) {
      if (sample.value === undefined && (sample.count !== undefined || sample.sum !== undefined)) continue;
      const timestamp = sample.timestamp === undefined ? undefined : Number(sample.timestamp);
      if (timestamp !== undefined && !Number.isFinite(timestamp))
        throw new ExpositionError(`${name}: timestamp ${JSON.stringify(sample.timestamp)} is not a number`);
      samples.push({ labels: sample.labels ?? {}, value: readValue(sample.value, name), timestampMs: timestamp });
    }
  }
  out.set(name, samples);
}
