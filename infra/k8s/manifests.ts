/**
 * The Kubernetes manifests of a zonal Spillway deployment, built from the topology
 * (infra/topology.yaml): per zone a NATS server (its own JetStream domain, a leaf node of the hub),
 * a Job that provisions its streams, two EPPs with a PodDisruptionBudget, two spillway-xds, an
 * Envoy gateway whose bootstrap is infra/envoy's, two collectors that roll one at a time, and
 * example model servers; plus the hub, RBAC, the EPP config, the Services and the InferencePool. Objects are typed with kubernetes-models, so a misspelt field does not compile;
 * test/infra/k8s-manifests.test.ts validates each against its schema and checks they fit together.
 */
import type { IDeployment, IStatefulSet } from 'kubernetes-models/apps/v1';
import type { IJob } from 'kubernetes-models/batch/v1';
import type { IPodDisruptionBudget } from 'kubernetes-models/policy/v1';
import type { IRole, IRoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1';
import type {
  IConfigMap,
  IContainer,
  IEnvVar,
  INamespace,
  IPodSpec,
  ISecret,
  IService,
  IServiceAccount,
  IAffinity,
  ISecurityContext,
  IVolume,
} from 'kubernetes-models/v1';
import { AGGREGATE_STREAM, zoneStreamName } from '@spillway/bus';
import { envoyFileOf, GATEWAY_PORT, renderEnvoyConfig, XDS_CLUSTER_NAME } from '../envoy/render.js';
import { LEAF_URL_VARIABLE, passwordVariable, renderZoneTopology, type RenderedTopology } from '../nats/topology.js';
import type { Topology, TopologyZone } from '../topology.js';

/** An InferencePool of Gateway API Inference Extension v1 (no kubernetes-models class: a CRD). */
export interface InferencePool {
  apiVersion: 'inference.networking.k8s.io/v1';
  kind: 'InferencePool';
  metadata: { name: string; namespace: string; labels: Record<string, string> };
  spec: {
    selector: { matchLabels: Record<string, string> };
    targetPorts: { number: number }[];
    endpointPickerRef: { kind: 'Service'; name: string; port: { number: number }; failureMode: 'FailOpen' | 'FailClose' };
  };
}

export interface Kustomization {
  apiVersion: 'kustomize.config.k8s.io/v1beta1';
  kind: 'Kustomization';
  resources: string[];
}

export type Manifest =
  | INamespace
  | IServiceAccount
  | IRole
  | IRoleBinding
  | IConfigMap
  | ISecret
  | IService
  | IDeployment
  | IStatefulSet
  | IJob
  | IPodDisruptionBudget
  | InferencePool;

/** One rendered file: a header comment and its objects. */
export interface ManifestFile {
  file: string;
  header: string;
  objects: Manifest[];
}

/** Ports, names and paths the manifests share (the tests read them from the objects, not from here). */
export const PORTS = {
  eppGrpc: 9002,
  eppHealth: 9003,
  eppMetrics: 9090,
  collectorMetrics: 9091,
  xds: 18000,
  xdsHealth: 18001,
  xdsMetrics: 9092,
  gateway: GATEWAY_PORT,
  modelServer: 8000,
  natsClient: 4222,
  natsLeaf: 7422,
  natsMonitor: 8222,
} as const;
export const SECRET_NAME = 'spillway-nats-credentials';
export const EPP_CONFIG_MAP = 'spillway-epp-config';
const CONFIG_DIR = '/etc/spillway';
const NATS_CONFIG_DIR = '/etc/nats-config';
const NATS_STORE = '/data/jetstream';
/** The user the image runs as (Dockerfile); numeric, so the kubelet can check runAsNonRoot. */
const RUN_AS = 1000;

const ZONE_LABEL = 'topology.kubernetes.io/zone';
const PART_OF = { 'app.kubernetes.io/part-of': 'spillway' };

export const names = {
  epp: (zone: string) => `spillway-epp-${zone}`,
  collector: (zone: string) => `spillway-collector-${zone}`,
  nats: (zone: string) => `spillway-nats-${zone}`,
  natsHub: 'spillway-nats-hub',
  provision: (zone: string) => `spillway-nats-provision-${zone}`,
  modelServers: (zone: string, pool: string) => `${pool}-${zone}`,
  eppService: 'spillway-epp',
  xds: (zone: string) => `spillway-xds-${zone}`,
  gateway: (zone: string) => `spillway-gateway-${zone}`,
};

/** `<service>.<namespace>.svc.cluster.local`, the name every other pod reaches a Service by. */
export function serviceHost(service: string, namespace: string): string {
  return `${service}.${namespace}.svc.cluster.local`;
}

export function natsUrlOf(zone: string, namespace: string): string {
  return `nats://${serviceHost(names.nats(zone), namespace)}:${PORTS.natsClient}`;
}

// ---------------------------------------------------------------------------------------------
// Small builders

function meta(topology: Topology, name: string, labels: Record<string, string> = {}) {
  return { name, namespace: topology.namespace, labels: { ...labels, ...PART_OF } };
}

function zoneAffinity(zone: string, app: string): IAffinity {
  return {
    // Pinned to its zone: its "local" is this zone, and it talks to this zone's pods.
    nodeAffinity: {
      requiredDuringSchedulingIgnoredDuringExecution: {
        nodeSelectorTerms: [{ matchExpressions: [{ key: ZONE_LABEL, operator: 'In', values: [zone] }] }],
      },
    },
    // Replicas on different nodes where possible, so one node going down takes one replica.
    podAntiAffinity: {
      preferredDuringSchedulingIgnoredDuringExecution: [
        {
          weight: 100,
          podAffinityTerm: {
            topologyKey: 'kubernetes.io/hostname',
            labelSelector: { matchLabels: { 'app.kubernetes.io/name': app, 'spillway.dev/zone': zone } },
          },
        },
      ],
    },
  };
}

const hardened: ISecurityContext = {
  runAsNonRoot: true,
  allowPrivilegeEscalation: false,
  readOnlyRootFilesystem: true,
  capabilities: { drop: ['ALL'] },
  seccompProfile: { type: 'RuntimeDefault' },
};

/** Pod-level settings every Spillway pod shares: the image's numeric non-root user, no API token. */
function podBasics(
  serviceAccountName: string,
  automountToken: boolean,
): Pick<IPodSpec, 'serviceAccountName' | 'automountServiceAccountToken' | 'securityContext'> {
  return {
    serviceAccountName,
    automountServiceAccountToken: automountToken,
    securityContext: { runAsUser: RUN_AS, runAsGroup: RUN_AS, fsGroup: RUN_AS, runAsNonRoot: true },
  };
}

/** NATS_USER and NATS_PASSWORD (read by every binary's NATS flags) for one user of the topology. */
function natsUserEnv(user: string): IEnvVar[] {
  return [
    { name: 'NATS_USER', value: user },
    { name: 'NATS_PASSWORD', valueFrom: { secretKeyRef: { name: SECRET_NAME, key: user } } },
  ];
}

/** The environment a NATS server's config refers to: each user's password, and a zone's leaf URL. */
function natsServerEnv(users: string[], leaf?: { user: string; hubHost: string }): IEnvVar[] {
  const fromSecret = (user: string): IEnvVar => ({
    name: passwordVariable(user),
    valueFrom: { secretKeyRef: { name: SECRET_NAME, key: user } },
  });
  const env: IEnvVar[] = users.map(fromSecret);
  if (leaf) {
    // The kubelet expands $(VAR) only from variables listed before it.
    env.push(fromSecret(leaf.user));
    // $(VAR) is expanded by the kubelet from the variable above, so the password stays in the Secret
    // (user names are URL-safe; the passwords must be too, see credentialsSecret).
    env.push({
      name: LEAF_URL_VARIABLE,
      value: `nats-leaf://${leaf.user}:$(${passwordVariable(leaf.user)})@${leaf.hubHost}:${PORTS.natsLeaf}`,
    });
  }
  return env;
}

/** A writable /tmp on a read-only root filesystem (Node.js itself writes nothing, libraries might). */
const tmpVolume = { name: 'tmp', emptyDir: { sizeLimit: '64Mi' } };
const tmpMount = { name: 'tmp', mountPath: '/tmp' };

/** One zone's Deployment of one app, its PodDisruptionBudget, and the labels that select its pods. */
interface ZonalWorkload {
  zone: string;
  /** `app.kubernetes.io/name`, also the ServiceAccount. */
  app: string;
  name: string;
  /** Only the collector talks to the Kubernetes API. */
  automountToken: boolean;
  container: IContainer;
  volumes: IVolume[];
  terminationGracePeriodSeconds?: number;
}

/**
 * Two replicas pinned to the zone (on different nodes where possible). Never fewer ready pods than
 * replicas while rolling: the new pod must be ready (an EPP's or spillway-xds's replay caught up)
 * before an old one goes; and a node drain may take one of the zone's pods at a time, never both.
 */
function zonalWorkload(
  topology: Topology,
  w: ZonalWorkload,
): { labels: Record<string, string>; deployment: IDeployment; pdb: IPodDisruptionBudget } {
  const labels = { 'app.kubernetes.io/name': w.app, 'spillway.dev/zone': w.zone };
  const deployment: IDeployment = {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: meta(topology, w.name, labels),
    spec: {
      replicas: 2,
      strategy: { type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 0, maxSurge: 1 } },
      selector: { matchLabels: labels },
      template: {
        metadata: { labels: { ...labels, ...PART_OF } },
        spec: {
          ...podBasics(w.app, w.automountToken),
          affinity: zoneAffinity(w.zone, w.app),
          ...(w.terminationGracePeriodSeconds === undefined ? {} : { terminationGracePeriodSeconds: w.terminationGracePeriodSeconds }),
          containers: [w.container],
          volumes: w.volumes,
        },
      },
    },
  };
  const pdb: IPodDisruptionBudget = {
    apiVersion: 'policy/v1',
    kind: 'PodDisruptionBudget',
    metadata: meta(topology, w.name, labels),
    spec: { minAvailable: 1, selector: { matchLabels: labels } },
  };
  return { labels, deployment, pdb };
}

// ---------------------------------------------------------------------------------------------
// NATS: the topology of infra/nats, rendered for pods (all addresses, env-var secrets)

/** The NATS configs for the cluster: the same renderer as the laptop configs, other addresses. */
export function clusterNatsTopology(topology: Topology): RenderedTopology {
  return renderZoneTopology({
    host: '0.0.0.0',
    hubAddress: serviceHost(names.natsHub, topology.namespace),
    hub: { clientPort: PORTS.natsClient, leafPort: PORTS.natsLeaf, storeDir: NATS_STORE, monitorPort: PORTS.natsMonitor },
    zones: topology.zones.map((z) => ({
      zone: z.name,
      clientPort: PORTS.natsClient,
      storeDir: NATS_STORE,
      monitorPort: PORTS.natsMonitor,
    })),
    secrets: 'environment',
  });
}

/** Every NATS user of the topology, each a key of the credentials Secret. */
export function natsUsers(topology: Topology): string[] {
  const nats = clusterNatsTopology(topology);
  return [
    nats.hub.users.admin.user,
    ...nats.zones.flatMap((z) => [`leaf-${z.zone}`, z.users.admin.user, z.users.collector.user, z.users.epp.user]),
  ];
}

/** One NATS server: its config, the environment the config refers to, its zone (none for the hub) and ports. */
interface NatsServerSpec {
  name: string;
  config: string;
  env: IEnvVar[];
  zone: string | undefined;
  ports: { name: string; containerPort: number }[];
}

function natsServer(topology: Topology, { name, config, env, zone, ports }: NatsServerSpec): Manifest[] {
  const labels = {
    'app.kubernetes.io/name': 'spillway-nats',
    'app.kubernetes.io/instance': name,
    ...(zone ? { 'spillway.dev/zone': zone } : {}),
  };
  const selector = { 'app.kubernetes.io/instance': name };
  const container: IContainer = {
    name: 'nats',
    image: topology.natsImage,
    command: ['nats-server'],
    args: ['--config', `${NATS_CONFIG_DIR}/nats.conf`],
    env,
    ports,
    // /healthz answers once the server (and, with the flag, JetStream) is up.
    readinessProbe: { httpGet: { path: '/healthz?js-enabled-only=true', port: 'monitor' }, periodSeconds: 5, failureThreshold: 3 },
    livenessProbe: { tcpSocket: { port: 'client' }, initialDelaySeconds: 10, periodSeconds: 10, failureThreshold: 6 },
    volumeMounts: [
      { name: 'config', mountPath: NATS_CONFIG_DIR, readOnly: true },
      { name: 'data', mountPath: '/data' },
    ],
    resources: { requests: { cpu: '100m', memory: '128Mi' }, limits: { memory: '1Gi' } },
    securityContext: hardened,
  };
  const statefulSet: IStatefulSet = {
    apiVersion: 'apps/v1',
    kind: 'StatefulSet',
    metadata: meta(topology, name, labels),
    spec: {
      serviceName: name,
      replicas: 1,
      selector: { matchLabels: selector },
      template: {
        metadata: { labels: { ...labels, ...PART_OF } },
        spec: {
          ...podBasics('spillway-nats', false),
          ...(zone ? { affinity: { nodeAffinity: zoneAffinity(zone, 'spillway-nats').nodeAffinity } } : {}),
          // Lame-duck shutdown takes a while: let it close client connections gracefully.
          terminationGracePeriodSeconds: 60,
          containers: [container],
          volumes: [{ name: 'config', configMap: { name } }, ...(zone ? [] : [{ name: 'data', emptyDir: {} }])],
        },
      },
      // A zone's store survives restarts; the hub stores nothing, so it gets an emptyDir.
      ...(zone
        ? {
            volumeClaimTemplates: [
              {
                metadata: { name: 'data', labels: PART_OF },
                spec: { accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '10Gi' } } },
              },
            ],
          }
        : {}),
    },
  };
  const configMap: IConfigMap = {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: meta(topology, name, labels),
    data: { 'nats.conf': config },
  };
  const service: IService = {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: meta(topology, name, labels),
    spec: { selector, ports: ports.map((p) => ({ name: p.name, port: p.containerPort, targetPort: p.name })) },
  };
  return [configMap, service, statefulSet];
}

function natsFile(topology: Topology): ManifestFile {
  const nats = clusterNatsTopology(topology);
  const hubUsers = [nats.hub.users.admin.user, ...nats.zones.map((z) => `leaf-${z.zone}`)];
  const hubPorts = [
    { name: 'client', containerPort: PORTS.natsClient },
    { name: 'leafnodes', containerPort: PORTS.natsLeaf },
    { name: 'monitor', containerPort: PORTS.natsMonitor },
  ];
  const zonePorts = [
    { name: 'client', containerPort: PORTS.natsClient },
    { name: 'monitor', containerPort: PORTS.natsMonitor },
  ];
  const hubHost = serviceHost(names.natsHub, topology.namespace);
  return {
    file: 'nats.yaml',
    header: `NATS, one JetStream domain per zone joined by leaf nodes to a hub (the topology of infra/nats,
rendered by infra/nats/topology.ts for pods). Each zone's server runs in its zone with its own store;
the hub runs anywhere and stores nothing. Passwords come from Secret ${SECRET_NAME} as environment
variables that the configs name ($NATS_PASSWORD_<USER>, $${LEAF_URL_VARIABLE}). One server per zone:
for a zone that must survive losing its NATS server, run a 3-server cluster with the same domain.`,
    objects: [
      ...natsServer(topology, {
        name: names.natsHub,
        config: nats.hub.config,
        env: natsServerEnv(hubUsers),
        zone: undefined,
        ports: hubPorts,
      }),
      ...nats.zones.flatMap((z) =>
        natsServer(topology, {
          name: names.nats(z.zone),
          config: z.config,
          env: natsServerEnv([z.users.admin.user, z.users.collector.user, z.users.epp.user], { user: `leaf-${z.zone}`, hubHost }),
          zone: z.zone,
          ports: zonePorts,
        }),
      ),
    ],
  };
}

function provisionFile(topology: Topology): ManifestFile {
  const zones = topology.zones.map((z) => z.name);
  return {
    file: 'nats-provision.yaml',
    header: `One Job per zone creates the zone's streams with the zone's admin user (spillway-provision): the zone
stream SPILLWAY_<ZONE> and the local aggregate ${AGGREGATE_STREAM} the EPPs read. Idempotent; it retries
until the zone's NATS answers. A Job's spec cannot change: delete the Jobs before applying a changed
topology (kubectl -n ${topology.namespace} delete job -l app.kubernetes.io/name=spillway-nats-provision).`,
    objects: topology.zones.map((z): IJob => {
      const labels = { 'app.kubernetes.io/name': 'spillway-nats-provision', 'spillway.dev/zone': z.name };
      return {
        apiVersion: 'batch/v1',
        kind: 'Job',
        metadata: meta(topology, names.provision(z.name), labels),
        spec: {
          backoffLimit: 10,
          template: {
            metadata: { labels: { ...labels, ...PART_OF } },
            spec: {
              ...podBasics('spillway-nats-provision', false),
              restartPolicy: 'OnFailure',
              containers: [
                {
                  name: 'provision',
                  image: topology.image,
                  command: ['spillway-provision'],
                  args: [`--nats=${natsUrlOf(z.name, topology.namespace)}`, `--zone=${z.name}`, `--zones=${zones.join(',')}`],
                  env: natsUserEnv(`admin-${z.name}`),
                  resources: { requests: { cpu: '50m', memory: '64Mi' }, limits: { memory: '256Mi' } },
                  securityContext: hardened,
                },
              ],
            },
          },
        },
      };
    }),
  };
}

// ---------------------------------------------------------------------------------------------
// Spillway

/**
 * How an EPP pod stops (docs/operations.md, "Restarts"). preStop: a short wait while the pod leaves
 * its Services' endpoints (kube-proxy, DNS), the EPP still serving as before; then SIGTERM starts the
 * EPP's own drain: NOT_SERVING at once, `drainDelayMs` more of picking while the gateways' health
 * checks notice (Envoy's EPP cluster: 2 failed checks, 2 s apart, 1 s timeout), then no new
 * connection while the streams in flight finish (at most `drainTimeoutMs`), then closing (the
 * binary exits by itself within `closeSeconds` more). The grace period covers all of it.
 */
export const EPP_STOP = { preStopSeconds: 2, drainDelayMs: 6_000, drainTimeoutMs: 30_000, closeSeconds: 10 } as const;
const EPP_GRACE_SECONDS = EPP_STOP.preStopSeconds + (EPP_STOP.drainDelayMs + EPP_STOP.drainTimeoutMs) / 1000 + EPP_STOP.closeSeconds;

function eppFile(topology: Topology): ManifestFile {
  const perZone = topology.zones.flatMap((z): Manifest[] => {
    const name = names.epp(z.name);
    const { labels, deployment, pdb } = zonalWorkload(topology, {
      zone: z.name,
      app: 'spillway-epp',
      name,
      automountToken: false,
      terminationGracePeriodSeconds: EPP_GRACE_SECONDS,
      container: {
        name: 'epp',
        image: topology.image,
        command: ['spillway-epp'],
        args: [
          `--pool=${topology.pool}`,
          `--zone=${z.name}`,
          `--region=${z.region}`,
          `--nats=${natsUrlOf(z.name, topology.namespace)}`,
          // The zone's local aggregate, provisioned by the Job; the EPP user may not create it.
          `--stream=${AGGREGATE_STREAM}`,
          '--ensure-stream=false',
          '--host=0.0.0.0',
          `--grpc-port=${PORTS.eppGrpc}`,
          `--health-port=${PORTS.eppHealth}`,
          `--metrics-port=${PORTS.eppMetrics}`,
          '--subset-mode=locality',
          `--config=${CONFIG_DIR}/config.yaml`,
          `--drain-delay-ms=${EPP_STOP.drainDelayMs}`,
          `--drain-timeout-ms=${EPP_STOP.drainTimeoutMs}`,
        ],
        env: natsUserEnv(`epp-${z.name}`),
        lifecycle: { preStop: { exec: { command: ['sleep', String(EPP_STOP.preStopSeconds)] } } },
        ports: [
          { name: 'grpc', containerPort: PORTS.eppGrpc },
          { name: 'health', containerPort: PORTS.eppHealth },
          { name: 'metrics', containerPort: PORTS.eppMetrics },
        ],
        // Readiness gates the Service: an EPP whose replay has not caught up gets no traffic.
        // gRPC probes on the plaintext health port (kubelet probes present no client certificate).
        readinessProbe: { grpc: { port: PORTS.eppHealth, service: 'readiness' }, periodSeconds: 2, failureThreshold: 3 },
        livenessProbe: {
          grpc: { port: PORTS.eppHealth, service: 'liveness' },
          initialDelaySeconds: 5,
          periodSeconds: 10,
          failureThreshold: 3,
        },
        volumeMounts: [{ name: 'config', mountPath: CONFIG_DIR, readOnly: true }, tmpMount],
        resources: { requests: { cpu: '500m', memory: '256Mi' }, limits: { memory: '1Gi' } },
        securityContext: hardened,
      },
      volumes: [{ name: 'config', configMap: { name: EPP_CONFIG_MAP } }, tmpVolume],
    });
    const service: IService = {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: meta(topology, name, labels),
      spec: {
        // Headless: the name resolves to each ready EPP of the zone, so a gateway's STRICT_DNS
        // cluster (infra/envoy) holds every EPP as a host of its own, health-checks each and stops
        // sending to one that drains while the other takes its streams. (A virtual IP would be one
        // host whose connections land on either EPP.)
        clusterIP: 'None',
        selector: labels,
        ports: [
          // Plaintext gRPC: HTTP/2 without TLS.
          { name: 'grpc', port: PORTS.eppGrpc, targetPort: 'grpc', appProtocol: 'kubernetes.io/h2c' },
          { name: 'metrics', port: PORTS.eppMetrics, targetPort: 'metrics' },
        ],
      },
    };
    return [deployment, pdb, service];
  });
  const poolService: IService = {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: meta(topology, names.eppService, { 'app.kubernetes.io/name': 'spillway-epp' }),
    spec: {
      selector: { 'app.kubernetes.io/name': 'spillway-epp' },
      // Keeps each gateway on its own zone's EPPs while they are available (Kubernetes >= 1.31;
      // whether a gateway honours it depends on the gateway).
      trafficDistribution: 'PreferClose',
      ports: [{ name: 'grpc', port: PORTS.eppGrpc, targetPort: 'grpc', appProtocol: 'kubernetes.io/h2c' }],
    },
  };
  return {
    file: 'epp.yaml',
    header: `Per zone: the EPP Deployment (2 replicas pinned to the zone, --zone and --region from the topology,
a graceful stop: preStop, drain delay, streams in flight, covered by terminationGracePeriodSeconds),
its PodDisruptionBudget (one of the two may be disrupted at a time) and headless Service
${names.epp('<zone>')} (each EPP a host of a gateway per zone, e.g. infra/envoy).
Service ${names.eppService} spans every zone's EPPs for the InferencePool.`,
    objects: [...perZone, poolService],
  };
}

function xdsFile(topology: Topology): ManifestFile {
  const zones = topology.zones.map((z) => z.name);
  const perZone = topology.zones.flatMap((z): Manifest[] => {
    const name = names.xds(z.name);
    const { labels, deployment, pdb } = zonalWorkload(topology, {
      zone: z.name,
      app: 'spillway-xds',
      name,
      automountToken: false,
      container: {
        name: 'xds',
        image: topology.image,
        command: ['spillway-xds'],
        args: [
          `--pool=${topology.pool}`,
          `--nats=${natsUrlOf(z.name, topology.namespace)}`,
          // The zone's local aggregate, like the zone's EPPs: a zone cut off from the others
          // keeps serving its gateways from local data.
          `--stream=${AGGREGATE_STREAM}`,
          '--ensure-stream=false',
          '--host=0.0.0.0',
          `--port=${PORTS.xds}`,
          `--health-port=${PORTS.xdsHealth}`,
          `--metrics-port=${PORTS.xdsMetrics}`,
          `--cluster-name=${XDS_CLUSTER_NAME}`,
          // A gateway naming any other zone is refused with a clear error.
          `--zones=${zones.join(',')}`,
        ],
        // Reads what the zone's EPPs read, with their NATS user (consumers on the aggregate).
        env: natsUserEnv(`epp-${z.name}`),
        ports: [
          { name: 'grpc', containerPort: PORTS.xds },
          { name: 'health', containerPort: PORTS.xdsHealth },
          { name: 'metrics', containerPort: PORTS.xdsMetrics },
        ],
        // Ready once its replay caught up; the gateways' ADS streams of a replaced pod move to the
        // other replica and are answered in full there (state of the world).
        readinessProbe: { grpc: { port: PORTS.xdsHealth, service: 'readiness' }, periodSeconds: 2, failureThreshold: 3 },
        livenessProbe: {
          grpc: { port: PORTS.xdsHealth, service: 'liveness' },
          initialDelaySeconds: 5,
          periodSeconds: 10,
          failureThreshold: 3,
        },
        volumeMounts: [tmpMount],
        resources: { requests: { cpu: '100m', memory: '128Mi' }, limits: { memory: '512Mi' } },
        securityContext: hardened,
      },
      volumes: [tmpVolume],
    });
    const service: IService = {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: meta(topology, name, labels),
      spec: {
        selector: labels,
        ports: [
          { name: 'grpc', port: PORTS.xds, targetPort: 'grpc', appProtocol: 'kubernetes.io/h2c' },
          { name: 'metrics', port: PORTS.xdsMetrics, targetPort: 'metrics' },
        ],
      },
    };
    return [deployment, pdb, service];
  });
  return {
    file: 'xds.yaml',
    header: `Per zone: spillway-xds (2 replicas pinned to the zone), which follows the zone's NATS aggregate as the
EPPs do and serves the gateways Envoy's aggregated discovery service: every ready model server by EDS
(${XDS_CLUSTER_NAME}, priorities by zone) and the zone-local subset hint by ECDS (docs/xds.md). Service
${names.xds('<zone>')} is what the zone's gateway dials (gateway.yaml, infra/envoy).`,
    objects: perZone,
  };
}

function gatewayFile(topology: Topology): ManifestFile {
  const perZone = topology.zones.flatMap((z): Manifest[] => {
    const name = names.gateway(z.name);
    const { labels, deployment, pdb } = zonalWorkload(topology, {
      zone: z.name,
      app: 'spillway-gateway',
      name,
      automountToken: false,
      // Envoy drains its connections on SIGTERM within --drain-time-s.
      terminationGracePeriodSeconds: 60,
      container: {
        name: 'envoy',
        image: topology.envoyImage,
        command: ['envoy'],
        args: [
          '--config-path',
          `/etc/envoy/envoy.yaml`,
          // Each pod its own node id; the locality (what spillway-xds serves by) is the bootstrap's.
          '--service-node',
          '$(POD_NAME)',
          '--disable-hot-restart',
          '--drain-time-s',
          '30',
        ],
        env: [{ name: 'POD_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } }],
        ports: [{ name: 'http', containerPort: PORTS.gateway }],
        // The listener accepts once Envoy has its listeners; the admin port stays on loopback.
        readinessProbe: { tcpSocket: { port: 'http' }, periodSeconds: 2, failureThreshold: 3 },
        livenessProbe: { tcpSocket: { port: 'http' }, initialDelaySeconds: 10, periodSeconds: 10, failureThreshold: 3 },
        volumeMounts: [{ name: 'config', mountPath: '/etc/envoy', readOnly: true }, tmpMount],
        resources: { requests: { cpu: '500m', memory: '256Mi' }, limits: { memory: '1Gi' } },
        securityContext: hardened,
      },
      volumes: [{ name: 'config', configMap: { name } }, tmpVolume],
    });
    const configMap: IConfigMap = {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: meta(topology, name, labels),
      data: { 'envoy.yaml': renderEnvoyConfig(topology, z.name) },
    };
    const service: IService = {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: meta(topology, name, labels),
      spec: { selector: labels, ports: [{ name: 'http', port: PORTS.gateway, targetPort: 'http' }] },
    };
    return [configMap, deployment, pdb, service];
  });
  return {
    file: 'gateway.yaml',
    header: `Per zone: an Envoy gateway (2 replicas pinned to the zone) with the zone's bootstrap from infra/envoy
(${envoyFileOf('<zone>')}, in ConfigMap ${names.gateway('<zone>')}): its endpoints and subset hint from the zone's
spillway-xds, ext_proc to the zone's EPPs and the other zones' by priority, override_host. Clients send
inference requests to Service ${names.gateway('<zone>')} on port ${PORTS.gateway}.`,
    objects: perZone,
  };
}

function collectorFile(topology: Topology): ManifestFile {
  return {
    file: 'collector.yaml',
    header: `Per zone: the collector Deployment. It watches the EndpointSlices of Service ${topology.pool} (RBAC in
rbac.yaml), publishes readiness for its own zone's endpoints and scrapes their metrics, as NATS user
collector-<zone> into the zone stream. Two replicas publish the same facts (events are idempotent:
the newer observedAt wins), and a rollout replaces them one at a time, so the zone's metrics never stop.`,
    objects: topology.zones.flatMap((z): Manifest[] => {
      const { deployment, pdb } = zonalWorkload(topology, {
        zone: z.name,
        app: 'spillway-collector',
        name: names.collector(z.name),
        automountToken: true,
        container: {
          name: 'collector',
          image: topology.image,
          command: ['spillway-collector'],
          args: [
            `--pool=${topology.pool}`,
            `--zone=${z.name}`,
            `--region=${z.region}`,
            `--nats=${natsUrlOf(z.name, topology.namespace)}`,
            // Publishes into the zone stream (the aggregate has no subjects).
            `--stream=${zoneStreamName(z.name)}`,
            `--kube-namespace=${topology.namespace}`,
            `--kube-selector=kubernetes.io/service-name=${topology.pool}`,
            '--kube-port=http',
            `--metrics-port=${PORTS.collectorMetrics}`,
          ],
          env: natsUserEnv(`collector-${z.name}`),
          ports: [{ name: 'metrics', containerPort: PORTS.collectorMetrics }],
          readinessProbe: { httpGet: { path: '/health', port: 'metrics' }, periodSeconds: 5 },
          livenessProbe: { httpGet: { path: '/health', port: 'metrics' }, initialDelaySeconds: 5, periodSeconds: 10 },
          volumeMounts: [tmpMount],
          resources: { requests: { cpu: '200m', memory: '128Mi' }, limits: { memory: '512Mi' } },
          securityContext: hardened,
        },
        volumes: [tmpVolume],
      });
      return [deployment, pdb];
    }),
  };
}

function modelServersFile(topology: Topology): ManifestFile {
  const labels = (z: TopologyZone) => ({ app: topology.pool, 'spillway.dev/zone': z.name });
  const deployments = topology.zones
    .filter((z) => z.modelServers > 0)
    .map((z): IDeployment => ({
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: meta(topology, names.modelServers(z.name, topology.pool), labels(z)),
      spec: {
        replicas: z.modelServers,
        selector: { matchLabels: labels(z) },
        template: {
          metadata: { labels: { ...labels(z), ...PART_OF } },
          spec: {
            automountServiceAccountToken: false,
            securityContext: { runAsUser: RUN_AS, runAsGroup: RUN_AS, runAsNonRoot: true },
            // Pinned to its zone: the EndpointSlice reports this zone for its endpoints.
            affinity: { nodeAffinity: zoneAffinity(z.name, topology.pool).nodeAffinity },
            containers: [
              {
                name: 'model-server',
                image: topology.image,
                command: ['spillway-sim'],
                // The simulator binds loopback by default; in a pod it must listen on every address.
                args: ['--host=0.0.0.0', `--port=${PORTS.modelServer}`, `--model=${topology.model}`],
                ports: [{ name: 'http', containerPort: PORTS.modelServer }],
                readinessProbe: { httpGet: { path: '/health', port: 'http' }, periodSeconds: 2 },
                resources: { requests: { cpu: '250m', memory: '128Mi' } },
                securityContext: hardened,
              },
            ],
          },
        },
      },
    }));
  const service: IService = {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: meta(topology, topology.pool, { app: topology.pool }),
    spec: {
      // Headless: it exists for its EndpointSlices, which the collectors watch.
      clusterIP: 'None',
      selector: { app: topology.pool },
      ports: [{ name: 'http', port: PORTS.modelServer, targetPort: 'http' }],
    },
  };
  return {
    file: 'model-servers.yaml',
    header: `Example model servers: spillway-sim (vLLM-compatible simulator, in the Spillway image), so the
manifests run end to end without GPUs; replicas per zone from the topology. Replace each Deployment
with vLLM (same labels and port) for real inference. The headless Service ${topology.pool} is what the
collectors watch (its EndpointSlices carry each endpoint's readiness, address and zone).`,
    objects: [...deployments, service],
  };
}

function inferencePoolFile(topology: Topology): ManifestFile {
  const pool: InferencePool = {
    apiVersion: 'inference.networking.k8s.io/v1',
    kind: 'InferencePool',
    metadata: meta(topology, topology.pool),
    spec: {
      selector: { matchLabels: { app: topology.pool } },
      targetPorts: [{ number: PORTS.modelServer }],
      // Fail closed: without the EPP the gateway would pick blindly across zones, and in full
      // duplex a fail-open mid-body cannot restore the request body.
      endpointPickerRef: { kind: 'Service', name: names.eppService, port: { number: PORTS.eppGrpc }, failureMode: 'FailClose' },
    },
  };
  return {
    file: 'inferencepool.yaml',
    header: `The pool as Gateway API Inference Extension v1 sees it (CRDs from gateway-api-inference-extension
>= v1.0). An InferencePool-aware gateway calls the EPP named in endpointPickerRef over ext_proc.`,
    objects: [pool],
  };
}

function rbacFile(topology: Topology): ManifestFile {
  const account = (name: string, automount: boolean): IServiceAccount => ({
    apiVersion: 'v1',
    kind: 'ServiceAccount',
    metadata: meta(topology, name),
    automountServiceAccountToken: automount,
  });
  const role: IRole = {
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'Role',
    metadata: meta(topology, 'spillway-endpointslice-reader'),
    // list + watch for the informer; get for a single re-read. Nothing that writes.
    rules: [{ apiGroups: ['discovery.k8s.io'], resources: ['endpointslices'], verbs: ['get', 'list', 'watch'] }],
  };
  const binding: IRoleBinding = {
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'RoleBinding',
    metadata: meta(topology, 'spillway-collector-endpointslices'),
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'spillway-endpointslice-reader' },
    subjects: [{ kind: 'ServiceAccount', name: 'spillway-collector', namespace: topology.namespace }],
  };
  return {
    file: 'rbac.yaml',
    header: `Identities and rights. Only the collector talks to the Kubernetes API (EndpointSlices of this namespace,
read only); the EPP and spillway-xds learn the pool from NATS, and neither they, the gateways, NATS nor the
provisioning Job mount a token.`,
    objects: [
      account('spillway-collector', true),
      account('spillway-epp', false),
      account('spillway-xds', false),
      account('spillway-gateway', false),
      account('spillway-nats', false),
      account('spillway-nats-provision', false),
      role,
      binding,
    ],
  };
}

/** The EPP config: the same in every zone (the zone and addresses are flags). */
export const EPP_CONFIG_YAML = `# One EPP per zone, each gateway sending its zone-local subset (or none): the subset is a local
# preference and the EPP may widen to other zones' pods from its own view when its zone is
# overloaded. (strict would confine every pick to the subset.)
subsetMode: locality
# Primary + up to two fallbacks; a gateway's retry policy (Envoy: num_retries: 2) walks them.
maxEndpoints: 3
# The last slot goes to the best endpoint of the nearest other zone, so a retry can leave a
# failing zone even when the local zone is not overloaded.
crossZoneFallbacks: 1
# Every candidate priced in milliseconds of expected time to first token (docs/picking.md); the
# keys below are this policy's. (policy: weighted would read queueThreshold, kvThreshold, weights.)
policy: cost
# A request leaves its zone only when that is expected to be faster by more than this plus the
# round trip (the dial between latency and cross-zone traffic).
zoneBiasMs: 8
network:
  sameRegionMs: 1
  crossRegionMs: 30
# Used until the model servers report their own rates (per target model under rates.models).
rates:
  default:
    requestsPerS: 10
    prefillTokensPerS: 20000
    # Prefill's attention (docs/picking.md): a long prompt costs more per token; about 23,000 for
    # an 8B model, 53,000 for a 70B.
    attentionTokens: 23000
    promptTokens: 500
# A primary the gateway did not serve (or that answered 5xx) counts as not ready for this long.
penaltyMs: 5000
# Named in the request header x-gateway-inference-objective; no objective means priority 0,
# negative priorities are sheddable: 429 when the best expected wait exceeds shedAboveMs.
shedAboveMs: 1000
objectives:
  interactive:
    priority: 10
  batch:
    priority: -1
`;

function configFile(topology: Topology): ManifestFile {
  const configMap: IConfigMap = {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: meta(topology, EPP_CONFIG_MAP),
    data: { 'config.yaml': EPP_CONFIG_YAML },
  };
  return {
    file: 'config.yaml',
    header: `The EPP's config file, the same for every zone (the zone, pool and addresses are flags in epp.yaml).
Keys are the scheduler's; the schema is strict, so a misspelt key stops the EPP with a message naming it.`,
    objects: [configMap],
  };
}

/**
 * The credentials Secret. `placeholder` values are the committed example: they work, but are public.
 * Passwords start with a letter and use only URL-safe characters ([A-Za-z0-9_-]): nats-server reads
 * a variable's value as a config token (digits alone would be a number), and the leaf URL carries it.
 */
export function credentialsSecret(topology: Topology, password: (user: string) => string): ISecret {
  const stringData: Record<string, string> = {};
  for (const user of natsUsers(topology)) {
    const value = password(user);
    if (!/^[A-Za-z][A-Za-z0-9_-]{7,}$/.test(value))
      throw new Error(`password of ${user}: 8 or more of [A-Za-z0-9_-], starting with a letter`);
    stringData[user] = value;
  }
  return { apiVersion: 'v1', kind: 'Secret', metadata: meta(topology, SECRET_NAME), type: 'Opaque', stringData };
}

export const PLACEHOLDER_PASSWORD = (user: string): string => `CHANGE_ME_${user.replace(/-/g, '_')}`;

function secretsExampleFile(topology: Topology): ManifestFile {
  return {
    file: 'nats-credentials.example.yaml',
    header: `PLACEHOLDERS, NOT SECRETS: the NATS passwords of every user of the topology, one key per user.
Not in kustomization.yaml, so 'kubectl apply -k' never overwrites your real Secret with these.
Generate real ones (npm run render -- --secrets > nats-credentials.yaml, keep it out of git) or
replace every CHANGE_ME_ value, then apply it before the rest (docs/deploy.md).`,
    objects: [credentialsSecret(topology, PLACEHOLDER_PASSWORD)],
  };
}

function namespaceFile(topology: Topology): ManifestFile {
  const namespace: INamespace = { apiVersion: 'v1', kind: 'Namespace', metadata: { name: topology.namespace, labels: PART_OF } };
  return {
    file: 'namespace.yaml',
    header: 'Everything of the deployment lives in one namespace (an InferencePool selects pods only in its own).',
    objects: [namespace],
  };
}

/** Every manifest file, in the order they apply (the kustomization lists them in this order). */
export function manifestFiles(topology: Topology): ManifestFile[] {
  return [
    namespaceFile(topology),
    rbacFile(topology),
    configFile(topology),
    natsFile(topology),
    provisionFile(topology),
    modelServersFile(topology),
    eppFile(topology),
    xdsFile(topology),
    gatewayFile(topology),
    collectorFile(topology),
    inferencePoolFile(topology),
    secretsExampleFile(topology),
  ];
}

/** The files `kubectl apply -k` applies: all but the credentials example. */
export function kustomization(files: readonly ManifestFile[]): Kustomization {
  return {
    apiVersion: 'kustomize.config.k8s.io/v1beta1',
    kind: 'Kustomization',
    resources: files.map((f) => f.file).filter((f) => !f.endsWith('.example.yaml')),
  };
}
