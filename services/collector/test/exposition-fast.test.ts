import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parseExposition, parseKept, selectFamilies, type Exposition } from '../src/exposition.js';
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
});
