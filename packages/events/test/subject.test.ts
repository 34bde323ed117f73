import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { escapeToken, isSubjectFor, parseSubject, poolFilter, subjectFor, unescapeToken } from '@spillway/events';

describe('subject tokens', () => {
  it('escapes the contract example and leaves safe names alone', () => {
    expect(escapeToken('vllm.0')).toBe('vllm%2E0');
    expect(escapeToken('vllm-a_0')).toBe('vllm-a_0');
    expect(escapeToken('a b*>%')).toBe('a%20b%2A%3E%25');
    expect(escapeToken('zoné')).toBe('zon%C3%A9');
  });

  it('round-trips any string, and an escaped token is one NATS token of safe characters', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'grapheme', minLength: 1 }), (name) => {
        const token = escapeToken(name);
        expect(token).toMatch(/^[A-Za-z0-9_%-]+$/);
        expect(unescapeToken(token)).toBe(name);
      }),
      { numRuns: 2000 },
    );
  });

  it('rejects tokens that are not a canonical escaped spelling', () => {
    for (const token of ['a.b', 'a%2', 'a%zz', 'a%41' /* escaped safe byte */, 'a%e9' /* lower-case hex */, '%FF', 'a b', 'é']) {
      expect(unescapeToken(token)).toBeUndefined();
    }
  });

  it('builds and parses subjects, including names with dots and spaces', () => {
    const parts = { pool: 'llama.3', zone: 'us east', pod: 'vllm.0', kind: 'metrics' as const };
    const subject = subjectFor(parts);
    expect(subject).toBe('spillway.v1.llama%2E3.us%20east.vllm%2E0.metrics');
    expect(parseSubject(subject)).toEqual(parts);
    expect(poolFilter('llama.3')).toBe('spillway.v1.llama%2E3.>');
  });

  it('round-trips subjects for any names (property)', () => {
    const name = fc.string({ unit: 'grapheme', minLength: 1, maxLength: 20 });
    fc.assert(
      fc.property(name, name, name, fc.constantFrom('readiness' as const, 'metrics' as const), (pool, zone, pod, kind) => {
        expect(parseSubject(subjectFor({ pool, zone, pod, kind }))).toEqual({ pool, zone, pod, kind });
      }),
    );
  });

  it('rejects subjects of other shapes', () => {
    for (const subject of [
      'spillway.v1.a.b.c',
      'spillway.v1.a.b.c.d.metrics',
      'spillway.v1.a.b.c.spec',
      'other.v1.a.b.c.metrics',
      'spillway.v1.a..c.metrics',
    ]) {
      expect(parseSubject(subject)).toBeUndefined();
    }
  });

  it('isSubjectFor says what parsing the subject and comparing the names says (property)', () => {
    const name = fc.oneof(
      fc.constantFrom('a', 'b', 'a.b', 'a%2Eb', 'zone-a', 'é'),
      fc.string({ unit: 'grapheme', minLength: 0, maxLength: 6 }),
    );
    const kind = fc.constantFrom('readiness' as const, 'metrics' as const);
    const parts = fc.record({ pool: name, zone: name, pod: name, kind });
    // Subjects near the right one: built from other names, cut, extended, or with raw tokens.
    const subject = fc.oneof(
      parts.map((p) => subjectFor(p)),
      fc.tuple(name, name, name, fc.constantFrom('readiness', 'metrics', 'metricsx', 'spec', '')).map((t) => `spillway.v1.${t.join('.')}`),
      fc.tuple(parts, fc.constantFrom('', '.', '.x', 'x')).map(([p, tail]) => subjectFor(p) + tail),
      fc.tuple(parts, fc.nat(40)).map(([p, n]) => subjectFor(p).slice(0, n)),
    );
    fc.assert(
      fc.property(subject, parts, (s, p) => {
        const parsed = parseSubject(s);
        const same =
          parsed !== undefined && parsed.pool === p.pool && parsed.zone === p.zone && parsed.pod === p.pod && parsed.kind === p.kind;
        expect(isSubjectFor(s, p)).toBe(same);
        expect(isSubjectFor(subjectFor(p), p)).toBe(p.pool !== '' && p.zone !== '' && p.pod !== '');
      }),
      { numRuns: 3000 },
    );
  });
});
