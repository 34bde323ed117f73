import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { FamilyFilter, KeptParser, parseExposition, parseKept, selectFamilies, type Exposition } from '../src/exposition.js';
import { fastSampleLine, parseSampleLine } from '../src/sample-line.js';
import { ALL_FAMILIES, ENGINE_FAMILIES } from '../src/families.js';

/**
 * The scrape path parses the kept lines with parseKept; parseExposition (the general
 * `parse-prometheus-text-format` parser plus its checks) is the reference. They must agree on
 * everything: the same samples, or the same rejection.
 */
type Outcome = { ok: [string, Exposition extends ReadonlyMap<string, infer V> ? V : never][] } | { error: string };

function outcome(parse: (text: string) => Exposition, text: string): Outcome {
  try {
    return { ok: [...parse(text)] };
  } catch (error) {
    return { error: `${(error as Error).name}: ${(error as Error).message}` };
  }
}

function expectAgree(text: string): void {
  expect(outcome(parseKept, text)).toEqual(outcome(parseExposition, text));
}

const fixturesDir = join(import.meta.dirname, 'fixtures');
const fixtures = readdirSync(fixturesDir).filter((name) => name.endsWith('.prom'));
const familySets: [string, ReadonlySet<string>][] = [...Object.entries(ENGINE_FAMILIES), ['all engines', ALL_FAMILIES]];

describe('the fast family parse equals the full parser', () => {
  it('has real-format fixtures of every engine to check', () => {
    expect(fixtures).toEqual(
      expect.arrayContaining(['vllm-v0.10.prom', 'vllm-v0.6.prom', 'vllm-dp2.prom', 'sglang.prom', 'trtllm.prom', 'triton.prom']),
    );
  });

  for (const name of fixtures) {
    it(`${name}: the kept families of each engine, and the whole exposition`, () => {
      const text = readFileSync(join(fixturesDir, name), 'utf8');
      for (const [, wanted] of familySets) {
        const kept = selectFamilies(text, wanted);
        expectAgree(kept);
        // The mapped families are really there (the comparison is not of two empty maps).
        if (wanted === ALL_FAMILIES) expect(parseKept(kept).size).toBeGreaterThan(2);
      }
      expectAgree(text);
    });
  }

  // Generated expositions: families of every type, help and comment lines, labels with escapes,
  // every value form, timestamps, repeated label sets (merged), tabs and blank lines.
  const nameArb = fc.constantFrom(
    'a',
    'b_total',
    'vllm:num_requests_waiting',
    'h',
    'h_sum',
    'h_count',
    'h_bucket',
    's',
    's_sum',
    's_count',
    'x:y_z',
  );
  const labelValueArb = fc
    .stringMatching(/^[a-z0-9 ."\\\n{},=é]{0,8}$/)
    .map((v) => v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n'));
  const labelsArb = fc.array(fc.tuple(fc.constantFrom('le', 'quantile', 'model', 'engine', 'a_b'), labelValueArb), { maxLength: 3 });
  const valueArb = fc.oneof(
    fc.integer({ min: -5, max: 1e6 }).map(String),
    fc.double({ noNaN: true, noDefaultInfinity: true }).map(String),
    fc.constantFrom('NaN', '+Inf', '-Inf', 'inf', 'nan', '1e3', '.5', '2.', '1x', '', '0x10'),
  );
  const spaceArb = fc.constantFrom(' ', '\t', '  ');
  const sampleArb = fc
    .record({
      name: nameArb,
      labels: fc.option(labelsArb, { nil: undefined }),
      value: valueArb,
      timestamp: fc.option(fc.oneof(fc.integer({ min: 0, max: 2e12 }).map(String), fc.constantFrom('abc', '1e400')), { nil: undefined }),
      space: spaceArb,
      trailing: fc.constantFrom('', ' ', '\t', '\r'),
      afterComma: fc.constantFrom('', ' '),
    })
    .map(({ name, labels, value, timestamp, space, trailing, afterComma }) => {
      const braces = labels === undefined ? '' : `{${labels.map(([k, v]) => `${k}="${v}"`).join(`,${afterComma}`)}}`;
      return `${name}${braces}${space}${value}${timestamp === undefined ? '' : `${space}${timestamp}`}${trailing}`;
    });
  const metaArb = fc.oneof(
    fc
      .tuple(nameArb, fc.constantFrom('gauge', 'counter', 'histogram', 'summary', 'untyped', 'GAUGE', ''))
      .map(([n, t]) => `# TYPE ${n} ${t}`),
    nameArb.map((n) => `# HELP ${n} Some help \\n with \\\\ escapes`),
    fc.constantFrom('# a comment', '#', '', '   ', '# TYPE broken', '# HELP'),
  );
  const lineArb = fc.oneof({ weight: 4, arbitrary: sampleArb }, { weight: 2, arbitrary: metaArb });

  it('agrees on generated expositions (same samples or the same rejection)', () => {
    fc.assert(
      fc.property(fc.array(lineArb, { maxLength: 24 }), fc.boolean(), (lines, finalNewline) => {
        expectAgree(lines.join('\n') + (finalNewline ? '\n' : ''));
      }),
      { numRuns: 2000, seed: 16 },
    );
  });

  it('agrees on generated expositions after their wanted families are kept (what a scrape parses)', () => {
    const wanted = new Set(['a', 'b_total', 'h_sum', 'h_count', 'vllm:num_requests_waiting']);
    fc.assert(
      fc.property(fc.array(lineArb, { maxLength: 24 }), (lines) => {
        expectAgree(selectFamilies(`${lines.join('\n')}\n`, wanted));
      }),
      { numRuns: 1000, seed: 17 },
    );
  });

  it('agrees on damaged lines (any characters of the grammar, in any order)', () => {
    const garbage = fc.stringMatching(/^[a-z_:{}=",\\ \t0-9.#\n+-]{0,40}$/);
    fc.assert(
      fc.property(fc.array(garbage, { maxLength: 6 }), (lines) => {
        expectAgree(lines.join('\n'));
      }),
      { numRuns: 3000, seed: 18 },
    );
  });

  type Limits = ConstructorParameters<typeof FamilyFilter>[1];

  /** Feeds `text` to `filter` cut at `cuts` (as a body arrives in chunks), then finishes it. */
  function feed(filter: FamilyFilter, text: string, cuts: number[]): string {
    let from = 0;
    for (const at of [...new Set(cuts)].sort((a, b) => a - b).filter((at) => at <= text.length)) {
      filter.push(text.slice(from, at));
      from = at;
    }
    filter.push(text.slice(from));
    return filter.finish();
  }

  function caught(work: () => Exposition): Outcome {
    try {
      return { ok: [...work()] };
    } catch (error) {
      return { error: `${(error as Error).name}: ${(error as Error).message}` };
    }
  }

  /** What the scrape path does once the engine is known: kept lines parsed as the filter finds them. */
  function streamed(text: string, wanted: ReadonlySet<string>, cuts: number[], limits?: Limits): Outcome {
    return caught(() => {
      const parser = new KeptParser();
      feed(new FamilyFilter(wanted, limits, parser), text, cuts);
      return parser.finish();
    });
  }

  /** The plain version, in the same pieces: filter to a text, then parseKept (itself held to the general parser above). */
  function filteredThenParsed(text: string, wanted: ReadonlySet<string>, cuts: number[], limits?: Limits): Outcome {
    return caught(() => parseKept(feed(new FamilyFilter(wanted, limits), text, cuts)));
  }

  it('parsing kept lines as they are found equals filtering, then parsing the kept text (fixtures, in pieces)', () => {
    for (const name of fixtures) {
      const text = readFileSync(join(fixturesDir, name), 'utf8');
      for (const [, wanted] of familySets) {
        fc.assert(
          fc.property(fc.array(fc.integer({ min: 0, max: text.length }), { maxLength: 12 }), (cuts) => {
            expect(streamed(text, wanted, cuts)).toEqual(filteredThenParsed(text, wanted, cuts));
          }),
          { numRuns: 40, seed: 19 },
        );
      }
    }
  });

  it('parsing kept lines as they are found equals filtering, then parsing (generated and damaged expositions, tight limits)', () => {
    const wanted = new Set(['a', 'b_total', 'h_sum', 'h_count', 'h', 's', 'vllm:num_requests_waiting']);
    let parsed = 0;
    const garbage = fc.stringMatching(/^[a-z_:{}=",\\ \t\r0-9.#+-]{0,40}$/);
    const limitsArb = fc.option(
      fc.record({
        maxLineLength: fc.integer({ min: 1, max: 80 }),
        maxKeptLength: fc.integer({ min: 1, max: 400 }),
        maxKeptLines: fc.integer({ min: 0, max: 12 }),
      }),
      { nil: undefined },
    );
    fc.assert(
      fc.property(
        fc.array(fc.oneof({ weight: 5, arbitrary: lineArb }, { weight: 1, arbitrary: garbage }), { maxLength: 24 }),
        fc.constantFrom('\n', '\r\n'),
        fc.boolean(),
        fc.array(fc.nat({ max: 600 }), { maxLength: 6 }),
        limitsArb,
        (lines, eol, finalNewline, cuts, limits) => {
          const text = lines.join(eol) + (finalNewline ? eol : '');
          const plain = filteredThenParsed(text, wanted, cuts, limits);
          if ('ok' in plain && plain.ok.length > 0) parsed++;
          expect(streamed(text, wanted, cuts, limits)).toEqual(plain);
        },
      ),
      { numRuns: 3000, seed: 20 },
    );
    expect(parsed).toBeGreaterThan(100);
  });

  // The plain-line reader: the same sample as the general line parser, or no answer (never another one).
  const plainLineArb = fc
    .record({
      name: nameArb,
      labels: fc.option(
        fc.array(
          fc.tuple(fc.constantFrom('le', 'model_name', 'engine', '_x9', '9a', 'a:b', ''), fc.stringMatching(/^[a-z0-9 .,{}=é"]{0,8}$/)),
          { maxLength: 3 },
        ),
        { nil: undefined },
      ),
      value: valueArb,
      timestamp: fc.option(fc.constantFrom('1', '1700000000000', 'x', ''), { nil: undefined }),
      gap: fc.constantFrom(' ', ' ', ' ', '  ', '\t', ''),
      sep: fc.constantFrom(',', ',', ', ', ',,'),
      close: fc.constantFrom('}', '}', ',}', ''),
    })
    .map(({ name, labels, value, timestamp, gap, sep, close }) => {
      const braces = labels === undefined ? '' : `{${labels.map(([k, v]) => `${k}="${v}"`).join(sep)}${close}`;
      return `${name}${braces}${gap}${value}${timestamp === undefined ? '' : `${gap}${timestamp}`}`;
    });

  function lineOutcome(line: string): unknown {
    try {
      return parseSampleLine(line);
    } catch (error) {
      return { error: (error as Error).message };
    }
  }

  it("the plain-line reader gives the general line parser's sample, or leaves the line to it", () => {
    const garbage = fc.stringMatching(/^[a-z_:{}=",\\ \t0-9.+-]{0,40}$/);
    let read = 0;
    fc.assert(
      fc.property(fc.oneof(plainLineArb, sampleArb, garbage), (line) => {
        const fast = fastSampleLine(line);
        if (fast !== undefined) {
          read++;
          expect(fast).toEqual(lineOutcome(line));
        }
      }),
      { numRuns: 20000, seed: 21 },
    );
    // Not a vacuous pass: a good share of the generated lines took the fast path.
    expect(read).toBeGreaterThan(1000);
  });

  it('the plain-line reader reads every sample line of the fixtures (the fast path is the one taken)', () => {
    for (const name of fixtures) {
      const lines = readFileSync(join(fixturesDir, name), 'utf8').split('\n');
      for (const line of lines.map((l) => l.trim()).filter((l) => l.length > 0 && !l.startsWith('#'))) {
        const fast = fastSampleLine(line);
        expect(fast, `${name}: ${line}`).toBeDefined();
        expect(fast).toEqual(parseSampleLine(line));
      }
    }
  });

  it('a budget error found after a malformed kept line still wins, as when the kept text was parsed after filtering', () => {
    const limits = { maxLineLength: 1000, maxKeptLength: 1000, maxKeptLines: 2 };
    const text = 'a{x="1"} 1\na{=} oops\na{x="2"} 2\n';
    expect(streamed(text, new Set(['a']), [], limits)).toEqual({ error: expect.stringContaining('BudgetError') });
    expect(filteredThenParsed(text, new Set(['a']), [], limits)).toEqual({ error: expect.stringContaining('BudgetError') });
  });
});
