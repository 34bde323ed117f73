import parsePrometheusTextFormat from 'parse-prometheus-text-format';

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
 * Keeps only the samples and `# TYPE` lines of the wanted families. A vLLM exposition is mostly
 * histograms and help texts the collector never reads, and the parser walks its input one
 * character at a time, so parsing only a handful of gauges keeps a 100 ms scrape of hundreds of
 * endpoints cheap. (`# HELP` lines are dropped too: long, and never read.)
 */
export function selectFamilies(text: string, wanted: ReadonlySet<string>): string {
  const kept: string[] = [];
  for (const line of text.split('\n')) {
    const trimmed = line.trim();
    let name: string;
    if (trimmed.startsWith('#')) {
      if (!trimmed.startsWith('# TYPE ')) continue;
      const end = trimmed.indexOf(' ', 7);
      name = trimmed.slice(7, end < 0 ? undefined : end);
    } else {
      const brace = trimmed.indexOf('{');
      const space = trimmed.search(/[ \t]/);
      const end = brace >= 0 && (space < 0 || brace < space) ? brace : space;
      name = end < 0 ? trimmed : trimmed.slice(0, end);
    }
    if (wanted.has(name)) kept.push(trimmed);
  }
  return kept.join('\n');
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
