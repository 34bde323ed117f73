import type { Endpoint, MetricsSample } from './endpoint.js';
import type { Fleet } from './fleet.js';

/**
 * A plain, ordered copy of a pool's view (every field the events carry): for tests comparing
 * replicas and for operator output. What the EPP derives on top (in-flight picks, learnt batch
 * size, receive times) is left out: it is the EPP's own, not a fact two replicas share.
 */
export interface EndpointSnapshot {
  pod: string;
  zone: string;
  region: string | undefined;
  address: string | undefined;
  ready: boolean;
  deleted: boolean;
  engine: string | undefined;
  labels: Record<string, string> | undefined;
  metrics:
    | {
        observedAt: number;
        waitingRequests: number;
        runningRequests: number;
        kvCacheUsage: number;
        lora: { running: string[]; waiting: string[]; max: number } | undefined;
        cache: { blockSize: number; numBlocks: number } | undefined;
        rates: MetricsSample['rates'];
      }
    | undefined;
}

function snapshotOf(endpoint: Endpoint): EndpointSnapshot {
  const m = endpoint.metrics;
  return {
    pod: endpoint.pod,
    zone: endpoint.zone,
    region: endpoint.region,
    address: endpoint.address,
    ready: endpoint.ready,
    deleted: endpoint.deleted,
    engine: endpoint.engine,
    labels: endpoint.labels ? { ...endpoint.labels } : undefined,
    metrics: m && {
      observedAt: m.observedAt,
      waitingRequests: m.waitingRequests,
      runningRequests: m.runningRequests,
      kvCacheUsage: m.kvCacheUsage,
      lora: m.lora && { running: [...m.lora.running], waiting: [...m.lora.waiting], max: m.lora.max },
      cache: m.cache && { ...m.cache },
      rates: m.rates && { ...m.rates },
    },
  };
}

/**
 * The pool's pods sorted by zone then pod. Receive times are left out on purpose: two replicas that
 * saw the same facts at different moments hold the same view.
 */
export function snapshotPool(fleet: Fleet, pool: string): EndpointSnapshot[] {
  const view = fleet.pool(pool);
  if (!view) return [];
  return [...view.endpoints()].map(snapshotOf).sort((a, b) => {
    if (a.zone !== b.zone) return a.zone < b.zone ? -1 : 1;
    return a.pod < b.pod ? -1 : a.pod > b.pod ? 1 : 0;
  });
}
