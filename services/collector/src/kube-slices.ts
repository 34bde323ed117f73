import { parseEndpointAddress } from '@spillway/events';
import { z } from 'zod';
import type { EndpointSpec } from './endpoint.js';

/**
 * The part of a `discovery.k8s.io/v1` EndpointSlice the collector reads. Everything else is
 * ignored; what is read is validated, since a watch stream is an outside input like any other.
 */
export const endpointSliceSchema = z.object({
  metadata: z.object({ name: z.string().min(1), namespace: z.string().optional().nullable() }),
  addressType: z.string(),
  ports: z
    .array(z.object({ name: z.string().optional().nullable(), port: z.number().int().min(1).max(65535).optional().nullable() }))
    .optional()
    .nullable(),
  endpoints: z
    .array(
      z.object({
        addresses: z.array(z.string()).min(1),
        conditions: z
          .object({
            ready: z.boolean().optional().nullable(),
            serving: z.boolean().optional().nullable(),
            terminating: z.boolean().optional().nullable(),
          })
          .optional()
          .nullable(),
        hostname: z.string().optional().nullable(),
        nodeName: z.string().optional().nullable(),
        zone: z.string().optional().nullable(),
        targetRef: z.object({ kind: z.string().optional().nullable(), name: z.string().optional().nullable() }).optional().nullable(),
      }),
    )
    .nullable()
    .optional(),
});

export type EndpointSlice = z.infer<typeof endpointSliceSchema>;

export interface SliceMapping {
  /** The collector's zone: the zone of endpoints the slice gives none, and the filter below. */
  zone: string;
  region: string | undefined;
  /** The slice port to use; unset = the slice's only port. */
  portName: string | undefined;
  /** Slice ports that, when present, name each endpoint's KV-event and replay ports. */
  kvEventsPortName?: string | undefined;
  kvReplayPortName?: string | undefined;
  /** Publish endpoints of every zone; by default only this zone's (each zone's collector publishes its own, docs/events.md). */
  allZones: boolean;
}

export interface SliceProblem {
  slice: string;
  message: string;
}

/**
 * Endpoints of a set of slices. Readiness follows the endpoint's conditions: `ready` (nil means
 * ready, per the API) and not `terminating`; a terminating endpoint that is still `serving` takes
 * no new requests either. A pod listed by two slices (it moves between them during updates) is
 * ready if either says so. Returns problems for slices that cannot be used (no matching port,
 * FQDN addresses) instead of throwing, so one odd slice does not hide the rest.
 */
export function endpointsFromSlices(
  slices: readonly EndpointSlice[],
  mapping: SliceMapping,
): { endpoints: EndpointSpec[]; problems: SliceProblem[] } {
  const byPod = new Map<string, EndpointSpec>();
  const problems: SliceProblem[] = [];
  for (const slice of slices) {
    const sliceName = slice.metadata.name;
    if (slice.addressType !== 'IPv4' && slice.addressType !== 'IPv6') {
      problems.push({ slice: sliceName, message: `addressType ${slice.addressType} is not an IP address type` });
      continue;
    }
    const ports = slice.ports ?? [];
    const port =
      mapping.portName === undefined ? (ports.length === 1 ? ports[0] : undefined) : ports.find((p) => p.name === mapping.portName);
    if (!port?.port) {
      const names = ports.map((p) => p.name ?? '(unnamed)').join(', ');
      const wanted = mapping.portName === undefined ? 'exactly one port (or --kube-port)' : `a port named ${mapping.portName}`;
      problems.push({ slice: sliceName, message: `needs ${wanted}; has ${names || 'none'}` });
      continue;
    }
    const kvPort = (portName: string | undefined) =>
      portName === undefined ? undefined : (ports.find((p) => p.name === portName)?.port ?? undefined);
    const kvEventsPort = kvPort(mapping.kvEventsPortName);
    const kvReplayPort = kvEventsPort === undefined ? undefined : kvPort(mapping.kvReplayPortName);
    for (const endpoint of slice.endpoints ?? []) {
      const ip = endpoint.addresses[0] ?? '';
      const address = parseEndpointAddress(ip.includes(':') ? `[${ip}]:${port.port}` : `${ip}:${port.port}`);
      if (!address) {
        problems.push({ slice: sliceName, message: `address ${ip} is not an IP address` });
        continue;
      }
      const zone = endpoint.zone ?? mapping.zone;
      if (!mapping.allZones && zone !== mapping.zone) continue;
      const conditions = endpoint.conditions ?? {};
      const ready = (conditions.ready ?? true) && !(conditions.terminating ?? false);
      const pod = endpoint.targetRef?.name ?? endpoint.hostname ?? `${sliceName}-${address.key}`;
      const spec: EndpointSpec = {
        pod,
        address: address.key,
        zone,
        region: mapping.region,
        engine: undefined,
        labels: undefined,
        sourceReady: ready,
        kvEvents: kvEventsPort === undefined ? undefined : `tcp://${address.key.slice(0, address.key.lastIndexOf(':'))}:${kvEventsPort}`,
        kvReplay: kvReplayPort === undefined ? undefined : `tcp://${address.key.slice(0, address.key.lastIndexOf(':'))}:${kvReplayPort}`,
      };
      const seen = byPod.get(pod);
      if (!seen || (!seen.sourceReady && ready)) byPod.set(pod, spec);
    }
  }
  return { endpoints: [...byPod.values()], problems };
}
