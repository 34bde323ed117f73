import {
  status as GrpcStatus,
  type ServerUnaryCall,
  type ServerWritableStream,
  type sendUnaryData,
  type UntypedServiceImplementation,
} from '@grpc/grpc-js';
import { EXT_PROC_SERVICE_NAME, ServingStatus, type HealthCheckRequest, type HealthCheckResponse } from '@spillway/protocol';

/** The services the EPP reports on (docs/protocol.md, "Health"); any other name is SERVICE_UNKNOWN. */
export const HEALTH_SERVICES = ['', 'liveness', 'readiness', EXT_PROC_SERVICE_NAME] as const;
type HealthService = (typeof HEALTH_SERVICES)[number];

/**
 * grpc.health.v1 state. Liveness is SERVING while the process runs; the others follow readiness:
 * SERVING once the first replay has caught up, and from then on, NATS outages included (docs/protocol.md, "Health").
 * Watchers get the current status at once and every change after.
 */
export class HealthState {
  private ready = false;
  private readonly watchers = new Set<ServerWritableStream<HealthCheckRequest, HealthCheckResponse>>();

  statusOf(service: string): ServingStatus {
    if (!(HEALTH_SERVICES as readonly string[]).includes(service)) return ServingStatus.SERVICE_UNKNOWN;
    if ((service as HealthService) === 'liveness') return ServingStatus.SERVING;
    return this.ready ? ServingStatus.SERVING : ServingStatus.NOT_SERVING;
  }

  get isReady(): boolean {
    return this.ready;
  }

  setReady(ready: boolean): void {
    if (ready === this.ready) return;
    this.ready = ready;
    for (const call of this.watchers) call.write({ status: this.statusOf(call.request.service) });
  }

  /** Ends every Watch stream (shutdown), so servers can close without waiting for clients. */
  closeWatchers(): void {
    for (const call of this.watchers) call.end();
    this.watchers.clear();
  }

  /** The grpc-js implementation of grpc.health.v1.Health over this state. */
  implementation(): UntypedServiceImplementation {
    return {
      check: (call: ServerUnaryCall<HealthCheckRequest, HealthCheckResponse>, callback: sendUnaryData<HealthCheckResponse>) => {
        const status = this.statusOf(call.request.service);
        if (status === ServingStatus.SERVICE_UNKNOWN) {
          callback({ code: GrpcStatus.NOT_FOUND, details: `unknown service ${JSON.stringify(call.request.service)}` });
        } else {
          callback(null, { status });
        }
      },
      watch: (call: ServerWritableStream<HealthCheckRequest, HealthCheckResponse>) => {
        call.write({ status: this.statusOf(call.request.service) });
        this.watchers.add(call);
        const forget = () => this.watchers.delete(call);
        call.on('cancelled', forget);
        call.on('close', forget);
        call.on('error', forget);
      },
    };
  }
}
