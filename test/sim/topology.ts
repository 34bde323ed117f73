/** Zones, replicas and the network between them. */
export interface ZoneSpec {
  readonly zone: string;
  readonly region: string;
  readonly replicas: number;
}

export interface NetworkSpec {
  /** Round trip between a gateway and a replica in its own zone (already inside the engine's timing: 0). */
  readonly sameZoneMs: number;
  /** Round trip to another zone of the same region. */
  readonly sameRegionMs: number;
  /** Round trip to another region. */
  readonly crossRegionMs: number;
}

export const THREE_ZONES: readonly ZoneSpec[] = [
  { zone: 'zone-a', region: 'r1', replicas: 4 },
  { zone: 'zone-b', region: 'r1', replicas: 4 },
  { zone: 'zone-c', region: 'r2', replicas: 4 },
];

export const DEFAULT_NETWORK: NetworkSpec = { sameZoneMs: 0, sameRegionMs: 1, crossRegionMs: 30 };

export interface ReplicaInfo {
  readonly index: number;
  readonly pod: string;
  readonly address: string;
  readonly zoneIndex: number;
  readonly zone: string;
  readonly region: string;
}

export function layout(zones: readonly ZoneSpec[]): ReplicaInfo[] {
  const out: ReplicaInfo[] = [];
  zones.forEach((z, zi) => {
    for (let k = 0; k < z.replicas; k++) {
      const index = out.length;
      out.push({
        index,
        pod: `vllm-${z.zone}-${k}`,
        address: `10.${zi + 1}.0.${k + 1}:8000`,
        zoneIndex: zi,
        zone: z.zone,
        region: z.region,
      });
    }
  });
  return out;
}

/** Round trip from a gateway in zone `fromZone` to `replica`. */
export function rttMs(zones: readonly ZoneSpec[], net: NetworkSpec, fromZone: number, replica: ReplicaInfo): number {
  if (replica.zoneIndex === fromZone) return net.sameZoneMs;
  return zones[fromZone]?.region === replica.region ? net.sameRegionMs : net.crossRegionMs;
}
