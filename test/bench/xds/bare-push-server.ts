/**
 * The xds bench's baseline: a bare grpc-js server with spillway-xds's ADS service definition and
 * codec that, for every core NATS message on `spillway.bench.push`, writes one DiscoveryResponse
 * carrying the message's bytes as its one EDS resource to every open stream, and does nothing else
 * (no JetStream, no view, no coalescing, no per-node state, no ACK tracking). What it reaches is the
 * cost of the hop and the fan-out alone on this machine.
 *
 *   node --conditions=@spillway/source --import tsx test/bench/xds/bare-push-server.ts NATS_URL
 *
 * Prints the bound port on stdout as one line of JSON: {"port":N}.
 */
import { Server, ServerCredentials, type ServerDuplexStream } from '@grpc/grpc-js';
import { connect } from '@nats-io/transport-node';
import { AggregatedDiscoveryServiceService, TYPE_URLS, type DiscoveryRequest, type DiscoveryResponse } from '@spillway/xds';
import { PUSH_SUBJECT } from './setup.js';

async function main(): Promise<void> {
  const natsUrl = process.argv[2];
  if (natsUrl === undefined) throw new Error('usage: bare-push-server.ts NATS_URL');
  const streams = new Set<ServerDuplexStream<DiscoveryRequest, DiscoveryResponse>>();
  const server = new Server({ 'grpc.max_receive_message_length': 1024 * 1024 });
  server.addService(AggregatedDiscoveryServiceService, {
    streamAggregatedResources: (call: ServerDuplexStream<DiscoveryRequest, DiscoveryResponse>) => {
      streams.add(call);
      const forget = () => streams.delete(call);
      call.on('data', () => undefined);
      call.on('end', () => {
        forget();
        call.end();
      });
      call.on('cancelled', forget);
      call.on('error', forget);
    },
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (error, bound) => (error ? reject(error) : resolve(bound))),
  );
  const nc = await connect({ servers: natsUrl });
  let version = 0;
  nc.subscribe(PUSH_SUBJECT, {
    callback: (_error, message) => {
      version++;
      const response: DiscoveryResponse = {
        versionInfo: String(version),
        resources: [{ typeUrl: TYPE_URLS.eds, value: message.data }],
        canary: false,
        typeUrl: TYPE_URLS.eds,
        nonce: String(version),
        controlPlane: undefined,
      };
      for (const call of streams) if (call.writable) call.write(response);
    },
  });
  process.stdout.write(`${JSON.stringify({ port })}\n`);
  process.once('SIGTERM', () => {
    server.forceShutdown();
    void nc.close().then(() => process.exit(0));
  });
}

main().catch((error: unknown) => {
  process.stderr.write(`${String(error)}\n`);
  process.exit(1);
});
