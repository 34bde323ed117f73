/** Zones, replicas and the round trips between zones. */
export interface ZoneSpec {
  readonly zone: string;
  readonly region: string;
  readonly replicas: number;
}

export interface ReplicaInfo {
  readonly index: number;
  /** `vllm-<zone>-<k>`: the name faults use to pick replicas. */
  readonly pod: string;
  readonly address: string;
  readonly zoneIndex: number;
  readonly zone: string;
  readonly region: string;
}

/** Pod name of replica `k` of `zone`. */
export function podName(zone: string, k: number): string {
  return `vllm-${zone}-${k}`;
}

export function layout(zones: readonly ZoneSpec[]): ReplicaInfo[] {
  const out: ReplicaInfo[] = [];
  zones.forEach((z, zi) => {
    for (let k = 0; k < z.replicas; k++) {
      out.push({
        index: out.length,
        pod: podName(z.zone, k),
        address: `10.${zi + 1}.${Math.floor(k / 250)}.${(k % 250) + 1}:8000`,
        zoneIndex: zi,
        zone: z.zone,
        region: z.region,
      });
    }
  });
  return out;
}

/**
 * Round trips between zones (ms), resolved into a matrix once: `rtt[from][to]`. A gateway's own
 * zone costs nothing extra (the engine's timing already includes the in-zone hop).
 */
export class RoundTrips {
  private readonly matrix: number[][];

  constructor(
    zones: readonly ZoneSpec[],
    network: {
      readonly sameRegionMs: number;
      readonly crossRegionMs: number;
      readonly rttMs?: Readonly<Record<string, Readonly<Record<string, number>>>> | undefined;
    },
  ) {
    this.matrix = zones.map((from) =>
      zones.map((to) => {
        if (from.zone === to.zone) return 0;
        // A pair given in either direction applies to both.
        const explicit = network.rttMs?.[from.zone]?.[to.zone] ?? network.rttMs?.[to.zone]?.[from.zone];
        if (explicit !== undefined) return explicit;
        return from.region === to.region ? network.sameRegionMs : network.crossRegionMs;
      }),
    );
  }

  between(fromZone: number, toZone: number): number {
    return this.matrix[fromZone]?.[toZone] ?? 0;
  }

  /** The matrix, for reports and for strategies that price round trips. */
  rows(): readonly (readonly number[])[] {
    return this.matrix;
  }
}
