import { describe, expect, it } from 'vitest';
import {
  decodeEvent,
  encodeEvent,
  MAX_EVENT_BYTES,
  MAX_KV_SNAPSHOT_BYTES,
  metricsEventSchema,
  serviceRatesSchema,
  type SpillwayEvent,
} from '@spillway/events';

const readiness = {
  v: 1,
  kind: 'readiness',
  pool: 'llama',
  zone: 'zone-a',
  region: 'r1',
  pod: 'vllm-a-0',
  address: '10.0.1.5:8000',
  ready: true,
  deleted: false,
  engine: 'vllm',
  labels: { app: 'llama' },
  observedAt: 1764420000000,
};
const metrics = {
  v: 1,
  kind: 'metrics',
  pool: 'llama',
  zone: 'zone-a',
  pod: 'vllm-a-0',
  observedAt: 1764420000050,
  waitingRequests: 2,
  runningRequests: 7,
  kvCacheUsage: 0.43,
  lora: { running: ['sql-lora'], waiting: [], max: 4 },
  cache: { blockSize: 16, numBlocks: 29000 },
};

const rates = {
  windowMs: 2000,
  promptTokensPerS: 5234.1,
  generationTokensPerS: 2411,
  requestsPerS: 10.5,
  ttftMs: 182,
  queueMs: 40,
  itlMs: 14,
  prefixHitRate: 0.62,
};

function decode(value: unknown, subject?: string) {
  return decodeEvent(JSON.stringify(value), subject);
}

describe('v1 events', () => {
  it('accepts the contract examples of both kinds', () => {
    expect(decode(readiness)).toEqual({ ok: true, event: readiness });
    expect(decode(metrics)).toEqual({ ok: true, event: metrics });
  });

  it('accepts the minimal forms (optional fields absent) and IPv6 addresses', () => {
    const { region: _r, deleted: _d, engine: _e, labels: _l, ...minimal } = readiness;
    expect(decode({ ...minimal, address: '[fd00::5]:8000' }).ok).toBe(true);
    const { lora: _lo, cache: _c, ...bare } = metrics;
    expect(decode(bare).ok).toBe(true);
  });

  it('accepts service rates, whole or with only the three throughputs', () => {
    expect(decode({ ...metrics, rates })).toEqual({ ok: true, event: { ...metrics, rates } });
    const { ttftMs: _t, queueMs: _q, itlMs: _i, prefixHitRate: _p, ...throughputs } = rates;
    expect(decode({ ...metrics, rates: throughputs }).ok).toBe(true);
    expect(decode({ ...metrics, rates: { ...throughputs, promptTokensPerS: 0, generationTokensPerS: 0, requestsPerS: 0 } }).ok).toBe(true);
  });

  it('accepts the prefill fields, and events from before them; readers from before them accept events with them', () => {
    const withPrefill = { ...metrics, rates: { ...rates, prefillMs: 95, prefillTokensPerS: 7512.4 } };
    expect(decode(withPrefill)).toEqual({ ok: true, event: withPrefill });
    expect(decode({ ...metrics, rates: { ...rates, prefillMs: 95 } }).ok).toBe(true);
    expect(decode({ ...metrics, rates })).toEqual({ ok: true, event: { ...metrics, rates } });
    // A reader of the contract before the two fields: its rates schema without them.
    const before = metricsEventSchema.extend({
      rates: serviceRatesSchema.omit({ prefillMs: true, prefillTokensPerS: true }).optional(),
    });
    const old = before.safeParse(JSON.parse(new TextDecoder().decode(encodeEvent(withPrefill as SpillwayEvent))));
    expect(old.success).toBe(true);
    expect(old.data?.rates).toEqual(rates);
  });

  it('rejects absurd prefill values: negative, zero or non-finite rates, over an hour of prefill', () => {
    const reject = (extra: object, field: string) => {
      const result = decode({ ...metrics, rates: { ...rates, ...extra } });
      expect(result.ok).toBe(false);
      if (!result.ok) expect(result.error.message).toContain(field);
    };
    reject({ prefillMs: -1 }, 'rates.prefillMs');
    reject({ prefillMs: 3_600_001 }, 'rates.prefillMs');
    reject({ prefillMs: 'slow' }, 'rates.prefillMs');
    reject({ prefillTokensPerS: -5 }, 'rates.prefillTokensPerS');
    // A reader divides a prompt's uncached tokens by it.
    reject({ prefillTokensPerS: 0 }, 'rates.prefillTokensPerS');
    reject({ prefillTokensPerS: 2e9 }, 'rates.prefillTokensPerS');
    reject({ prefillTokensPerS: null }, 'rates.prefillTokensPerS');
    // JSON's only way to Infinity: a number too large for a double.
    for (const field of ['prefillMs', 'prefillTokensPerS']) {
      const text = JSON.stringify({ ...metrics, rates }).replace('"windowMs"', `"${field}":1e999,"windowMs"`);
      const result = decodeEvent(text);
      expect(result.ok).toBe(false);
      if (!result.ok) expect(result.error.message).toContain(`rates.${field}`);
    }
    for (const value of [Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(serviceRatesSchema.safeParse({ ...rates, prefillMs: value }).success).toBe(false);
      expect(serviceRatesSchema.safeParse({ ...rates, prefillTokensPerS: value }).success).toBe(false);
    }
  });

  it('JSON has no NaN or Infinity: a computed NaN rate serialises as null and is rejected', () => {
    const encoded = JSON.stringify({ ...metrics, rates: { ...rates, ttftMs: Number.NaN } });
    const result = decodeEvent(encoded);
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.error.message).toContain('rates.ttftMs');
  });

  it('ignores unknown fields, and drops them from the decoded event', () => {
    const result = decode({ ...metrics, futureField: { nested: true } });
    expect(result.ok).toBe(true);
    if (result.ok) expect(result.event).not.toHaveProperty('futureField');
  });

  it('round-trips through encode and decode', () => {
    for (const event of [readiness, metrics] as SpillwayEvent[]) {
      expect(decodeEvent(encodeEvent(event))).toEqual({ ok: true, event });
    }
  });

  const invalid: [string, object, string][] = [
    ['kvCacheUsage above 1', { ...metrics, kvCacheUsage: 1.2 }, 'kvCacheUsage'],
    ['kvCacheUsage negative', { ...metrics, kvCacheUsage: -0.1 }, 'kvCacheUsage'],
    ['fractional waitingRequests', { ...metrics, waitingRequests: 1.5 }, 'waitingRequests'],
    ['negative runningRequests', { ...metrics, runningRequests: -1 }, 'runningRequests'],
    ['string count', { ...metrics, waitingRequests: '3' }, 'waitingRequests'],
    ['lora.max negative', { ...metrics, lora: { running: [], waiting: [], max: -1 } }, 'lora.max'],
    ['lora.running not a list', { ...metrics, lora: { running: 'a', waiting: [], max: 1 } }, 'lora.running'],
    ['cache.blockSize zero', { ...metrics, cache: { blockSize: 0, numBlocks: 10 } }, 'cache.blockSize'],
    ['address without port', { ...readiness, address: '10.0.1.5' }, 'address'],
    ['address port out of range', { ...readiness, address: '10.0.1.5:70000' }, 'address'],
    ['address hostname', { ...readiness, address: 'vllm-0.svc:8000' }, 'address'],
    ['IPv6 without brackets', { ...readiness, address: 'fd00::5:8000' }, 'address'],
    ['bad IPv4 octet', { ...readiness, address: '10.0.1.256:80' }, 'address'],
    ['ready not boolean', { ...readiness, ready: 'yes' }, 'ready'],
    ['unknown engine', { ...readiness, engine: 'llamacpp' }, 'engine'],
    ['empty pod', { ...readiness, pod: '' }, 'pod'],
    ['missing zone', { ...readiness, zone: undefined }, 'zone'],
    ['negative observedAt', { ...readiness, observedAt: -5 }, 'observedAt'],
    ['label value not a string', { ...readiness, labels: { a: 1 } }, 'labels.a'],
    ['unknown kind', { ...readiness, kind: 'spec' }, 'kind'],
    ['rates.windowMs zero', { ...metrics, rates: { ...rates, windowMs: 0 } }, 'rates.windowMs'],
    ['rates.windowMs fractional', { ...metrics, rates: { ...rates, windowMs: 1.5 } }, 'rates.windowMs'],
    ['rates.windowMs above an hour', { ...metrics, rates: { ...rates, windowMs: 3_600_001 } }, 'rates.windowMs'],
    ['negative rates.promptTokensPerS', { ...metrics, rates: { ...rates, promptTokensPerS: -1 } }, 'rates.promptTokensPerS'],
    [
      'rates.generationTokensPerS not a number',
      { ...metrics, rates: { ...rates, generationTokensPerS: 'fast' } },
      'rates.generationTokensPerS',
    ],
    ['absurd rates.requestsPerS', { ...metrics, rates: { ...rates, requestsPerS: 1e12 } }, 'rates.requestsPerS'],
    ['rates without requestsPerS', { ...metrics, rates: { ...rates, requestsPerS: undefined } }, 'rates.requestsPerS'],
    ['negative rates.ttftMs', { ...metrics, rates: { ...rates, ttftMs: -3 } }, 'rates.ttftMs'],
    ['rates.queueMs above an hour', { ...metrics, rates: { ...rates, queueMs: 3_600_001 } }, 'rates.queueMs'],
    ['rates.itlMs null', { ...metrics, rates: { ...rates, itlMs: null } }, 'rates.itlMs'],
    ['rates.prefixHitRate above 1', { ...metrics, rates: { ...rates, prefixHitRate: 1.01 } }, 'rates.prefixHitRate'],
  ];
  it.each(invalid)('rejects %s with a message naming the field', (_name, value, field) => {
    const result = decode(value);
    expect(result.ok).toBe(false);
    if (!result.ok) {
      expect(result.error.reason).toBe('invalid');
      expect(result.error.message).toContain(field);
    }
  });

  it('returns typed errors for payloads that are not events, and never throws', () => {
    const reason = (payload: Uint8Array | string) => {
      const result = decodeEvent(payload);
      return result.ok ? 'ok' : result.error.reason;
    };
    expect(reason('{not json')).toBe('not-json');
    expect(reason('[1,2]')).toBe('not-object');
    expect(reason('null')).toBe('not-object');
    expect(reason('"text"')).toBe('not-object');
    expect(reason(JSON.stringify({ ...metrics, v: 99 }))).toBe('unsupported-version');
    expect(reason(JSON.stringify({ ...metrics, v: undefined }))).toBe('unsupported-version');
    expect(reason(new Uint8Array([0x7b, 0xff, 0xfe, 0x7d]))).toBe('not-utf8');
    // Without a subject only the largest kind's limit applies unparsed (kind limits: kv-snapshot.test.ts).
    expect(reason('x'.repeat(MAX_KV_SNAPSHOT_BYTES + 1))).toBe('oversized');
    expect(reason(JSON.stringify({ ...metrics, pad: 'x'.repeat(MAX_EVENT_BYTES) }))).toBe('oversized');
    expect(reason(new Uint8Array(0))).toBe('not-json');
  });

  it('requires the payload to name the same pool, zone, pod and kind as its subject', () => {
    expect(decode(metrics, 'spillway.v1.llama.zone-a.vllm-a-0.metrics').ok).toBe(true);
    const wrong = [
      'spillway.v1.llama.zone-b.vllm-a-0.metrics',
      'spillway.v1.llama.zone-a.vllm-a-1.metrics',
      'spillway.v1.llama.zone-a.vllm-a-0.readiness',
      'spillway.v1.other.zone-a.vllm-a-0.metrics',
      'spillway.v2.llama.zone-a.vllm-a-0.metrics',
      'garbage',
    ];
    for (const subject of wrong) {
      const result = decode(metrics, subject);
      expect(result.ok ? 'ok' : result.error.reason).toBe('subject-mismatch');
    }
  });
});
