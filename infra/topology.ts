/**
 * The deployment topology (`infra/topology.yaml`): pool, namespace, images and the zones with their
 * regions. Everything that names zones is rendered from it or reads it: the NATS configs, the
 * per-zone Envoy configs, the Kubernetes manifests (`infra/render.ts`) and the local demo.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';
import { z } from 'zod';
import { assertZoneName } from '@spillway/bus';

/** The committed topology, used when no other file is given. */
export const TOPOLOGY_FILE = fileURLToPath(new URL('./topology.yaml', import.meta.url));

/** A Kubernetes object name part (DNS label): lower-case letters, digits and '-'. */
const dnsLabel = z
  .string()
  .regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/, 'must be a DNS label: lower-case letters, digits and -, starting and ending alphanumeric')
  .max(40, 'at most 40 characters (object names are built from it)');

const zoneSchema = z.strictObject({
  name: dnsLabel.refine(
    (name) => {
      try {
        assertZoneName(name);
        return true;
      } catch {
        return false;
      }
    },
    { error: 'is reserved (hub) or not a JetStream domain name' },
  ),
  region: z.string().min(1).max(63),
  modelServers: z.int().min(0).max(1000),
});

export const topologySchema = z
  .strictObject({
    pool: dnsLabel,
    model: z.string().min(1),
    namespace: dnsLabel,
    image: z.string().min(1),
    natsImage: z.string().min(1),
    /** The gateways' Envoy (>= 1.38: override_host's selected_host_key). Optional, for topologies written before the gateways were. */
    envoyImage: z.string().min(1).default('envoyproxy/envoy:v1.38.0'),
    zones: z.array(zoneSchema).min(1, 'name at least one zone'),
  })
  .superRefine((topology, ctx) => {
    const seen = new Set<string>();
    for (const [i, zone] of topology.zones.entries()) {
      if (seen.has(zone.name)) ctx.addIssue({ code: 'custom', path: ['zones', i, 'name'], message: `zone ${zone.name} appears twice` });
      seen.add(zone.name);
    }
  });

export type Topology = z.infer<typeof topologySchema>;
export type TopologyZone = Topology['zones'][number];

/** Parses and validates a topology document; the error names the file and the field at fault. */
export function parseTopology(text: string, source = 'topology'): Topology {
  const raw: unknown = parse(text, { strict: true, uniqueKeys: true });
  const result = topologySchema.safeParse(raw);
  if (!result.success) {
    const problems = result.error.issues.map((issue) => `${issue.path.join('.') || '(root)'}: ${issue.message}`);
    throw new Error(`${source}: ${problems.join('; ')}`);
  }
  return result.data;
}

export function loadTopology(path: string = TOPOLOGY_FILE): Topology {
  return parseTopology(readFileSync(path, 'utf8'), path);
}
