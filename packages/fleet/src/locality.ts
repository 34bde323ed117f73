/**
 * Distance between zones, and priorities by distance from a node (docs/xds.md, "Priorities"): a locality in the node's own
 * zone is nearest, then the other zones of its region, then everything beyond. The levels used are
 * numbered 0, 1, 2 in that order, counting only the levels that hold a locality, so the numbers are
 * contiguous: gRPC's xDS clients reject a ClusterLoadAssignment with a gap (grpc-js-xds
 * `EndpointResourceType.validateResource`: "Endpoints have priority N but not N-1"), and in Envoy
 * an empty level carries no traffic anyway. Pure: the same rule numbers spillway-xds's EDS
 * priorities and renders the Envoy configs' EPP and xDS clusters (infra/envoy/render.ts).
 */

/** 0 own zone, 1 same region, 2 beyond (a zone whose region is unknown is beyond). */
export type Distance = 0 | 1 | 2;

export interface Place {
  readonly zone: string;
  readonly region: string | undefined;
}

export function distanceOf(node: Place, locality: Place): Distance {
  if (locality.zone === node.zone) return 0;
  if (node.region !== undefined && node.region !== '' && locality.region === node.region) return 1;
  return 2;
}

/**
 * The priority of each locality (by position in `localities`): its distance's rank among the
 * distances present, so the levels are contiguous from 0.
 */
export function prioritiesOf(node: Place, localities: readonly Place[]): number[] {
  const distances = localities.map((locality) => distanceOf(node, locality));
  const present = [...new Set(distances)].sort((a, b) => a - b);
  return distances.map((d) => present.indexOf(d));
}
