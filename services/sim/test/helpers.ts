import { createRequire } from 'node:module';
import { z } from 'zod';

// parse-prometheus-text-format ships no types: load it untyped and validate what it returns.
const parsePrometheus = createRequire(import.meta.url)('parse-prometheus-text-format') as (text: string) => unknown;

const Family = z.object({
  name: z.string(),
  type: z.string(),
  metrics: z.array(
    z.object({
      value: z.string().optional(),
      labels: z.record(z.string(), z.string()).optional(),
      buckets: z.record(z.string(), z.string()).optional(),
    }),
  ),
});
export type Family = z.infer<typeof Family>;

export interface Scrape {
  families: Map<string, Family>;
  /**
   * Value of the single series of `name` whose labels include `labels`. For histograms it is the
   * +Inf bucket (the count): parse-prometheus-text-format 1.1.1 drops the labels, _count and _sum
   * of labelled histograms and keeps only the buckets.
   */
  value(name: string, labels?: Record<string, string>): number;
  /** Labels of the series of `name` (first one). */
  labels(name: string): Record<string, string>;
}

export async function scrape(url: string, signal?: AbortSignal): Promise<Scrape> {
  const res = await fetch(`${url}/metrics`, signal ? { signal } : {});
  if (res.status !== 200) throw new Error(`/metrics answered ${res.status}`);
  const families = new Map(
    z
      .array(Family)
      .parse(parsePrometheus(await res.text()))
      .map((f) => [f.name, f]),
  );
  const series = (name: string, labels: Record<string, string> = {}) => {
    const f = families.get(name);
    if (!f) throw new Error(`metric ${name} not exposed`);
    const ms = f.metrics.filter((m) => Object.entries(labels).every(([k, v]) => m.labels?.[k] === v));
    if (ms.length !== 1) throw new Error(`${ms.length} series of ${name} match ${JSON.stringify(labels)}`);
    return ms[0] as Family['metrics'][number];
  };
  return {
    families,
    value: (name, labels) => {
      const m = series(name, labels);
      return Number(m.value ?? m.buckets?.['+Inf']);
    },
    labels: (name) => series(name).labels ?? {},
  };
}

export async function post(url: string, body: unknown, init: RequestInit = {}): Promise<Response> {
  return fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
    ...init,
  });
}

/** `data:` payloads of an SSE body. */
export function sseData(text: string): string[] {
  return text
    .split('\n\n')
    .map((e) => e.trim())
    .filter((e) => e.startsWith('data: '))
    .map((e) => e.slice('data: '.length));
}

/** Poll until `check` returns without throwing (the sim runs in real time). */
export async function eventually<T>(check: () => Promise<T> | T, timeoutMs = 5000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await check();
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, 20));
    }
  }
}
