/** spillway-xds in-process on free ports, and readers of what a node received. */
import { expect } from 'vitest';
import pino from 'pino';
import {
  ClusterLoadAssignment,
  SetMetadataConfig,
  TYPE_URLS,
  TypedExtensionConfig,
  loadXdsConfig,
  startXds,
  type DiscoveryResponse,
  type RunningXds,
} from '../src/index.js';

export async function startTestXds(natsUrl: string, extra: string[] = []): Promise<RunningXds> {
  const config = loadXdsConfig(
    [
      '--pool',
      'llama',
      '--nats',
      natsUrl,
      '--host',
      '127.0.0.1',
      '--port',
      '0',
      '--health-port',
      '0',
      '--metrics-port',
      '0',
      '--push-delay-ms',
      '20',
      ...extra,
    ],
    {},
  );
  if (config === undefined) throw new Error('unexpected --help');
  return startXds(config, { logger: pino({ level: 'silent' }) });
}

/** Zone, priority and addresses of each locality of an EDS response. */
export function localitiesOf(response: DiscoveryResponse | undefined): { zone: string; priority: number; addresses: string[] }[] {
  if (response === undefined) return [];
  expect(response.typeUrl).toBe(TYPE_URLS.eds);
  const cla = ClusterLoadAssignment.decode(response.resources[0]!.value);
  return cla.endpoints.map((l) => ({
    zone: l.locality?.zone ?? '',
    priority: l.priority,
    addresses: l.lbEndpoints.map((e) => {
      const endpoint = e.hostIdentifier?.$case === 'endpoint' ? e.hostIdentifier.value : undefined;
      const socket = endpoint?.address?.address?.$case === 'socketAddress' ? endpoint.address.address.value : undefined;
      const port = socket?.portSpecifier?.$case === 'portValue' ? socket.portSpecifier.value : 0;
      return `${socket?.address ?? ''}:${port}`;
    }),
  }));
}

/** The subset list and gateway zone of an ECDS response. */
export function subsetOf(response: DiscoveryResponse | undefined): { subset: unknown; zone: unknown } | undefined {
  if (response === undefined) return undefined;
  const extension = TypedExtensionConfig.decode(response.resources[0]!.value);
  const value = SetMetadataConfig.decode(extension.typedConfig!.value).metadata[0]?.value ?? {};
  return { subset: value['x-gateway-destination-endpoint-subset'], zone: value['x-spillway-gateway-zone'] };
}
