/**
 * A real xDS client checks the server: @grpc/grpc-js-xds (Google's xDS client for grpc-js)
 * resolves `xds:///model-servers` through spillway-xds (LDS -> RDS -> CDS -> EDS over one ADS
 * stream) and balances over what EDS says. Real gRPC servers stand in for the model servers, a
 * real nats-server carries the readiness events, published as the collector does. What must hold
 * is the meaning of EDS, not its shape: the client sends to its own zone first; when the zone's
 * pods go unready it moves to the same region's zone, never to the far one; when the pods come
 * back so does the traffic; and when the local servers die while still listed, the client's own
 * priority policy fails over to the next priority.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { credentials, makeGenericClientConstructor, Server, ServerCredentials, type ServiceDefinition } from '@grpc/grpc-js';
import * as grpcXds from '@grpc/grpc-js-xds';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { ensureStream, EventPublisher } from '@spillway/bus';
import { eventually, startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import type { RunningXds } from '../src/index.js';
import { readinessOf, type PodSpec } from './fixtures.js';
import { startTestXds } from './helpers.js';

/** One unary method answering with the server's name: which model server took the call. */
const identity = (b: Buffer) => b;
const WHO: ServiceDefinition = {
  who: {
    path: '/spillway.test.ModelServer/Who',
    requestStream: false,
    responseStream: false,
    requestSerialize: identity,
    requestDeserialize: identity,
    responseSerialize: identity,
    responseDeserialize: identity,
  },
};
const WhoClient = makeGenericClientConstructor(WHO, 'ModelServer');

interface ModelServer {
  spec: PodSpec;
  server: Server;
}

async function startModelServer(pod: string, zone: string, region: string): Promise<ModelServer> {
  const server = new Server();
  server.addService(WHO, { who: (_call: unknown, callback: (e: null, r: Buffer) => void) => callback(null, Buffer.from(pod)) });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (error, bound) => (error ? reject(error) : resolve(bound))),
  );
  return { server, spec: { pod, zone, region, address: `127.0.0.1:${port}` } };
}

let nats: NatsServerHandle;
let nc: NatsConnection;
let publisher: EventPublisher;
let xds: RunningXds;
let servers: ModelServer[];
let client: InstanceType<typeof WhoClient>;
let clock = Date.now();

const publish = (spec: PodSpec) => publisher.publishReadiness(readinessOf(spec, ++clock));

function who(): Promise<string> {
  return new Promise((resolve, reject) =>
    client.makeUnaryRequest(
      '/spillway.test.ModelServer/Who',
      identity,
      identity,
      Buffer.alloc(0),
      { deadline: Date.now() + 5000 },
      (error, reply?: Buffer) => (error ? reject(error) : resolve(reply!.toString())),
    ),
  );
}

/** `count` calls in a row, each answered; the pods that answered. */
async function calls(count: number): Promise<string[]> {
  const answered: string[] = [];
  for (let i = 0; i < count; i++) answered.push(await who());
  return answered;
}

const zoneOfPod = (pod: string) => servers.find((s) => s.spec.pod === pod)!.spec.zone;

beforeAll(async () => {
  nats = await startNatsServer();
  nc = await connect({ servers: nats.url });
  await ensureStream(await jetstreamManager(nc), { name: 'SPILLWAY' });
  publisher = new EventPublisher(nc);
  servers = await Promise.all([
    startModelServer('a-0', 'zone-a', 'r1'),
    startModelServer('a-1', 'zone-a', 'r1'),
    startModelServer('b-0', 'zone-b', 'r1'),
    startModelServer('b-1', 'zone-b', 'r1'),
    startModelServer('c-0', 'zone-c', 'r2'),
  ]);
  for (const s of servers) await publish(s.spec);
  xds = await startTestXds(nats.url);
  await xds.ready;
  // The client's bootstrap: spillway-xds as its xDS server, and its own place, zone-a in r1.
  process.env['GRPC_XDS_BOOTSTRAP_CONFIG'] = JSON.stringify({
    xds_servers: [{ server_uri: `127.0.0.1:${xds.port}`, channel_creds: [{ type: 'insecure' }], server_features: ['xds_v3'] }],
    node: { id: 'grpc-client-zone-a', locality: { region: 'r1', zone: 'zone-a' } },
  });
  grpcXds.register();
  client = new WhoClient('xds:///model-servers', credentials.createInsecure());
}, 60_000);

afterAll(async () => {
  client?.close();
  await xds?.close();
  for (const s of servers ?? []) s.server.forceShutdown();
  await nc?.close();
  await nats?.stop();
});

describe('@grpc/grpc-js-xds resolving xds:///model-servers through spillway-xds', () => {
  it("sends every call to its own zone's pods, spread over them", async () => {
    await eventually(() => who(), 30_000, 200);
    const answered = await calls(40);
    expect(new Set(answered.map(zoneOfPod))).toEqual(new Set(['zone-a']));
    expect(new Set(answered)).toEqual(new Set(['a-0', 'a-1']));
  }, 60_000);

  it("moves to the same region's zone when its zone's pods go unready, never to the far zone, and back when they return", async () => {
    await publish({ ...servers[0]!.spec, ready: false });
    await publish({ ...servers[1]!.spec, ready: false });
    await eventually(async () => expect(zoneOfPod(await who())).toBe('zone-b'), 30_000, 50);
    const answered = await calls(40);
    expect(new Set(answered.map(zoneOfPod))).toEqual(new Set(['zone-b']));
    expect(new Set(answered)).toEqual(new Set(['b-0', 'b-1']));

    await publish(servers[0]!.spec);
    await publish(servers[1]!.spec);
    await eventually(async () => expect((await calls(10)).map(zoneOfPod)).toEqual(Array(10).fill('zone-a')), 30_000, 50);
  }, 60_000);

  it("fails over by the client's own priority policy when the local servers die while still listed", async () => {
    servers[0]!.server.forceShutdown();
    servers[1]!.server.forceShutdown();
    // spillway-xds still lists zone-a at priority 0 (their readiness did not change); the client
    // finds priority 0 failing and uses priority 1, zone-b. Calls during the switch may fail.
    await eventually(async () => expect(zoneOfPod(await who())).toBe('zone-b'), 30_000, 50);
    const answered = await calls(30);
    expect(new Set(answered.map(zoneOfPod))).toEqual(new Set(['zone-b']));
  }, 60_000);
});
