import type { Deployment } from './strategies.js';
import type { ReplicaInfo, ZoneSpec } from './topology.js';

/**
 * Where a strategy's pickers run and what each picks among, as its deployment says: one in each
 * gateway, per zone (`perZone` of them), one for the pool (in `referenceZone`) or one per region
 * (in its first zone); each picks among every replica or its own zone's or region's. `add` builds
 * a picker; the result is, per gateway (zone), the pickers it spreads its requests over.
 */
export function placePickers<E>(
  o: {
    readonly zones: readonly ZoneSpec[];
    readonly replicas: readonly ReplicaInfo[];
    readonly deployment: Deployment;
    readonly perZone: number;
    readonly referenceZone: number;
  },
  add: (zoneIndex: number, scope: readonly number[]) => E,
): E[][] {
  const zones = o.zones.map((_, i) => i);
  const regionOf = (z: number): string => o.zones[z]?.region ?? '';
  const replicasOf = (keep: (zone: number) => boolean): number[] => o.replicas.filter((r) => keep(r.zoneIndex)).map((r) => r.index);
  const scopeFor = (z: number): number[] =>
    o.deployment.scope === 'pool'
      ? replicasOf(() => true)
      : o.deployment.scope === 'zone'
        ? replicasOf((x) => x === z)
        : replicasOf((x) => regionOf(x) === regionOf(z));
  switch (o.deployment.placement) {
    case 'pool': {
      const epp = add(o.referenceZone, scopeFor(o.referenceZone));
      return zones.map(() => [epp]);
    }
    case 'region': {
      const byRegion = new Map<string, E>();
      return zones.map((z) => {
        const region = regionOf(z);
        let epp = byRegion.get(region);
        if (epp === undefined) {
          // The region's EPP runs in its first zone.
          epp = add(zones.find((x) => regionOf(x) === region) ?? z, scopeFor(z));
          byRegion.set(region, epp);
        }
        return [epp];
      });
    }
    case 'zone':
      return zones.map((z) => Array.from({ length: o.perZone }, () => add(z, scopeFor(z))));
    case 'gateway':
      return zones.map((z) => [add(z, scopeFor(z))]);
  }
}

/**
 * Failover priority levels per gateway (Envoy priorities over the pools): the other pools of its
 * region, then those of the other regions. Empty levels are dropped.
 */
export function failoverLevels<E extends { readonly zoneIndex: number }>(
  gatewayEpps: readonly (readonly E[])[],
  zones: readonly ZoneSpec[],
): E[][][] {
  const all = [...new Set(gatewayEpps.flat())];
  return gatewayEpps.map((own, z) => {
    const mine = new Set(own);
    const region = zones[z]?.region;
    const others = all.filter((e) => !mine.has(e));
    const near = others.filter((e) => zones[e.zoneIndex]?.region === region);
    const far = others.filter((e) => zones[e.zoneIndex]?.region !== region);
    return [near, far].filter((l) => l.length > 0);
  });
}
