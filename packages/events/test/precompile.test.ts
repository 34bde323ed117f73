import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  compileSchema,
  decodeEvent,
  kvBatchSchema,
  kvSnapshotEventSchema,
  metricsEventSchema,
  readinessEventSchema,
  REJECTED,
  spillwayEventSchema,
  stateBatchSchema,
  ENGINES,
} from '@spillway/events';

/** The compiled check and zod agree: same verdict, and on acceptance the same parsed value. */
function agree(schema: z.ZodType, input: unknown): void {
  const check = compiled.get(schema) ?? compileSchema(schema);
  compiled.set(schema, check);
  const fast = check(input);
  const slow = schema.safeParse(input);
  expect(fast !== REJECTED, `verdict on ${JSON.stringify(input)}`).toBe(slow.success);
  if (slow.success) expect(fast).toStrictEqual(slow.data);
}
const compiled = new Map<z.ZodType, ReturnType<typeof compileSchema>>();

// Values around every bound the v1 schema draws, plus the wrong types.
const edgeNumber = fc.constantFrom(
  -1,
  -0,
  0,
  0.5,
  1,
  1.5,
  2,
  3_600_000,
  3_600_001,
  1e9,
  1e9 + 1,
  8.64e15,
  8.64e15 + 1,
  Number.MAX_SAFE_INTEGER,
  2 ** 53,
  1e308,
);
const name = fc.oneof(
  fc.string({ minLength: 1, maxLength: 12 }),
  fc.constantFrom('a'.repeat(253), 'a'.repeat(254), 'zone-a', 'vllm.0', 'é'),
);
const address = fc.oneof(
  fc.tuple(fc.nat(255), fc.nat(255), fc.integer({ min: 0, max: 70_000 })).map(([a, b, port]) => `10.${a}.0.${b}:${port}`),
  fc.constantFrom(
    '[::1]:8000',
    '[fe80::1]:1',
    '10.0.0.1',
    'host:80',
    '[::1]',
    '10.0.0.1:0',
    '10.0.0.1:65535',
    '10.0.0.1:65536',
    '1.2.3.4:080',
  ),
);
const count = fc.oneof(fc.nat(1_000), edgeNumber);
const fraction = fc.oneof(fc.double({ min: 0, max: 1, noNaN: true }), edgeNumber);

const readiness = fc.record(
  {
    v: fc.constant(1),
    kind: fc.constant('readiness'),
    pool: name,
    zone: name,
    region: name,
    pod: name,
    address,
    ready: fc.boolean(),
    deleted: fc.boolean(),
    engine: fc.constantFrom(...ENGINES),
    labels: fc.dictionary(fc.string({ maxLength: 8 }), fc.string({ maxLength: 8 }), { maxKeys: 4 }),
    observedAt: fc.oneof(fc.integer({ min: 0, max: 2e12 }), edgeNumber),
  },
  { requiredKeys: ['v', 'kind', 'pool', 'zone', 'pod', 'address', 'ready', 'observedAt'] },
);
const rates = fc.record(
  {
    windowMs: fc.oneof(fc.integer({ min: 1, max: 3_600_000 }), edgeNumber),
    promptTokensPerS: count,
    generationTokensPerS: count,
    requestsPerS: count,
    ttftMs: count,
    queueMs: count,
    itlMs: count,
    prefixHitRate: fraction,
    prefillMs: count,
    prefillTokensPerS: count,
  },
  { requiredKeys: ['windowMs', 'promptTokensPerS', 'generationTokensPerS', 'requestsPerS'] },
);
const metrics = fc.record(
  {
    v: fc.constant(1),
    kind: fc.constant('metrics'),
    pool: name,
    zone: name,
    pod: name,
    observedAt: fc.oneof(fc.integer({ min: 0, max: 2e12 }), edgeNumber),
    waitingRequests: count,
    runningRequests: count,
    kvCacheUsage: fraction,
    lora: fc.record({ running: fc.array(name, { maxLength: 3 }), waiting: fc.array(name, { maxLength: 3 }), max: count }),
    cache: fc.record({ blockSize: count, numBlocks: count }),
    rates,
  },
  { requiredKeys: ['v', 'kind', 'pool', 'zone', 'pod', 'observedAt', 'waitingRequests', 'runningRequests', 'kvCacheUsage'] },
);
const infoText = fc.oneof(fc.string({ minLength: 0, maxLength: 8 }), fc.constantFrom('GPU', 'x'.repeat(64), 'x'.repeat(65)));
const kvSnapshot = fc.record(
  {
    v: fc.constant(1),
    kind: fc.constant('kv'),
    pool: name,
    zone: name,
    pod: name,
    observedAt: fc.oneof(fc.integer({ min: 0, max: 2e12 }), edgeNumber),
    blockSize: count,
    seq: count,
    keys: fc.array(count, { maxLength: 4 }),
    ranks: fc.array(
      fc.record({ rank: count, blocks: count, group: count, kind: infoText, window: count }, { requiredKeys: ['rank', 'blocks'] }),
      { maxLength: 3 },
    ),
    tiers: fc.array(fc.record({ medium: infoText, blocks: count }), { maxLength: 3 }),
  },
  { requiredKeys: ['v', 'kind', 'pool', 'zone', 'pod', 'observedAt', 'blockSize', 'seq', 'keys'] },
);
const event = fc.oneof(readiness, metrics, kvSnapshot);

/** One change to a (nested) field of an object: set it to anything, delete it, or add an unknown one. */
type Mutation = { path: string[]; op: 'set' | 'delete'; value: unknown };
function mutate(input: unknown, mutation: Mutation): unknown {
  const copy = structuredClone(input) as Record<string, unknown>;
  let target: Record<string, unknown> = copy;
  for (const key of mutation.path.slice(0, -1)) {
    const next = target[key];
    if (typeof next !== 'object' || next === null) return copy;
    target = next as Record<string, unknown>;
  }
  const last = mutation.path.at(-1) as string;
  if (mutation.op === 'delete') delete target[last];
  else target[last] = mutation.value;
  return copy;
}
const fieldNames = [
  'v',
  'kind',
  'pool',
  'zone',
  'region',
  'pod',
  'address',
  'ready',
  'deleted',
  'engine',
  'labels',
  'observedAt',
  'waitingRequests',
  'runningRequests',
  'kvCacheUsage',
  'lora',
  'cache',
  'rates',
  'extra',
];
const nestedNames = [
  'running',
  'waiting',
  'max',
  'blockSize',
  'numBlocks',
  'windowMs',
  'ttftMs',
  'prefixHitRate',
  'prefillTokensPerS',
  '0',
  'app',
  'unknown',
];
const mutation: fc.Arbitrary<Mutation> = fc.record({
  path: fc.oneof(
    fc.tuple(fc.constantFrom(...fieldNames)).map((p) => [...p]),
    fc.tuple(fc.constantFrom('lora', 'cache', 'rates', 'labels'), fc.constantFrom(...nestedNames)).map((p) => [...p]),
    fc.tuple(fc.constant('lora'), fc.constantFrom('running', 'waiting'), fc.constantFrom('0', '1')).map((p) => [...p]),
  ),
  op: fc.constantFrom('set', 'set', 'delete'),
  value: fc.oneof(
    fc.jsonValue(),
    edgeNumber,
    name,
    fc.constantFrom(undefined, null, Number.NaN, Number.POSITIVE_INFINITY, 'readiness', 'metrics', 'vllm', [], {}),
  ),
});

const runs = { numRuns: 2_000 };

describe('the precompiled event check agrees with the zod schema', () => {
  it('on generated events (valid, and invalid at their bounds)', () => {
    fc.assert(
      fc.property(event, (e) => agree(spillwayEventSchema, e)),
      runs,
    );
  });

  it('on generated events as they arrive: through JSON', () => {
    fc.assert(
      fc.property(event, (e) => agree(spillwayEventSchema, JSON.parse(JSON.stringify(e)))),
      runs,
    );
  });

  it('on events with one to three fields changed, deleted or added', () => {
    fc.assert(
      fc.property(event, fc.array(mutation, { minLength: 1, maxLength: 3 }), (e, mutations) => {
        agree(spillwayEventSchema, mutations.reduce<unknown>(mutate, e));
      }),
      runs,
    );
  });

  it('on random JSON and random values', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => agree(spillwayEventSchema, value)),
      runs,
    );
    fc.assert(
      fc.property(fc.anything(), (value) => agree(spillwayEventSchema, value)),
      runs,
    );
    fc.assert(
      fc.property(fc.dictionary(fc.constantFrom(...fieldNames), fc.jsonValue()), (value) =>
        agree(spillwayEventSchema, { v: 1, kind: 'metrics', ...value }),
      ),
      runs,
    );
  });

  it('on each kind alone, and on the other schemas of the package', () => {
    fc.assert(
      fc.property(readiness, (e) => agree(readinessEventSchema, e)),
      { numRuns: 300 },
    );
    fc.assert(
      fc.property(metrics, (e) => agree(metricsEventSchema, e)),
      { numRuns: 300 },
    );
    fc.assert(
      fc.property(fc.jsonValue(), (value) => agree(stateBatchSchema, value)),
      { numRuns: 300 },
    );
    fc.assert(
      fc.property(fc.jsonValue(), (value) => agree(kvBatchSchema, value)),
      { numRuns: 300 },
    );
    fc.assert(
      fc.property(kvSnapshot, (e) => agree(kvSnapshotEventSchema, e)),
      { numRuns: 300 },
    );
  });

  it('keeps the value zod returns: unknown fields stripped, a present undefined optional kept', () => {
    const check = compileSchema(spillwayEventSchema);
    const input = {
      v: 1,
      kind: 'metrics',
      pool: 'p',
      zone: 'z',
      pod: 'x',
      observedAt: 1,
      waitingRequests: 0,
      runningRequests: 0,
      kvCacheUsage: 0,
      lora: undefined,
      extra: 1,
    };
    expect(check(input)).toStrictEqual(spillwayEventSchema.parse(input));
    expect(check(input)).not.toHaveProperty('extra');
    expect(check(input)).toHaveProperty('lora', undefined);
  });
});

describe('compileSchema follows the schema it is given', () => {
  // A third kind, as a later contract version might add: nothing in the compiler names a kind.
  const probe = z.object({
    v: z.literal(1),
    kind: z.literal('probe'),
    pool: z.string().min(1).max(253),
    hops: z.array(z.number().int().min(0).max(10)).max(4),
    note: z.string().max(8).optional(),
  });
  const extended = z.discriminatedUnion('kind', [readinessEventSchema, metricsEventSchema, probe]);
  const check = compileSchema(extended);

  it('picks up a kind added to the union, with its rules', () => {
    expect(check({ v: 1, kind: 'probe', pool: 'p', hops: [0, 10] })).toStrictEqual({ v: 1, kind: 'probe', pool: 'p', hops: [0, 10] });
    expect(check({ v: 1, kind: 'probe', pool: 'p', hops: [11] })).toBe(REJECTED);
    expect(check({ v: 1, kind: 'probe', pool: 'p', hops: [0, 1, 2, 3, 4] })).toBe(REJECTED);
    expect(check({ v: 1, kind: 'probe', pool: 'p', hops: [], note: 'too long a note' })).toBe(REJECTED);
    expect(compileSchema(spillwayEventSchema)({ v: 1, kind: 'probe', pool: 'p', hops: [] })).toBe(REJECTED);
    const probeInput = fc.record({
      v: fc.constantFrom(1, 2),
      kind: fc.constantFrom('probe', 'metrics'),
      pool: name,
      hops: fc.array(fc.oneof(fc.integer({ min: -1, max: 11 }), edgeNumber), { maxLength: 5 }),
      note: fc.option(fc.string({ maxLength: 10 }), { nil: undefined }),
    });
    fc.assert(
      fc.property(probeInput, (value) => agree(extended, value)),
      runs,
    );
  });

  it('leaves constructs it does not model to zod, and still agrees', () => {
    const odd = z.object({
      id: z.string().regex(/^[a-z]+$/),
      n: z.number().multipleOf(3),
      tags: z.array(z.string()).default([]),
      shout: z.string().transform((s) => s.toUpperCase()),
      either: z.union([z.literal('a'), z.number().int()]),
      strict: z.strictObject({ a: z.boolean() }).optional(),
      nullable: z.string().nullable(),
      // Accepts undefined yet is not optional: an absent key is still an error.
      gone: z.undefined(),
      anything: z.unknown(),
    });
    const input = fc.record(
      {
        id: fc.constantFrom('abc', 'ABC', ''),
        n: fc.constantFrom(3, 4, 0),
        tags: fc.option(fc.array(fc.string({ maxLength: 2 }), { maxLength: 2 }), { nil: undefined }),
        shout: fc.oneof(fc.string({ maxLength: 3 }), fc.constant(1)),
        either: fc.constantFrom('a', 'b', 1, 1.5),
        strict: fc.option(fc.oneof(fc.constant({ a: true }), fc.constant({ a: true, b: 1 })), { nil: undefined }),
        nullable: fc.constantFrom('x', null, 1),
        gone: fc.option(fc.constant(1), { nil: undefined }),
        anything: fc.option(fc.jsonValue(), { nil: undefined }),
      },
      { requiredKeys: ['id', 'n', 'shout', 'either', 'nullable'] },
    );
    fc.assert(
      fc.property(input, (value) => agree(odd, value)),
      runs,
    );
  });
});

describe('decodeEvent with the precompiled check', () => {
  it("rejects exactly what zod rejects, with zod's message", () => {
    fc.assert(
      fc.property(event, fc.array(mutation, { minLength: 1, maxLength: 2 }), (e, mutations) => {
        const input = mutations.reduce<unknown>(mutate, e);
        const text = JSON.stringify(input);
        if (text === undefined) return;
        const decoded = decodeEvent(text);
        const wire = JSON.parse(text) as { v?: unknown };
        if (typeof wire !== 'object' || wire === null || Array.isArray(wire) || wire.v !== 1) return;
        const slow = spillwayEventSchema.safeParse(wire);
        expect(decoded.ok).toBe(slow.success);
        if (!decoded.ok && !slow.success) {
          expect(decoded.error.reason).toBe('invalid');
          expect(decoded.error.message).toContain(slow.error.issues[0]?.message ?? '');
        }
      }),
      runs,
    );
  });

  it('checks the subject against the event as before', () => {
    const e = {
      v: 1,
      kind: 'metrics',
      pool: 'vllm.0',
      zone: 'zone-a',
      pod: 'p 1',
      observedAt: 1,
      waitingRequests: 0,
      runningRequests: 0,
      kvCacheUsage: 0,
    };
    expect(decodeEvent(JSON.stringify(e), 'spillway.v1.vllm%2E0.zone-a.p%201.metrics').ok).toBe(true);
    const wrongPod = decodeEvent(JSON.stringify(e), 'spillway.v1.vllm%2E0.zone-a.p%202.metrics');
    expect(wrongPod).toMatchObject({ ok: false, error: { reason: 'subject-mismatch', message: expect.stringContaining('does not name') } });
    const notASubject = decodeEvent(JSON.stringify(e), 'spillway.v1.vllm.0.zone-a.p%201.metrics');
    expect(notASubject).toMatchObject({
      ok: false,
      error: { reason: 'subject-mismatch', message: expect.stringContaining('is not a v1 event subject') },
    });
    const nonCanonical = decodeEvent(JSON.stringify(e), 'spillway.v1.vllm%2E0.zone%2Da.p%201.metrics');
    expect(nonCanonical).toMatchObject({ ok: false, error: { reason: 'subject-mismatch' } });
  });
});
