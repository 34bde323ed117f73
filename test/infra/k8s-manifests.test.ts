/**
 * infra/k8s: every manifest parses, and the references between objects hold — the things
 * `kubectl apply` would accept but a cluster would then fail on quietly (a Service selecting no
 * pods, a missing ServiceAccount, a probe on the wrong port, an EPP in the wrong zone).
 */
import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { parseSchedulerConfig } from '@spillway/scheduler';
import { DEFAULT_TOPOLOGY, renderZoneTopology } from '../../infra/nats/topology.js';
import { at, isNode, list, node, readYamlDocuments, str, type Node } from './yaml-helpers.js';

const K8S_DIR = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'infra', 'k8s');
const ZONES = ['zone-a', 'zone-b', 'zone-c'];
const NAMESPACE = 'spillway';

interface Manifest {
  file: string;
  doc: Node;
  kind: string;
  name: string;
  namespace: string | undefined;
}

const labelsOf = (value: unknown): Record<string, string> => {
  if (!isNode(value)) return {};
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(value)) if (typeof v === 'string') out[k] = v;
  return out;
};
const selects = (selector: Record<string, string>, labels: Record<string, string>): boolean =>
  Object.keys(selector).length > 0 && Object.entries(selector).every(([k, v]) => labels[k] === v);

/** `--name=value` or `--name value`; undefined when absent. */
function flag(args: readonly string[], name: string): string | undefined {
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (arg.startsWith(`--${name}=`)) return arg.slice(name.length + 3);
    if (arg === `--${name}`) return args[i + 1];
  }
  return undefined;
}

describe('infra/k8s manifests', () => {
  let manifests: Manifest[];
  const ofKind = (kind: string): Manifest[] => manifests.filter((m) => m.kind === kind);
  const find = (kind: string, name: string): Manifest | undefined => manifests.find((m) => m.kind === kind && m.name === name);
  const podSpec = (d: Manifest): Node => node(d.doc, 'spec', 'template', 'spec');
  const podLabels = (d: Manifest): Record<string, string> => labelsOf(at(d.doc, 'spec', 'template', 'metadata', 'labels'));
  const containers = (d: Manifest): Node[] => list(podSpec(d), 'containers').map((c) => node(c));
  const args = (c: Node): string[] => (Array.isArray(c['args']) ? c['args'].map(String) : []);
  const containerPorts = (d: Manifest): { name: string | undefined; port: number }[] =>
    containers(d).flatMap((c) =>
      (Array.isArray(c['ports']) ? c['ports'] : []).map((p) => ({
        name: isNode(p) && typeof p['name'] === 'string' ? p['name'] : undefined,
        port: Number(at(p, 'containerPort')),
      })),
    );
  const deploymentsOf = (app: string): Manifest[] => ofKind('Deployment').filter((d) => podLabels(d)['app.kubernetes.io/name'] === app);
  const zoneOf = (d: Manifest): string => {
    const terms = list(podSpec(d), 'affinity', 'nodeAffinity', 'requiredDuringSchedulingIgnoredDuringExecution', 'nodeSelectorTerms');
    expect(terms, `${d.name}: one node selector term`).toHaveLength(1);
    const expressions = list(terms[0], 'matchExpressions');
    const zone = expressions.find((e) => str(e, 'key') === 'topology.kubernetes.io/zone');
    expect(zone, `${d.name}: zone affinity`).toBeDefined();
    expect(str(zone, 'operator')).toBe('In');
    const values = list(zone, 'values');
    expect(values, `${d.name}: exactly one zone`).toHaveLength(1);
    return String(values[0]);
  };

  beforeAll(() => {
    const files = readdirSync(K8S_DIR).filter((f) => f.endsWith('.yaml') && f !== 'kustomization.yaml');
    manifests = files.flatMap((file) =>
      readYamlDocuments(join(K8S_DIR, file)).map((doc) => {
        const metadata = node(doc, 'metadata');
        return {
          file,
          doc,
          kind: str(doc, 'kind'),
          name: str(metadata, 'name'),
          namespace: typeof metadata['namespace'] === 'string' ? metadata['namespace'] : undefined,
        };
      }),
    );
  });

  it('parses into objects with apiVersion, kind and name, all in the spillway namespace', () => {
    expect(manifests.length).toBeGreaterThan(10);
    expect(find('Namespace', NAMESPACE)).toBeDefined();
    const seen = new Set<string>();
    for (const m of manifests) {
      expect(str(m.doc, 'apiVersion'), `${m.file} ${m.kind}/${m.name}`).toMatch(/\S/);
      const key = `${m.kind}/${m.name}`;
      expect(seen.has(key), `${key} defined twice`).toBe(false);
      seen.add(key);
      if (m.kind !== 'Namespace') expect(m.namespace, `${m.file} ${key}`).toBe(NAMESPACE);
    }
  });

  it('kustomization.yaml lists every manifest file', () => {
    const kustomization = readYamlDocuments(join(K8S_DIR, 'kustomization.yaml'))[0];
    const resources = list(kustomization, 'resources').map(String).sort();
    expect(resources).toEqual([...new Set(manifests.map((m) => m.file))].sort());
  });

  it("every Deployment selects its own pods, uses an existing ServiceAccount, and its volumes and secrets exist", () => {
    expect(ofKind('Deployment').length).toBeGreaterThan(0);
    for (const d of ofKind('Deployment')) {
      expect(selects(labelsOf(at(d.doc, 'spec', 'selector', 'matchLabels')), podLabels(d)), `${d.name}: selector matches its template`).toBe(true);
      const spec = podSpec(d);
      const account = spec['serviceAccountName'];
      if (account !== undefined) expect(find('ServiceAccount', String(account)), `${d.name}: ServiceAccount ${String(account)}`).toBeDefined();
      const volumes = Array.isArray(spec['volumes']) ? spec['volumes'].map((v) => node(v)) : [];
      for (const volume of volumes) {
        if (isNode(volume['configMap'])) {
          expect(find('ConfigMap', str(volume, 'configMap', 'name')), `${d.name}: ConfigMap of volume ${str(volume, 'name')}`).toBeDefined();
        }
      }
      for (const c of containers(d)) {
        for (const mount of Array.isArray(c['volumeMounts']) ? c['volumeMounts'] : []) {
          expect(volumes.map((v) => v['name']), `${d.name}: volume ${str(mount, 'name')}`).toContain(str(mount, 'name'));
        }
        for (const env of Array.isArray(c['env']) ? c['env'] : []) {
          if (!isNode(env) || !isNode(env['valueFrom'])) continue;
          const ref = node(env, 'valueFrom', 'secretKeyRef');
          const secret = find('Secret', str(ref, 'name'));
          expect(secret, `${d.name}: Secret ${str(ref, 'name')}`).toBeDefined();
          expect(Object.keys(node(secret!.doc, 'stringData')), `${d.name}: key ${str(ref, 'key')}`).toContain(str(ref, 'key'));
        }
        expect(str(c, 'image'), `${d.name}: pinned image`).toMatch(/^spillway\/[a-z-]+:0\.1\.0$/);
      }
    }
  });

  it('every Service selects the pods of at least one Deployment, on ports those pods expose', () => {
    for (const s of ofKind('Service')) {
      const selector = labelsOf(at(s.doc, 'spec', 'selector'));
      const targets = ofKind('Deployment').filter((d) => selects(selector, podLabels(d)));
      expect(targets.length, `Service ${s.name} selects no Deployment`).toBeGreaterThan(0);
      for (const port of list(s.doc, 'spec', 'ports')) {
        const target = at(port, 'targetPort');
        for (const d of targets) {
          const exposed = containerPorts(d);
          const ok = typeof target === 'number' ? exposed.some((p) => p.port === target) : exposed.some((p) => p.name === target);
          expect(ok, `Service ${s.name} port ${String(target)} on ${d.name}`).toBe(true);
        }
      }
    }
  });

  it("the InferencePool (v1) names an existing EPP Service and port, and selects the model servers' port", () => {
    const pools = ofKind('InferencePool');
    expect(pools).toHaveLength(1);
    const pool = pools[0]!.doc;
    expect(str(pool, 'apiVersion')).toBe('inference.networking.k8s.io/v1');
    const ref = node(pool, 'spec', 'endpointPickerRef');
    expect(ref['kind'] ?? 'Service').toBe('Service');
    expect(['FailOpen', 'FailClose']).toContain(str(ref, 'failureMode'));
    const service = find('Service', str(ref, 'name'));
    expect(service, `Service ${str(ref, 'name')}`).toBeDefined();
    const refPort = at(ref, 'port', 'number');
    expect(list(service!.doc, 'spec', 'ports').map((p) => at(p, 'port'))).toContain(refPort);
    // The Service behind endpointPickerRef reaches the EPPs of every zone.
    const selector = labelsOf(at(service!.doc, 'spec', 'selector'));
    const epps = deploymentsOf('spillway-epp').filter((d) => selects(selector, podLabels(d)));
    expect(new Set(epps.map(zoneOf))).toEqual(new Set(ZONES));
    // The pool's pods exist and listen on the target ports.
    const members = ofKind('Deployment').filter((d) => selects(labelsOf(at(pool, 'spec', 'selector', 'matchLabels')), podLabels(d)));
    expect(members.length).toBeGreaterThan(0);
    const targetPorts = list(pool, 'spec', 'targetPorts').map((p) => at(p, 'number'));
    expect(targetPorts.length).toBeGreaterThan(0);
    for (const d of members) for (const port of targetPorts) expect(containerPorts(d).map((p) => p.port)).toContain(port);
  });

  it('RBAC lets every collector get, list and watch discovery.k8s.io endpointslices', () => {
    const collectors = deploymentsOf('spillway-collector');
    expect(collectors.length).toBe(ZONES.length);
    for (const d of collectors) {
      const account = String(podSpec(d)['serviceAccountName']);
      const bindings = ofKind('RoleBinding').filter((b) =>
        list(b.doc, 'subjects').some((s) => str(s, 'kind') === 'ServiceAccount' && str(s, 'name') === account),
      );
      const rules = bindings.flatMap((b) => {
        expect(str(b.doc, 'roleRef', 'kind')).toBe('Role');
        const role = find('Role', str(b.doc, 'roleRef', 'name'));
        expect(role, `Role ${str(b.doc, 'roleRef', 'name')}`).toBeDefined();
        return list(role!.doc, 'rules');
      });
      const covers = (verb: string) =>
        rules.some(
          (r) =>
            list(r, 'apiGroups').includes('discovery.k8s.io') && list(r, 'resources').includes('endpointslices') && list(r, 'verbs').includes(verb),
        );
      for (const verb of ['get', 'list', 'watch']) expect(covers(verb), `${d.name} (${account}) may ${verb} endpointslices`).toBe(true);
    }
  });

  it('each zone has one EPP Deployment and Service, pinned to the zone, with the flags of DESIGN §6', () => {
    const epps = deploymentsOf('spillway-epp');
    expect(epps.map(zoneOf).sort()).toEqual(ZONES);
    const topology = renderZoneTopology(DEFAULT_TOPOLOGY);
    for (const d of epps) {
      const zone = zoneOf(d);
      const [container] = containers(d);
      const a = args(container!);
      expect(flag(a, 'zone'), d.name).toBe(zone);
      expect(flag(a, 'pool'), d.name).toBe('llama');
      expect(flag(a, 'region'), d.name).toMatch(/\S/);
      expect(flag(a, 'subset-mode'), d.name).toBe('locality');
      expect(flag(a, 'grpc-port'), d.name).toBe('9002');
      expect(flag(a, 'metrics-port'), d.name).toBe('9090');
      expect(flag(a, 'nats'), d.name).toContain(zone);
      // Probes: gRPC health on the health port, services liveness and readiness.
      const healthPort = Number(flag(a, 'health-port'));
      expect(healthPort).toBe(9003);
      expect(node(container, 'livenessProbe', 'grpc')).toEqual({ port: healthPort, service: 'liveness' });
      expect(node(container, 'readinessProbe', 'grpc')).toEqual({ port: healthPort, service: 'readiness' });
      expect(containerPorts(d).map((p) => p.port)).toEqual(expect.arrayContaining([9002, healthPort, 9090]));
      // --config is a file inside a mounted ConfigMap volume that holds that key.
      const config = flag(a, 'config')!;
      const mount = (Array.isArray(container!['volumeMounts']) ? container!['volumeMounts'] : []).find((m) => config.startsWith(`${str(m, 'mountPath')}/`));
      expect(mount, `${d.name}: --config ${config} is mounted`).toBeDefined();
      const volume = list(podSpec(d), 'volumes').find((v) => str(v, 'name') === str(mount, 'name'));
      const configMap = find('ConfigMap', str(volume, 'configMap', 'name'));
      expect(Object.keys(node(configMap!.doc, 'data'))).toContain(config.slice(str(mount, 'mountPath').length + 1));
      // The NATS user is the zone's read-only EPP user of infra/nats.
      const user = (Array.isArray(container!['env']) ? container!['env'] : []).find((e) => str(e, 'name') === 'NATS_USER');
      expect(str(user, 'value')).toBe(topology.zones.find((z) => z.zone === zone)!.users.epp.user);
      // Its zone's Service selects exactly this zone's EPPs.
      const service = find('Service', `spillway-epp-${zone}`);
      expect(service, `Service spillway-epp-${zone}`).toBeDefined();
      const selected = epps.filter((e) => selects(labelsOf(at(service!.doc, 'spec', 'selector')), podLabels(e)));
      expect(selected.map((e) => e.name)).toEqual([d.name]);
    }
  });

  it("each zone has one collector, pinned to the zone, watching the model servers' EndpointSlices", () => {
    const collectors = deploymentsOf('spillway-collector');
    expect(collectors.map(zoneOf).sort()).toEqual(ZONES);
    const topology = renderZoneTopology(DEFAULT_TOPOLOGY);
    for (const d of collectors) {
      const zone = zoneOf(d);
      const [container] = containers(d);
      const a = args(container!);
      expect(flag(a, 'zone'), d.name).toBe(zone);
      expect(flag(a, 'kube-namespace'), d.name).toBe(NAMESPACE);
      // The selector names a Service whose pods are in the InferencePool.
      const selector = flag(a, 'kube-selector') ?? '';
      const serviceName = /^kubernetes\.io\/service-name=(.+)$/.exec(selector)?.[1];
      expect(serviceName, `${d.name}: --kube-selector ${selector}`).toBeDefined();
      const service = find('Service', serviceName!);
      expect(service, `Service ${serviceName}`).toBeDefined();
      const poolSelector = labelsOf(at(ofKind('InferencePool')[0]!.doc, 'spec', 'selector', 'matchLabels'));
      expect(labelsOf(at(service!.doc, 'spec', 'selector'))).toEqual(poolSelector);
      const portName = flag(a, 'kube-port');
      if (portName !== undefined) expect(list(service!.doc, 'spec', 'ports').map((p) => at(p, 'name'))).toContain(portName);
      const user = (Array.isArray(container!['env']) ? container!['env'] : []).find((e) => str(e, 'name') === 'NATS_USER');
      expect(str(user, 'value')).toBe(topology.zones.find((z) => z.zone === zone)!.users.collector.user);
      // One publisher per pod's readiness (DESIGN §3): never two collectors of a zone at once.
      expect(at(d.doc, 'spec', 'replicas')).toBe(1);
      expect(str(d.doc, 'spec', 'strategy', 'type')).toBe('Recreate');
    }
  });

  it('the EPP ConfigMap is a valid scheduler config in locality mode', () => {
    const configMap = find('ConfigMap', 'spillway-epp-config');
    expect(configMap).toBeDefined();
    const raw: unknown = parseYaml(str(configMap!.doc, 'data', 'config.yaml'));
    const config = parseSchedulerConfig(raw);
    expect(config.subsetMode).toBe('locality');
    expect(config.maxEndpoints).toBe(3);
    expect(config.crossZoneFallbacks).toBe(1);
    expect(Object.keys(config.objectives).length).toBeGreaterThan(0);
    // Every key written is one the scheduler knows (its schema is strict, so parse would throw).
    expect(isNode(raw) && ['objectives', 'weights', 'queueThreshold', 'kvThreshold'].every((k) => k in raw)).toBe(true);
  });

  it('the NATS credentials Secret matches the development passwords of infra/nats', () => {
    const secret = find('Secret', 'spillway-nats-credentials');
    expect(secret).toBeDefined();
    const data = node(secret!.doc, 'stringData');
    for (const zone of renderZoneTopology(DEFAULT_TOPOLOGY).zones) {
      for (const user of [zone.users.epp, zone.users.collector]) expect(data[user.user], user.user).toBe(user.pass);
    }
  });
});
