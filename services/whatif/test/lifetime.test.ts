// A request's life as Spillway's EPPs see it in the routing simulation: started when a replica
// accepts it (a streamed response's headers leave then), and completed at its last token only when
// the response body streams through the EPP (`responseBody: full-duplex`). Behind the shipped Envoy
// config (the default) the end of a started request never reaches the EPP: its charge ends by the
// replica's samples or at its bound.
import { engineConfig } from '@spillway/engine';
import { Fleet } from '@spillway/fleet';
import { describe, expect, it } from 'vitest';
import { resolveScenario, runStrategy } from '../src/index.js';
import { Network } from '../src/network.js';
import { POOL, type Route, type RouterContext } from '../src/routers.js';
import { SchedulerRouter } from '../src/spillway-router.js';
import { layout } from '../src/topology.js';
import type { SimRequest } from '../src/workload.js';
import { parse, problems, smallScenario } from './helpers.js';

const zones = [{ zone: 'zone-a', region: 'r1', replicas: 2 }];
const replicas = layout(zones);

/** A picker of zone-a over two replicas, both ready and sampled idle at `at`. */
function context(seesCompletion: boolean, at = 1_000): RouterContext {
  const fleet = new Fleet();
  for (const r of replicas) {
    fleet.apply(
      { v: 1, kind: 'readiness', pool: POOL, zone: r.zone, region: r.region, pod: r.pod, address: r.address, ready: true, observedAt: at },
      at,
    );
    fleet.apply(
      {
        v: 1,
        kind: 'metrics',
        pool: POOL,
        zone: r.zone,
        pod: r.pod,
        observedAt: at,
        waitingRequests: 0,
        runningRequests: 0,
        kvCacheUsage: 0,
      },
      at,
    );
  }
  return {
    replicas,
    scope: replicas.map((r) => r.index),
    isReady: () => true,
    readyReplicas: () => replicas.map((r) => r.index),
    localSubset: () => replicas.map((r) => r.address),
    zoneIndex: 0,
    regionOf: () => 'r1',
    zone: 'zone-a',
    region: 'r1',
    network: new Network([[0]]),
    engines: [engineConfig('llama-8b-h100', { mode: 'step' })],
    servesLora: false,
    seed: 3,
    fleet,
    config: {},
    seesCompletion,
  };
}

const request: SimRequest = {
  id: 1,
  gateway: 0,
  arrivalAt: 0,
  promptTokens: 100,
  outputTokens: 50,
  prompt: 'a question '.repeat(20),
  blockHashes: undefined,
  tokenIds: undefined,
  contentKeys: undefined,
  group: -1,
  priority: 0,
  tenant: 0,
  fairnessId: undefined,
  lora: undefined,
};

/** Routed, accepted by its primary (the gateway marks the route started), then its last token at `doneAt`. */
function serveOne(ctx: RouterContext, doneAt: number): { route: Route; inFlight: () => number } {
  const router = new SchedulerRouter(ctx);
  const route = router.route(request, { gatewayZone: 0, mayDefer: false }, 1_010);
  const primary = route.list[0] as number;
  route.started = true;
  router.served(route, primary, 1_012);
  router.release(route, doneAt);
  const info = replicas[primary] as (typeof replicas)[number];
  return { route, inFlight: () => ctx.fleet.get(POOL, info.zone, info.pod)?.inFlight ?? -1 };
}

describe('what the EPP sees of a request (routing simulation)', () => {
  it('behind the shipped Envoy config: the last token does not reach the EPP; a sample showing the request gone ends its charge', () => {
    const ctx = context(false);
    const { inFlight } = serveOne(ctx, 1_500);
    expect(inFlight()).toBe(1);
    for (const r of replicas)
      ctx.fleet.apply(
        {
          v: 1,
          kind: 'metrics',
          pool: POOL,
          zone: r.zone,
          pod: r.pod,
          observedAt: 1_600,
          waitingRequests: 0,
          runningRequests: 0,
          kvCacheUsage: 0,
        },
        1_600,
      );
    expect(inFlight()).toBe(0);
    expect(ctx.fleet.chargeCounters.endedBySamples).toBe(1);
  });

  it('with the response body through the EPP: released at its last token', () => {
    const ctx = context(true);
    expect(serveOne(ctx, 1_500).inFlight()).toBe(0);
  });

  it('a request no replica took never started: released either way', () => {
    for (const sees of [false, true]) {
      const ctx = context(sees);
      const router = new SchedulerRouter(ctx);
      const route = router.route(request, { gatewayZone: 0, mayDefer: false }, 1_010);
      router.release(route, 1_020);
      expect(replicas.map((r) => ctx.fleet.get(POOL, r.zone, r.pod)?.inFlight)).toEqual([0, 0]);
    }
  });

  it('the scenario chooses the mode (default: headers only), a strategy may override it; both run', () => {
    expect(parse(smallScenario()).epps.responseBody).toBe('none');
    expect(problems(smallScenario({ epps: { responseBody: 'buffered' } }))).toEqual([expect.stringContaining('epps.responseBody')]);
    const scenario = resolveScenario(
      parse(
        smallScenario({
          durationS: 8,
          warmupS: 2,
          strategies: ['spillway', { name: 'spillway-full-duplex', kind: 'spillway', responseBody: 'full-duplex' }],
        }),
      ),
    );
    expect(scenario.strategies.map((s) => s.responseBody)).toEqual([undefined, 'full-duplex']);
    for (const strategy of scenario.strategies) {
      const result = runStrategy(scenario, strategy, 7);
      expect(result.served).toBeGreaterThan(100);
      expect(result.rejected503).toBe(0);
    }
  }, 180_000);
});
