import { credentials as grpcCredentials, type ChannelCredentials } from '@grpc/grpc-js';
import type { ServingStatus } from '@spillway/protocol';
import { HealthClient } from './grpc-clients.js';

/** One grpc.health.v1 Check on loopback: the status, or NOT_FOUND for an unknown service. */
export function healthStatus(
  port: number,
  service: string,
  creds: ChannelCredentials = grpcCredentials.createInsecure(),
): Promise<ServingStatus | 'NOT_FOUND'> {
  const client = new HealthClient(`127.0.0.1:${port}`, creds);
  return new Promise((resolve, reject) => {
    client.check({ service }, (error, response) => {
      client.close();
      if (error) {
        if (error.code === 5) resolve('NOT_FOUND');
        else reject(error);
      } else resolve(response.status);
    });
  });
}
