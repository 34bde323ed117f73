/**
 * infra/k8s: the committed manifests are what the generator renders from infra/topology.yaml; every
 * object is valid against its Kubernetes schema (kubernetes-models; the InferencePool against a
 * schema derived from its CRD); and the objects fit each other and the topology: flags (parsed by
 * each binary's own flag parser), ports, labels and selectors, probes, zones and regions, NATS URLs,
 * leaf-node URLs and credential names. The same checks run on a second, two-zone topology, so the
 * generator is not fitted to one input. No cluster is involved; NATS configs go through
 * `nats-server -t`.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Ajv } from 'ajv';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments, parse as parseYaml } from 'yaml';
import { Deployment, StatefulSet } from 'kubernetes-models/apps/v1';
import { Job } from 'kubernetes-models/batch/v1';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';
import { Role, RoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1';
import { ConfigMap, Namespace, Secret, Service, ServiceAccount } from 'kubernetes-models/v1';
import { AGGREGATE_STREAM, zoneStreamName } from '@spillway/bus';
import { loadEppConfig } from '@spillway/epp';
import { parseCollectorArgs } from '@spillway/collector';
import { parseProvisionArgs } from '@spillway/ops';
import { parseSchedulerConfig } from '@spillway/scheduler';
import { parseSimArgs } from '@spillway/sim';
import { ADS_SERVICE_NAME, loadXdsConfig } from '@spillway/xds';
import { natsServerAvailable } from '@spillway/testkit';
import { zoneSpecsOf } from '../../infra/demo/system.js';
import { envoyFileOf, renderEnvoyConfig, XDS_CLUSTER_NAME, xdsAddressOf } from '../../infra/envoy/render.js';
import { renderAll } from '../../infra/render.js';
import { loadTopology, parseTopology, TOPOLOGY_FILE, type Topology } from '../../infra/topology.js';
import { isNode, type Node } from './yaml-helpers.js';

const INFRA = join(TOPOLOGY_FILE, '..');
const INFERENCE_POOL_SCHEMA = JSON.parse(readFileSync(join(INFRA, 'k8s', 'schemas', 'inferencepool-v1.schema.json'), 'utf8')) as object;

/** Validates one object against its kind's schema; throws naming the problem. */
const MODELS: Record<string, (data: Node) => { validate(): void }> = {
  Namespace: (d) => new Namespace(d as never),
  ServiceAccount: (d) => new ServiceAccount(d as never),
  Role: (d) => new Role(d as never),
  RoleBinding: (d) => new RoleBinding(d as never),
  ConfigMap: (d) => new ConfigMap(d as never),
  Secret: (d) => new Secret(d as never),
  Service: (d) => new Service(d as never),
  Deployment: (d) => new Deployment(d as never),
  StatefulSet: (d) => new StatefulSet(d as never),
  Job: (d) => new Job(d as never),
  PodDisruptionBudget: (d) => new PodDisruptionBudget(d as never),
};
const ajv = new Ajv({ allErrors: true, strict: true });
const validateInferencePool = ajv.compile(INFERENCE_POOL_SCHEMA);

function validateObject(doc: Node): void {
  const kind = String(doc['kind']);
  if (kind === 'InferencePool') {
    if (!validateInferencePool(doc)) throw new Error(`InferencePool: ${ajv.errorsText(validateInferencePool.errors)}`);
    // The CRD's CEL rule: a port is required when the picker is a Service (the default kind).
    const ref = (doc['spec'] as Node)['endpointPickerRef'] as Node;
    if ((ref['kind'] ?? 'Service') === 'Service' && ref['port'] === undefined)
      throw new Error('InferencePool: endpointPickerRef.port is required for a Service');
    return;
  }
  const model = MODELS[kind];
  if (!model) throw new Error(`no schema for kind ${kind}`);
  model(doc).validate();
}

// ---------------------------------------------------------------------------------------------
// Reading rendered files

interface Obj {
  file: string;
  doc: Node;
  kind: string;
  name: string;
  namespace: string | undefined;
}

function parseDocs(file: string, text: string): Obj[] {
  return parseAllDocuments(text, { strict: true, uniqueKeys: true })
    .map((d) => {
      const problems = [...d.errors, ...d.warnings];
      if (problems.length > 0) throw new Error(`${file}: ${problems.map((p) => p.message).join('; ')}`);
      return d.toJS() as unknown;
    })
    .filter(isNode)
    .map((doc) => {
      const metadata = doc['metadata'] as Node | undefined;
      return {
        file,
        doc,
        kind: String(doc['kind']),
        name: String(metadata?.['name']),
        namespace: metadata?.['namespace'] as string | undefined,
      };
    });
}

/** Everything under k8s/ of a rendering, as objects. */
function objectsOf(rendered: Map<string, string>): { objects: Obj[]; kustomization: Node } {
  const objects: Obj[] = [];
  let kustomization: Node | undefined;
  for (const [path, text] of rendered) {
    if (!path.startsWith('k8s/')) continue;
    const file = path.slice(4);
    if (file === 'kustomization.yaml') kustomization = parseYaml(text) as Node;
    else objects.push(...parseDocs(file, text));
  }
  if (!kustomization) throw new Error('no kustomization.yaml');
  return { objects, kustomization };
}

// Typed views of the parts the checks read.
interface Container {
  name: string;
  image: string;
  command?: string[];
  args?: string[];
  env?: { name: string; value?: string; valueFrom?: { secretKeyRef?: { name: string; key: string } } }[];
  ports?: { name?: string; containerPort: number }[];
  readinessProbe?: Probe;
  livenessProbe?: Probe;
  volumeMounts?: { name: string; mountPath: string }[];
  lifecycle?: { preStop?: { exec?: { command: string[] } } };
}
interface Probe {
  grpc?: { port: number; service?: string };
  httpGet?: { path: string; port: number | string };
  tcpSocket?: { port: number | string };
}
interface PodTemplate {
  metadata: { labels: Record<string, string> };
  spec: {
    serviceAccountName?: string;
    terminationGracePeriodSeconds?: number;
    containers: Container[];
    volumes?: { name: string; configMap?: { name: string }; emptyDir?: object }[];
    affinity?: {
      nodeAffinity?: {
        requiredDuringSchedulingIgnoredDuringExecution?: {
          nodeSelectorTerms: { matchExpressions: { key: string; operator: string; values: string[] }[] }[];
        };
      };
    };
  };
}

const spec = (o: Obj): Node => o.doc['spec'] as Node;
const template = (o: Obj): PodTemplate => (o.kind === 'Job' ? (spec(o)['template'] as PodTemplate) : (spec(o)['template'] as PodTemplate));
const containerOf = (o: Obj): Container => template(o).spec.containers[0]!;
const selects = (selector: Record<string, string> | undefined, labels: Record<string, string>): boolean =>
  selector !== undefined && Object.keys(selector).length > 0 && Object.entries(selector).every(([k, v]) => labels[k] === v);

/** `--name=value` or `--name value`. */
function flag(args: readonly string[] | undefined, name: string): string | undefined {
  const list = args ?? [];
  for (let i = 0; i < list.length; i++) {
    const arg = list[i]!;
    if (arg.startsWith(`--${name}=`)) return arg.slice(name.length + 3);
    if (arg === `--${name}`) return list[i + 1];
  }
  return undefined;
}

function zoneOf(o: Obj): string {
  const terms = template(o).spec.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms ?? [];
  expect(terms, `${o.kind}/${o.name}: one node selector term`).toHaveLength(1);
  const zone = terms[0]!.matchExpressions.find((e) => e.key === 'topology.kubernetes.io/zone');
  expect(zone?.operator, `${o.kind}/${o.name}: zone affinity`).toBe('In');
  expect(zone?.values, `${o.kind}/${o.name}: exactly one zone`).toHaveLength(1);
  return zone!.values[0]!;
}

/** The environment a container gets, with Secret values from `secret` and $(VAR) expanded as the kubelet does. */
function containerEnv(c: Container, secret: Record<string, string>): Record<string, string> {
  const env: Record<string, string> = {};
  for (const e of c.env ?? []) {
    if (e.valueFrom?.secretKeyRef) {
      const value = secret[e.valueFrom.secretKeyRef.key];
      if (value === undefined) throw new Error(`${c.name}: Secret key ${e.valueFrom.secretKeyRef.key} missing`);
      env[e.name] = value;
    } else {
      env[e.name] = (e.value ?? '').replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (whole, name: string) => env[name] ?? whole);
    }
  }
  return env;
}

// ---------------------------------------------------------------------------------------------

const TWO_ZONES = parseTopology(
  `pool: qwen
model: qwen-7b
namespace: inference
image: registry.example/spillway:1.2.3
natsImage: nats:2.10-alpine
zones:
  - { name: us-east1-b, region: us-east1, modelServers: 4 }
  - { name: us-west1-a, region: us-west1, modelServers: 0 }
`,
  'two-zone test topology',
);

/** Scheduler config keys only one policy reads (docs/picking.md): setting them under the other does nothing. */
const WEIGHTED_ONLY = ['queueThreshold', 'kvThreshold', 'weights'];
const COST_ONLY = ['zoneBiasMs', 'shedAboveMs', 'avoidablePrefill', 'rates', 'full'];

describe('infra/k8s is rendered from infra/topology.yaml', () => {
  it('the committed files are exactly what `npm run render` writes', () => {
    const rendered = renderAll(loadTopology(), { laptopNats: true });
    expect([...rendered.keys()].filter((p) => p.startsWith('k8s/')).length).toBeGreaterThanOrEqual(10);
    for (const [path, text] of rendered) expect(readFileSync(join(INFRA, path), 'utf8'), `${path} (run npm run render)`).toBe(text);
  });
});

describe('schema validation can fail', () => {
  it('rejects a Deployment without a selector or with a replica count that is not a number', () => {
    const { objects } = objectsOf(renderAll(loadTopology(), { laptopNats: false }));
    const epp = objects.find((o) => o.kind === 'Deployment' && o.name.startsWith('spillway-epp-'))!;
    const broken = structuredClone(epp.doc);
    (broken['spec'] as Node)['replicas'] = 'two';
    expect(() => validateObject(broken)).toThrow(/replicas must be integer/);
    delete (broken['spec'] as Node)['selector'];
    (broken['spec'] as Node)['replicas'] = 2;
    expect(() => validateObject(broken)).toThrow(/selector/);
  });

  it('rejects an InferencePool with a misspelt field, a bad failure mode, or a Service picker without port', () => {
    const { objects } = objectsOf(renderAll(loadTopology(), { laptopNats: false }));
    const pool = objects.find((o) => o.kind === 'InferencePool')!;
    const misspelt = structuredClone(pool.doc);
    (misspelt['spec'] as Node)['targetPort'] = (misspelt['spec'] as Node)['targetPorts'];
    expect(() => validateObject(misspelt)).toThrow(/additional properties/);
    const badMode = structuredClone(pool.doc);
    ((badMode['spec'] as Node)['endpointPickerRef'] as Node)['failureMode'] = 'FailSometimes';
    expect(() => validateObject(badMode)).toThrow(/allowed values/);
    const noPort = structuredClone(pool.doc);
    delete ((noPort['spec'] as Node)['endpointPickerRef'] as Node)['port'];
    expect(() => validateObject(noPort)).toThrow(/port is required/);
  });
});

describe.each([
  ['infra/topology.yaml', () => loadTopology()],
  ['a two-zone topology', () => TWO_ZONES],
])('manifests rendered from %s', (source, topologyOf) => {
  const topology: Topology = topologyOf();
  const { objects, kustomization } = objectsOf(renderAll(topology, { laptopNats: false }));
  const ofKind = (kind: string) => objects.filter((o) => o.kind === kind);
  const find = (kind: string, name: string) => objects.find((o) => o.kind === kind && o.name === name);
  const workloads = () => objects.filter((o) => ['Deployment', 'StatefulSet', 'Job'].includes(o.kind));
  const labelsOf = (o: Obj) => template(o).metadata.labels;
  const byApp = (app: string) => workloads().filter((o) => labelsOf(o)['app.kubernetes.io/name'] === app);
  const secretObj = objects.find((o) => o.kind === 'Secret')!;
  const secret = secretObj.doc['stringData'] as Record<string, string>;
  const zones = topology.zones.map((z) => z.name);
  const regionOf = (zone: string) => topology.zones.find((z) => z.name === zone)!.region;

  /** The NATS Service a URL names (nats://<service>.<ns>.svc.cluster.local:<port>) and the zone its server is pinned to. */
  function natsTarget(url: string | undefined): { service: Obj; server: Obj; zone: string | undefined } {
    const match = /^nats:\/\/([a-z0-9-]+)\.([a-z0-9-]+)\.svc\.cluster\.local:(\d+)$/.exec(url ?? '');
    expect(match, `NATS URL ${url}`).not.toBeNull();
    const [, serviceName, namespace, port] = match!;
    expect(namespace).toBe(topology.namespace);
    const service = find('Service', serviceName!);
    expect(service, `Service ${serviceName}`).toBeDefined();
    const servicePort = (spec(service!)['ports'] as { name: string; port: number }[]).find((p) => p.port === Number(port));
    expect(servicePort?.name, `${serviceName} port ${port}`).toBe('client');
    const servers = ofKind('StatefulSet').filter((s) => selects(spec(service!)['selector'] as Record<string, string>, labelsOf(s)));
    expect(servers, `${serviceName} selects one NATS server`).toHaveLength(1);
    const server = servers[0]!;
    const zone = labelsOf(server)['spillway.dev/zone'];
    return { service: service!, server, zone };
  }

  it('every object is valid against its schema, in the namespace, defined once', () => {
    expect(objects.length).toBeGreaterThan(10);
    const seen = new Set<string>();
    for (const o of objects) {
      expect(() => validateObject(o.doc), `${o.file} ${o.kind}/${o.name}`).not.toThrow();
      const key = `${o.kind}/${o.name}`;
      expect(seen.has(key), `${key} defined twice`).toBe(false);
      seen.add(key);
      if (o.kind !== 'Namespace') expect(o.namespace, `${o.file} ${key}`).toBe(topology.namespace);
    }
    expect(find('Namespace', topology.namespace)).toBeDefined();
  });

  it('kustomization.yaml applies every file but the credentials placeholders', () => {
    const files = [...new Set(objects.map((o) => o.file))];
    expect([...(kustomization['resources'] as string[])].sort()).toEqual(files.filter((f) => f !== secretObj.file).sort());
    expect(secretObj.file).toMatch(/\.example\.yaml$/);
    for (const value of Object.values(secret)) expect(value).toMatch(/^CHANGE_ME_/);
  });

  it('every workload selects its own pods, runs the topology images as a non-root user, and its accounts, volumes and secrets exist', () => {
    for (const w of workloads()) {
      const what = `${w.kind}/${w.name}`;
      if (w.kind !== 'Job')
        expect(selects((spec(w)['selector'] as Node)['matchLabels'] as Record<string, string>, labelsOf(w)), `${what}: selector`).toBe(
          true,
        );
      const pod = template(w).spec;
      if (pod.serviceAccountName !== undefined)
        expect(find('ServiceAccount', pod.serviceAccountName), `${what}: ServiceAccount`).toBeDefined();
      const volumes = pod.volumes ?? [];
      for (const v of volumes)
        if (v.configMap) expect(find('ConfigMap', v.configMap.name), `${what}: ConfigMap ${v.configMap.name}`).toBeDefined();
      const claims = ((spec(w)['volumeClaimTemplates'] as { metadata: { name: string } }[] | undefined) ?? []).map((c) => c.metadata.name);
      for (const c of pod.containers) {
        expect([topology.image, topology.natsImage, topology.envoyImage], `${what}: image`).toContain(c.image);
        expect(c.command, `${what}: command names the binary`).toHaveLength(1);
        for (const m of c.volumeMounts ?? [])
          expect([...volumes.map((v) => v.name), ...claims], `${what}: volume ${m.name}`).toContain(m.name);
        for (const e of c.env ?? []) {
          const ref = e.valueFrom?.secretKeyRef;
          if (!ref) continue;
          expect(ref.name, `${what}: Secret`).toBe(secretObj.name);
          expect(Object.keys(secret), `${what}: Secret key ${ref.key}`).toContain(ref.key);
        }
        expect((c as { securityContext?: Node }).securityContext).toMatchObject({
          runAsNonRoot: true,
          readOnlyRootFilesystem: true,
          allowPrivilegeEscalation: false,
        });
      }
    }
  });

  it('every Service selects pods that expose its target ports, and every PodDisruptionBudget one Deployment that can lose a pod', () => {
    for (const s of ofKind('Service')) {
      const selected = workloads().filter((w) => selects(spec(s)['selector'] as Record<string, string>, labelsOf(w)));
      if (s.name === topology.pool && topology.zones.every((z) => z.modelServers === 0)) continue;
      expect(selected.length, `Service ${s.name} selects pods`).toBeGreaterThan(0);
      for (const port of spec(s)['ports'] as { name: string; targetPort: string | number }[]) {
        for (const w of selected) {
          const names = (containerOf(w).ports ?? []).map((p) => p.name);
          expect(names, `Service ${s.name} port ${port.name} on ${w.name}`).toContain(port.targetPort);
        }
      }
    }
    const pdbs = ofKind('PodDisruptionBudget');
    // Per zone: the EPPs, spillway-xds, the gateway and the collectors.
    expect(pdbs.length).toBe(zones.length * 4);
    for (const p of pdbs) {
      const selected = ofKind('Deployment').filter((d) =>
        selects((spec(p)['selector'] as Node)['matchLabels'] as Record<string, string>, labelsOf(d)),
      );
      expect(
        selected.map((d) => d.name),
        `PDB ${p.name}`,
      ).toHaveLength(1);
      expect(Number(spec(p)['minAvailable'])).toBeLessThan(Number(spec(selected[0]!)['replicas']));
    }
  });

  it('each zone has two EPPs pinned to it, whose flags parse, name the topology zone and region, its NATS server and the probes', () => {
    const epps = byApp('spillway-epp');
    expect(epps.map(zoneOf).sort()).toEqual([...zones].sort());
    const dir = mkdtempSync(join(tmpdir(), 'spillway-epp-config-'));
    try {
      for (const d of epps) {
        const zone = zoneOf(d);
        const c = containerOf(d);
        expect(c.command).toEqual(['spillway-epp']);
        expect(spec(d)['replicas']).toBe(2);
        expect(spec(d)['strategy']).toEqual({ type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 0, maxSurge: 1 } });
        // --config names a key of a mounted ConfigMap; the EPP's own parser reads a copy of it.
        const configPath = flag(c.args, 'config')!;
        const mount = (c.volumeMounts ?? []).find((m) => configPath.startsWith(`${m.mountPath}/`));
        expect(mount, `${d.name}: --config is mounted`).toBeDefined();
        const volume = template(d).spec.volumes!.find((v) => v.name === mount!.name)!;
        const configMap = find('ConfigMap', volume.configMap!.name)!;
        const local = join(dir, 'config.yaml');
        writeFileSync(local, String((configMap.doc['data'] as Node)[configPath.slice(mount!.mountPath.length + 1)]));
        const config = loadEppConfig(
          (c.args ?? []).map((a) => (a === `--config=${configPath}` ? `--config=${local}` : a)),
          containerEnv(c, secret),
        );
        expect(config, d.name).toBeDefined();
        expect(config!.flags).toMatchObject({
          pool: topology.pool,
          zone,
          region: regionOf(zone),
          host: '0.0.0.0',
          subsetMode: 'locality',
          stream: AGGREGATE_STREAM,
          ensureStream: false,
        });
        expect(config!.nats.user).toBe(`epp-${zone}`);
        expect(config!.scheduler.subsetMode).toBe('locality');
        // The shipped config tunes the policy the EPPs run: no key of it is one the other policy reads.
        const raw = parseYaml(readFileSync(local, 'utf8')) as Record<string, unknown>;
        const inert = config!.scheduler.policy === 'cost' ? WEIGHTED_ONLY : COST_ONLY;
        expect(
          Object.keys(raw).filter((key) => inert.includes(key)),
          `${d.name}: keys its policy (${config!.scheduler.policy}) never reads`,
        ).toEqual([]);
        const target = natsTarget(config!.nats.servers[0]);
        expect(target.zone, `${d.name} reads its own zone's NATS`).toBe(zone);
        expect(zoneOf(target.server)).toBe(zone);
        // gRPC probes on the plaintext health port, which the container exposes.
        const health = Number(config!.flags.healthPort);
        expect(c.readinessProbe?.grpc).toEqual({ port: health, service: 'readiness' });
        expect(c.livenessProbe?.grpc).toEqual({ port: health, service: 'liveness' });
        const ports = Object.fromEntries((c.ports ?? []).map((p) => [p.name, p.containerPort]));
        expect(ports).toEqual({ grpc: Number(config!.flags.grpcPort), health, metrics: Number(config!.flags.metricsPort) });
        // The zone's own Service selects exactly this Deployment, on the ext_proc port.
        const service = find('Service', `spillway-epp-${zone}`)!;
        expect(epps.filter((e) => selects(spec(service)['selector'] as Record<string, string>, labelsOf(e))).map((e) => e.name)).toEqual([
          d.name,
        ]);
        expect((spec(service)['ports'] as { name: string; port: number }[]).find((p) => p.name === 'grpc')?.port).toBe(ports['grpc']);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("each zone's EPPs stop gracefully: preStop, drain delay, streams in flight and closing fit in the grace period; the zone's Service resolves to each EPP", () => {
    for (const d of byApp('spillway-epp')) {
      const zone = zoneOf(d);
      const c = containerOf(d);
      const config = loadEppConfig(
        (c.args ?? []).filter((a) => !a.startsWith('--config=')),
        containerEnv(c, secret),
      );
      const preStop = c.lifecycle?.preStop?.exec?.command ?? [];
      expect(preStop[0], `${d.name}: preStop sleeps (the image's coreutils)`).toBe('sleep');
      const preStopSeconds = Number(preStop[1]);
      // What the binary may take after SIGTERM: the drain delay, streams in flight, then close() (its own 10 s guard).
      const { drainDelayMs, drainTimeoutMs } = config!.flags;
      expect(
        drainDelayMs,
        `${d.name}: long enough for Envoy's EPP cluster (2 checks 2 s apart, 1 s timeout) to notice`,
      ).toBeGreaterThanOrEqual(2 * (2000 + 1000));
      const needed = preStopSeconds + (drainDelayMs + drainTimeoutMs) / 1000 + 10;
      expect(Number(template(d).spec.terminationGracePeriodSeconds), d.name).toBeGreaterThanOrEqual(needed);
      // Two EPPs, one of which may be disrupted at a time, behind a headless Service: every EPP a host of the zone's gateway.
      expect(spec(d)['replicas']).toBe(2);
      const pdb = find('PodDisruptionBudget', d.name)!;
      expect(spec(pdb)['minAvailable']).toBe(1);
      expect(spec(find('Service', `spillway-epp-${zone}`)!)['clusterIP']).toBe('None');
    }
  });

  it("each zone has spillway-xds pinned to it, whose flags parse, reading its zone's NATS aggregate, naming every zone, on the port its gateway dials", () => {
    const servers = byApp('spillway-xds');
    expect(servers.map(zoneOf).sort()).toEqual([...zones].sort());
    for (const d of servers) {
      const zone = zoneOf(d);
      const c = containerOf(d);
      expect(c.command).toEqual(['spillway-xds']);
      expect(spec(d)['replicas']).toBe(2);
      const config = loadXdsConfig(c.args ?? [], containerEnv(c, secret));
      expect(config, d.name).toBeDefined();
      expect(config!.flags).toMatchObject({
        pool: topology.pool,
        stream: AGGREGATE_STREAM,
        ensureStream: false,
        host: '0.0.0.0',
        clusterName: XDS_CLUSTER_NAME,
        zones,
      });
      // The EPP's NATS user: the same read rights on the zone's aggregate.
      expect(config!.nats.user).toBe(`epp-${zone}`);
      expect(natsTarget(config!.nats.servers[0]).zone).toBe(zone);
      const health = config!.flags.healthPort;
      expect(c.readinessProbe?.grpc).toEqual({ port: health, service: 'readiness' });
      expect(c.livenessProbe?.grpc).toEqual({ port: health, service: 'liveness' });
      const ports = Object.fromEntries((c.ports ?? []).map((p) => [p.name, p.containerPort]));
      expect(ports).toEqual({ grpc: config!.flags.port, health, metrics: config!.flags.metricsPort });
      // The zone's Service, on the port and name the zone's gateway bootstrap dials.
      const service = find('Service', `spillway-xds-${zone}`)!;
      expect(servers.filter((e) => selects(spec(service)['selector'] as Record<string, string>, labelsOf(e))).map((e) => e.name)).toEqual([
        d.name,
      ]);
      const grpcPort = (spec(service)['ports'] as { name: string; port: number }[]).find((p) => p.name === 'grpc')?.port;
      expect({ host: `spillway-xds-${zone}.${topology.namespace}.svc.cluster.local`, port: grpcPort }).toEqual(
        xdsAddressOf(topology, zone),
      );
      expect(grpcPort).toBe(ports['grpc']);
      expect(ADS_SERVICE_NAME).toBe('envoy.service.discovery.v3.AggregatedDiscoveryService');
    }
  });

  it("each zone has an Envoy gateway pinned to it, running the zone's rendered bootstrap, one node id per pod, behind a Service on its listener", () => {
    const gateways = byApp('spillway-gateway');
    expect(gateways.map(zoneOf).sort()).toEqual([...zones].sort());
    for (const d of gateways) {
      const zone = zoneOf(d);
      const c = containerOf(d);
      expect(c.image).toBe(topology.envoyImage);
      expect(c.command).toEqual(['envoy']);
      const args = c.args ?? [];
      const configPath = args[args.indexOf('--config-path') + 1]!;
      const mount = (c.volumeMounts ?? []).find((m) => configPath.startsWith(`${m.mountPath}/`))!;
      expect(mount, `${d.name}: --config-path is mounted`).toBeDefined();
      const configMap = find('ConfigMap', template(d).spec.volumes!.find((v) => v.name === mount.name)!.configMap!.name)!;
      const bootstrap = String((configMap.doc['data'] as Node)[configPath.slice(mount.mountPath.length + 1)]);
      // The bootstrap is the zone's rendered infra/envoy config (checked against Envoy's schema by envoy-config.test.ts).
      expect(bootstrap).toBe(renderEnvoyConfig(topology, zone));
      if (source === 'infra/topology.yaml') expect(bootstrap).toBe(readFileSync(join(INFRA, 'envoy', envoyFileOf(zone)), 'utf8'));
      const bootstrapNode = (parseYaml(bootstrap) as { node: { locality: { zone: string; region: string } } }).node;
      expect(bootstrapNode.locality).toEqual({ zone, region: regionOf(zone) });
      // Each pod names itself (the downward API), so spillway-xds's /debug/nodes tells them apart.
      expect(args[args.indexOf('--service-node') + 1]).toBe('$(POD_NAME)');
      expect(c.env).toContainEqual({ name: 'POD_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } });
      const listener = (
        parseYaml(bootstrap) as { static_resources: { listeners: { address: { socket_address: { port_value: number } } }[] } }
      ).static_resources.listeners[0]!.address.socket_address.port_value;
      expect(c.ports).toEqual([{ name: 'http', containerPort: listener }]);
      const service = find('Service', `spillway-gateway-${zone}`)!;
      expect(gateways.filter((g) => selects(spec(service)['selector'] as Record<string, string>, labelsOf(g))).map((g) => g.name)).toEqual([
        d.name,
      ]);
    }
  });

  it('each zone has collectors pinned to it that roll one at a time, publish into the zone stream and watch the pool', () => {
    const collectors = byApp('spillway-collector');
    expect(collectors.map(zoneOf).sort()).toEqual([...zones].sort());
    for (const d of collectors) {
      const zone = zoneOf(d);
      const c = containerOf(d);
      expect(c.command).toEqual(['spillway-collector']);
      // Never fewer than two publishing while rolling: a new pod is ready before an old one goes.
      expect(spec(d)['replicas']).toBe(2);
      expect(spec(d)['strategy']).toEqual({ type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 0, maxSurge: 1 } });
      const parsed = parseCollectorArgs(c.args ?? [], containerEnv(c, secret));
      if (parsed.help) throw new Error('unexpected --help');
      const config = parsed.config;
      expect(config).toMatchObject({ pool: topology.pool, zone, region: regionOf(zone), stream: zoneStreamName(zone) });
      expect(config.nats.user).toBe(`collector-${zone}`);
      expect(natsTarget(config.nats.servers[0]).zone).toBe(zone);
      expect(config.kube).toMatchObject({
        namespace: topology.namespace,
        selector: `kubernetes.io/service-name=${topology.pool}`,
        port: 'http',
        allZones: false,
      });
      const service = find('Service', topology.pool)!;
      expect((spec(service)['ports'] as { name: string }[]).map((p) => p.name)).toContain(config.kube!.port);
      const metrics = (c.ports ?? []).find((p) => p.name === 'metrics');
      expect(metrics?.containerPort).toBe(config.metricsPort);
      expect(c.readinessProbe?.httpGet).toEqual({ path: '/health', port: 'metrics' });
    }
    // Only the collectors read the Kubernetes API: get, list and watch EndpointSlices.
    const account = template(collectors[0]!).spec.serviceAccountName;
    const binding = ofKind('RoleBinding').find((b) => (b.doc['subjects'] as { name: string }[]).some((s) => s.name === account))!;
    const role = find('Role', (binding.doc['roleRef'] as { name: string }).name)!;
    expect(role.doc['rules']).toEqual([
      { apiGroups: ['discovery.k8s.io'], resources: ['endpointslices'], verbs: ['get', 'list', 'watch'] },
    ]);
    for (const sa of ofKind('ServiceAccount')) if (sa.name !== account) expect(sa.doc['automountServiceAccountToken']).toBe(false);
  });

  it('model servers: the topology replicas per zone, on the port the InferencePool targets', () => {
    const servers = workloads().filter((w) => labelsOf(w)['app'] === topology.pool);
    expect(Object.fromEntries(servers.map((d) => [zoneOf(d), spec(d)['replicas']]))).toEqual(
      Object.fromEntries(topology.zones.filter((z) => z.modelServers > 0).map((z) => [z.name, z.modelServers])),
    );
    const pool = ofKind('InferencePool')[0]!;
    const target = (spec(pool)['targetPorts'] as { number: number }[])[0]!.number;
    for (const d of servers) {
      const c = containerOf(d);
      expect(c.command).toEqual(['spillway-sim']);
      const parsed = parseSimArgs(c.args ?? []);
      if (parsed.help) throw new Error('unexpected --help');
      expect(parsed.options).toMatchObject({ host: '0.0.0.0', port: target, model: topology.model });
      expect(c.ports).toEqual([{ name: 'http', containerPort: target }]);
    }
    // The pool's picker is the Service over every zone's EPPs, on its gRPC port.
    const ref = spec(pool)['endpointPickerRef'] as { name: string; port: { number: number }; failureMode: string };
    const service = find('Service', ref.name)!;
    expect((spec(service)['ports'] as { port: number }[]).map((p) => p.port)).toContain(ref.port.number);
    expect(
      new Set(
        byApp('spillway-epp')
          .filter((e) => selects(spec(service)['selector'] as Record<string, string>, labelsOf(e)))
          .map(zoneOf),
      ),
    ).toEqual(new Set(zones));
    expect(selects((spec(pool)['selector'] as Node)['matchLabels'] as Record<string, string>, { app: topology.pool })).toBe(true);
  });

  it("each zone's provisioning Job runs spillway-provision as the zone's admin against the zone's NATS, naming every zone", () => {
    const jobs = ofKind('Job');
    expect(jobs.map((j) => labelsOf(j)['spillway.dev/zone']).sort()).toEqual([...zones].sort());
    for (const j of jobs) {
      const zone = labelsOf(j)['spillway.dev/zone']!;
      const c = containerOf(j);
      expect(c.command).toEqual(['spillway-provision']);
      const options = parseProvisionArgs(c.args ?? [], containerEnv(c, secret))!;
      expect(options).toMatchObject({ zone, zones, aggregateStream: AGGREGATE_STREAM });
      expect(options.nats.user).toBe(`admin-${zone}`);
      expect(natsTarget(options.nats.servers[0]).zone).toBe(zone);
    }
  });

  it("NATS: a server per zone pinned to it, a hub, leaf URLs to the hub's leaf port, and every credential the configs name in the Secret", () => {
    const servers = byApp('spillway-nats');
    const hub = servers.find((s) => labelsOf(s)['spillway.dev/zone'] === undefined)!;
    expect(hub).toBeDefined();
    expect(
      servers
        .filter((s) => s !== hub)
        .map(zoneOf)
        .sort(),
    ).toEqual([...zones].sort());
    const hubService = ofKind('Service').find((s) => selects(spec(s)['selector'] as Record<string, string>, labelsOf(hub)))!;
    const leafPort = (spec(hubService)['ports'] as { name: string; port: number }[]).find((p) => p.name === 'leafnodes')!.port;
    const configOf = (s: Obj) =>
      String(
        (find('ConfigMap', template(s).spec.volumes!.find((v) => v.name === 'config')!.configMap!.name)!.doc['data'] as Node)['nats.conf'],
      );
    const hubConfig = configOf(hub);
    const used = new Set<string>();
    for (const s of servers) {
      const c = containerOf(s);
      const env = containerEnv(c, secret);
      for (const e of c.env ?? []) if (e.valueFrom?.secretKeyRef) used.add(e.valueFrom.secretKeyRef.key);
      // Every variable the config names is in the container's environment.
      const config = configOf(s);
      const variables = [...config.matchAll(/\$([A-Z][A-Z0-9_]*)/g)].map((m) => m[1]!).filter((v) => v.startsWith('NATS_'));
      expect(variables.length).toBeGreaterThan(0);
      for (const v of variables) expect(Object.keys(env), `${s.name}: $${v}`).toContain(v);
      const zone = labelsOf(s)['spillway.dev/zone'];
      expect(config).toContain(`domain: "${zone ?? 'hub'}"`);
      if (zone === undefined) continue;
      // The leaf URL dials the hub's Service on its leaf port as leaf-<zone>, a user the hub knows.
      const url = new URL(env['NATS_LEAF_URL']!);
      expect(url.protocol).toBe('nats-leaf:');
      expect(url.hostname).toBe(`${hubService.name}.${topology.namespace}.svc.cluster.local`);
      expect(Number(url.port)).toBe(leafPort);
      expect(url.username).toBe(`leaf-${zone}`);
      expect(url.password).toBe(secret[`leaf-${zone}`]);
      expect(hubConfig).toContain(
        `{ user: "leaf-${zone}", password: $NATS_PASSWORD_LEAF_${zone.toUpperCase().replace(/-/g, '_')}, account: "SPILLWAY" }`,
      );
      // The zone's config defines the users the zone's EPP, collector and Job log in as.
      for (const user of [`admin-${zone}`, `collector-${zone}`, `epp-${zone}`]) expect(config).toContain(`user: "${user}"`);
    }
    // Every secret is used by some server, and every client user (EPP, collector, Job) is defined by one.
    for (const w of [...byApp('spillway-epp'), ...byApp('spillway-xds'), ...byApp('spillway-collector'), ...ofKind('Job')]) {
      const user = containerOf(w).env?.find((e) => e.name === 'NATS_USER')?.value;
      expect(Object.keys(secret)).toContain(user);
      used.add(user!);
    }
    expect([...used].sort()).toEqual(Object.keys(secret).sort());
  });

  it('the NATS configs are valid for nats-server -t with the Secret in the environment', () => {
    if (!natsServerAvailable()) throw new Error('nats-server is not on PATH (apt-get install nats-server)');
    const dir = mkdtempSync(join(tmpdir(), 'spillway-k8s-nats-'));
    try {
      for (const s of byApp('spillway-nats')) {
        const c = containerOf(s);
        const configMap = find('ConfigMap', template(s).spec.volumes!.find((v) => v.name === 'config')!.configMap!.name)!;
        const path = join(dir, `${s.name}.conf`);
        // The store path is the pod's; a test machine may not write /data.
        writeFileSync(
          path,
          String((configMap.doc['data'] as Node)['nats.conf']).replace('"/data/jetstream"', JSON.stringify(join(dir, s.name))),
        );
        const result = spawnSync('nats-server', ['-t', '-c', path], {
          encoding: 'utf8',
          env: { PATH: process.env['PATH'] ?? '', ...containerEnv(c, secret) },
        });
        expect(result.status, `${s.name}: ${result.stdout}${result.stderr}`).toBe(0);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('the EPP ConfigMap is a valid scheduler config in locality mode', () => {
    const configMap = find('ConfigMap', 'spillway-epp-config')!;
    const config = parseSchedulerConfig(parseYaml(String((configMap.doc['data'] as Node)['config.yaml'])));
    expect(config).toMatchObject({ subsetMode: 'locality', maxEndpoints: 3, crossZoneFallbacks: 1 });
    expect(Object.keys(config.objectives).length).toBeGreaterThan(0);
  });

  it('the demo runs the same zones, regions and model servers', () => {
    expect(zoneSpecsOf(topology)).toEqual(topology.zones.map((z) => ({ zone: z.name, region: z.region, servers: z.modelServers })));
  });
});
