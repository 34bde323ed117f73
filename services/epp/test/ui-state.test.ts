import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EventPublisher } from '@spillway/bus';
import { eventually, podEvents, publishAll, startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import { CliError } from '@spillway/cli';
import { loadEppConfig, type RunningEpp } from '@spillway/epp';
import type { UiState } from '../src/ui/state-types.js';
import {
  EnvoyStream,
  POOL,
  TestPublisher,
  completion,
  destinationOf,
  envoyRequestMessages,
  extProcClient,
  responseHeadersMessage,
  startTestEpp,
  type PodSpec,
} from './helpers.js';

// GET /api/state against a real EPP fed by a private nats-server: the figures are the events'.
const PODS: PodSpec[] = [
  { pod: 'a0', zone: 'zone-a', region: 'r1', address: '10.0.1.1:8000', waiting: 4, running: 6, kv: 0.5 },
  { pod: 'a1', zone: 'zone-a', region: 'r1', address: '10.0.1.2:8000', waiting: 6, running: 2, kv: 0.7 },
  { pod: 'b0', zone: 'zone-b', region: 'r1', address: '10.0.2.1:8000', waiting: 0, running: 1, kv: 0.1 },
  { pod: 'c0', zone: 'zone-c', region: 'r2', address: '10.0.3.1:8000', waiting: 0, running: 3, kv: 0.2 },
  { pod: 'c1', zone: 'zone-c', region: 'r2', address: '10.0.3.2:8000', ready: false },
];

/** A step of a pod with `running` requests and this KV use, at the default batch numbers (docs/picking.md). */
const step = (running: number, kv: number): number => 7 * (1 + (1.5 * running) / 256 + 2.75 * kv);

let nats: NatsServerHandle;
let publisher: TestPublisher;
let epp: RunningEpp;

async function state(port: number, query = ''): Promise<UiState> {
  const res = await fetch(`http://127.0.0.1:${port}/api/state${query}`);
  expect(res.status).toBe(200);
  return (await res.json()) as UiState;
}

/** Two samples of each pod: a queue seen twice is a backlog (picking v2), so zone-a's queue spills. */
async function sampleTwice(pods: PodSpec[]): Promise<void> {
  for (let i = 0; i < 2; i++) {
    for (const pod of pods) publisher.metrics(pod);
    await publisher.nc.flush();
    await new Promise((r) => setTimeout(r, 5));
  }
}

beforeAll(async () => {
  nats = await startNatsServer({ forcePrivate: true });
  publisher = await TestPublisher.connect(nats.url);
  epp = await startTestEpp(nats.url, 'zone-a', ['--region', 'r1']);
  await publisher.pods(PODS);
  await sampleTwice(PODS);
  await epp.ready;
  await eventually(() => expect(epp.core.fleet.pool(POOL)?.readyCount).toBe(4));
});

afterAll(async () => {
  await epp?.close();
  await publisher?.close();
  await nats?.stop();
});

describe('GET /api/state', () => {
  it('is served on the metrics port, as JSON that is never cached', async () => {
    expect(epp.uiPort).toBe(epp.metricsPort);
    const res = await fetch(`http://127.0.0.1:${epp.metricsPort}/api/state`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('application/json; charset=utf-8');
    expect(res.headers.get('cache-control')).toBe('no-store');
    expect(res.headers.get('x-content-type-options')).toBe('nosniff');
  });

  it('gives each zone and pod the figures of the events published', async () => {
    const s = await state(epp.metricsPort);
    expect(s).toMatchObject({ version: 1, pool: POOL, zone: 'zone-a', region: 'r1', policy: 'cost', ready: true });
    expect(s.zones.map((z) => [z.zone, z.region, z.local, z.ready, z.total, z.waiting, z.running])).toEqual([
      ['zone-a', 'r1', true, 2, 2, 10, 8],
      ['zone-b', 'r1', false, 1, 1, 0, 1],
      ['zone-c', 'r2', false, 1, 2, 0, 3],
    ]);
    expect(s.zones[0]?.meanKvCacheUsage).toBeCloseTo(0.6, 5);
    // The cost model: a0 was seen backlogged with 6 running, so it runs 6 at once and a new request
    // waits for 4 + 6 + 1 - 6 = 5 completions, 100 ms each at the default rates (a1: 6 + 2 + 1 - 2 = 7),
    // then half a step to be admitted; its prefill takes a step. Zone-b is 1 ms away plus the 8 ms zone bias.
    const a0Step = step(6, 0.5);
    expect(s.zones[0]?.expectedWaitMs).toBeCloseTo(500 + a0Step / 2, 1);
    expect(s.zones[0]?.costMs).toBeCloseTo(500 + 1.5 * a0Step, 1);
    expect(s.zones[1]?.expectedWaitMs).toBeCloseTo(step(1, 0.1) / 2, 1);
    expect(s.zones[1]?.costMs).toBeCloseTo(9 + 1.5 * step(1, 0.1), 1);
    const a1 = s.pods.items.find((p) => p.pod === 'a1');
    expect(a1).toMatchObject({
      zone: 'zone-a',
      region: 'r1',
      address: '10.0.1.2:8000',
      ready: true,
      waiting: 6,
      running: 2,
      kvCacheUsage: 0.7,
      inFlight: 0,
      penaltyLeftMs: 0,
      stale: false,
      full: false,
    });
    expect(a1?.expectedWaitMs).toBeCloseTo(700 + step(2, 0.7) / 2, 1);
    expect(a1?.metricsAgeMs).toBeGreaterThanOrEqual(0);
    expect(s.pods.items.find((p) => p.pod === 'c1')).toMatchObject({ ready: false, expectedWaitMs: null, costMs: null });
    expect(s.stream).toMatchObject({ connection: 'connected', caughtUp: true, staleForMs: null, rejected: 0 });
    expect(s.stream.received).toBeGreaterThanOrEqual(PODS.length * 2);
    expect(s.stream.lastEventAgeMs).not.toBeNull();
  });

  it('follows a new metrics event', async () => {
    publisher.metrics({ ...(PODS[2] as PodSpec), waiting: 0, running: 9, kv: 0.9 });
    await publisher.nc.flush();
    await eventually(async () => expect((await state(epp.metricsPort)).zones[1]).toMatchObject({ running: 9, meanKvCacheUsage: 0.9 }));
  });

  it("counts this EPP's picks in the spill matrix and the zones, and lists the decisions", async () => {
    const before = await state(epp.metricsPort);
    const client = extProcClient(epp.grpcPort);
    const open: EnvoyStream[] = [];
    try {
      for (let i = 0; i < 6; i++) {
        await sampleTwice(PODS);
        const stream = new EnvoyStream(client);
        stream.send(envoyRequestMessages({ body: completion('llama', `request ${i}`) }));
        const [headers] = await stream.waitFor(2);
        // zone-a's queues cost 400 ms and more: every request spills to zone-b.
        expect(destinationOf(headers).header?.split(',')[0]).toBe('10.0.2.1:8000');
        open.push(stream);
      }
      const s = await state(epp.metricsPort);
      const from = s.spill.zones.indexOf('zone-a');
      const to = s.spill.zones.indexOf('zone-b');
      const beforeCount =
        (before.spill.perS[before.spill.zones.indexOf('zone-a')]?.[before.spill.zones.indexOf('zone-b')] ?? 0) * before.spill.windowS;
      expect(Math.round((s.spill.perS[from]?.[to] ?? 0) * s.spill.windowS - beforeCount)).toBe(6);
      expect(s.zones[1]?.pickedSeries.reduce((a, b) => a + b, 0)).toBe(6);
      expect(s.zones[1]?.pickedPerS).toBeGreaterThan(0);
      // Held open: in flight at b0 as this EPP sees it.
      expect(s.pods.items.find((p) => p.pod === 'b0')?.inFlight).toBe(6);
      expect(s.decisions[0]).toMatchObject({ rule: 'spill', status: 'routed' });
      expect(s.decisions[0]?.entries[0]).toMatchObject({ pod: 'b0', zone: 'zone-b', reason: 'spill' });
      expect(s.decisions[0]?.entries[0]?.cost).toMatchObject({ rttMs: 1, biasMs: 8 });
      // The primary answers 503: it is penalised, and the view says for how long.
      open[0]?.send([responseHeadersMessage(503)]);
      await eventually(async () =>
        expect((await state(epp.metricsPort)).pods.items.find((p) => p.pod === 'b0')?.penaltyLeftMs).toBeGreaterThan(0),
      );
      const penalised = await state(epp.metricsPort);
      expect(penalised.zones[1]?.penalised).toBe(1);
    } finally {
      for (const stream of open) stream.close();
      client.close();
    }
    await eventually(async () => expect((await state(epp.metricsPort)).pods.items.find((p) => p.pod === 'b0')?.inFlight).toBe(0));
  });

  it('pages and sorts the pods, and bounds the decisions', async () => {
    const page = await state(epp.metricsPort, '?limit=2&offset=1&sort=waiting&order=desc&decisions=1');
    expect(page.pods).toMatchObject({ total: 5, offset: 1, limit: 2, sort: 'waiting', order: 'desc', truncated: true });
    expect(page.pods.items.map((p) => p.pod)).toEqual(['a0', 'b0']);
    expect(page.decisions.length).toBeLessThanOrEqual(1);
    const last = await state(epp.metricsPort, '?limit=2&offset=4&sort=waiting&order=desc');
    // Pods without a sample sort last whichever the order.
    expect(last.pods.items.map((p) => p.pod)).toEqual(['c1']);
    expect(last.pods.truncated).toBe(false);
    const byState = await state(epp.metricsPort, '?sort=state&order=desc');
    expect(byState.pods.items[0]?.pod).toBe('c1');
  });

  it('answers bad query values with 400 naming the parameter', async () => {
    for (const [query, name] of [
      ['?limit=abc', 'limit'],
      ['?limit=1001', 'limit'],
      ['?offset=-1', 'offset'],
      ['?sort=password', 'sort'],
      ['?order=up', 'order'],
      ['?decisions=101', 'decisions'],
    ] as const) {
      const res = await fetch(`http://127.0.0.1:${epp.metricsPort}/api/state${query}`);
      expect(res.status, query).toBe(400);
      expect(res.headers.get('content-type')).toBe('application/json; charset=utf-8');
      expect(((await res.json()) as { error: string }).error, query).toMatch(new RegExp(`^${name}:`));
    }
  });
});

describe('the view over HTTP', () => {
  const url = (path: string) => `http://127.0.0.1:${epp.metricsPort}${path}`;

  it('serves the page and its files with a strict security policy', async () => {
    const page = await fetch(url('/'));
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toBe('text/html; charset=utf-8');
    const csp = page.headers.get('content-security-policy') ?? '';
    expect(csp).toContain("default-src 'self'");
    expect(csp).toContain("script-src 'self'");
    expect(csp).not.toContain('unsafe-inline');
    expect(page.headers.get('x-content-type-options')).toBe('nosniff');
    const html = await page.text();
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)/); // no inline script
    expect(html).not.toMatch(/\sstyle=|<style/); // no inline style
    for (const [path, type] of [
      ['/ui/app.js', 'text/javascript; charset=utf-8'],
      ['/ui/zones.js', 'text/javascript; charset=utf-8'],
      ['/ui/uplot.js', 'text/javascript; charset=utf-8'],
      ['/ui/uplot.css', 'text/css; charset=utf-8'],
      ['/ui/style.css', 'text/css; charset=utf-8'],
      ['/ui/icon.svg', 'image/svg+xml'],
    ]) {
      const res = await fetch(url(path as string));
      expect(res.status, path).toBe(200);
      expect(res.headers.get('content-type'), path).toBe(type);
      expect(res.headers.get('content-security-policy'), path).toBe(csp);
      expect((await res.arrayBuffer()).byteLength, path).toBeGreaterThan(0);
    }
  });

  it('lets a browser revalidate a file it holds (ETag, 304)', async () => {
    const first = await fetch(url('/ui/app.js'));
    const etag = first.headers.get('etag');
    expect(etag).toMatch(/^".+"$/);
    expect(first.headers.get('cache-control')).toBe('no-cache');
    const again = await fetch(url('/ui/app.js'), { headers: { 'if-none-match': etag as string } });
    expect(again.status).toBe(304);
    expect(await again.text()).toBe('');
  });

  it('is read-only: other methods on its paths are 405 with Allow, HEAD has no body', async () => {
    for (const path of ['/', '/api/state', '/ui/app.js']) {
      for (const method of ['POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS']) {
        const res = await fetch(url(path), { method });
        expect(res.status, `${method} ${path}`).toBe(405);
        expect(res.headers.get('allow')).toBe('GET, HEAD');
      }
    }
    const head = await fetch(url('/'), { method: 'HEAD' });
    expect(head.status).toBe(200);
    expect(await head.text()).toBe('');
  });

  it('answers paths that are not its own with 404', async () => {
    for (const path of [
      '/index.html',
      '/api',
      '/api/state/x',
      '/ui/',
      '/ui/nope.js',
      '/ui/../package.json',
      '/ui/app.d.ts',
      '//api/state',
    ]) {
      expect((await fetch(url(path))).status, path).toBe(404);
    }
    // The metrics port's own routes are unchanged.
    expect((await fetch(url('/metrics'))).status).toBe(200);
    expect((await fetch(url('/debug/decisions'), { method: 'POST' })).status).toBe(404);
  });
});

describe('the view with --ui false or --ui-port', () => {
  it('is off with --ui false: its paths are 404 and the metrics port works as before', async () => {
    const off = await startTestEpp(nats.url, 'zone-b', ['--ui', 'false']);
    try {
      expect(off.uiPort).toBeUndefined();
      for (const path of ['/', '/api/state', '/ui/app.js'])
        expect((await fetch(`http://127.0.0.1:${off.metricsPort}${path}`)).status, path).toBe(404);
      expect((await fetch(`http://127.0.0.1:${off.metricsPort}/metrics`)).status).toBe(200);
    } finally {
      await off.close();
    }
  });

  it('moves to its own port with --ui-port; the metrics port no longer serves it', async () => {
    const moved = await startTestEpp(nats.url, 'zone-c', ['--ui-port', '0']);
    try {
      expect(moved.uiPort).toBeDefined();
      expect(moved.uiPort).not.toBe(moved.metricsPort);
      const view = `http://127.0.0.1:${moved.uiPort}`;
      expect((await fetch(`${view}/`)).status).toBe(200);
      expect((await fetch(`${view}/api/state`)).status).toBe(200);
      expect((await fetch(`${view}/metrics`)).status).toBe(404);
      const notFound = await fetch(`${view}/other`);
      expect(notFound.status).toBe(404);
      expect(notFound.headers.get('x-content-type-options')).toBe('nosniff');
      expect((await fetch(`http://127.0.0.1:${moved.metricsPort}/`)).status).toBe(404);
    } finally {
      await moved.close();
    }
  });

  it('refuses --ui-port equal to --metrics-port, and a bad --ui value', () => {
    const base = ['--pool', POOL, '--zone', 'zone-a', '--nats', 'nats://127.0.0.1:4222'];
    expect(() => loadEppConfig([...base, '--metrics-port', '9100', '--ui-port', '9100'], {})).toThrow(CliError);
    expect(() => loadEppConfig([...base, '--metrics-port', '9100', '--ui-port', '9100'], {})).toThrow(/--ui-port/);
    expect(() => loadEppConfig([...base, '--ui', 'maybe'], {})).toThrow(/ui/);
    expect(() => loadEppConfig([...base, '--ui-port', '70000'], {})).toThrow(/ui-port/);
  });
});

describe('GET /api/state with 10,000 pods', () => {
  it('stays bounded: one page of pods, every zone summed over all of them', async () => {
    const big = await startNatsServer({ forcePrivate: true });
    const bigPublisher = await TestPublisher.connect(big.url);
    const large = await startTestEpp(big.url, 'zone-a');
    try {
      // Once ready, the EPP has created the stream: no sample published before it is lost.
      await large.ready;
      await publishAll(new EventPublisher(bigPublisher.nc), podEvents(POOL, 0, 10_000, Date.now()));
      await eventually(() => expect(large.core.fleet.counters.applied).toBe(20_000), 60_000, 100);
      const res = await fetch(`http://127.0.0.1:${large.metricsPort}/api/state`);
      const body = await res.text();
      const s = JSON.parse(body) as UiState;
      expect(s.pods).toMatchObject({ total: 10_000, offset: 0, limit: 200, truncated: true });
      expect(s.pods.items).toHaveLength(200);
      expect(s.zones.map((z) => z.ready)).toEqual([3334, 3333, 3333]);
      // The fixtures' pod i waits i mod 7: every pod counts in its zone, not only the page's.
      const waiting = (zone: number) =>
        Array.from({ length: 10_000 }, (_, i) => i)
          .filter((i) => i % 3 === zone)
          .reduce((sum, i) => sum + (i % 7), 0);
      expect(s.zones.map((z) => z.waiting)).toEqual([waiting(0), waiting(1), waiting(2)]);
      expect(body.length).toBeLessThan(1_000_000);
      const largest = await fetch(`http://127.0.0.1:${large.metricsPort}/api/state?limit=1000&decisions=100`);
      expect((await largest.text()).length).toBeLessThan(1_000_000);
      const tail = await fetch(`http://127.0.0.1:${large.metricsPort}/api/state?limit=1000&offset=9500`);
      const page = (await tail.json()) as UiState;
      expect(page.pods.items).toHaveLength(500);
      expect(page.pods.truncated).toBe(false);
    } finally {
      await large.close();
      await bigPublisher.close();
      await big.stop();
    }
  }, 120_000);
});
