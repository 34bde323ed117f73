/**
 * grpc.health.v1 for spillway-xds, on the health port and on the xDS port (an Envoy ADS cluster
 * can health-check it there). Liveness is SERVING while the process runs; the others turn SERVING
 * once the first replay has caught up and stay so through NATS outages (the last view keeps being
 * served, as the EPP does).
 */
import {
  status as GrpcStatus,
  type ServerUnaryCall,
  type ServerWritableStream,
  type sendUnaryData,
  type UntypedServiceImplementation,
} from '@grpc/grpc-js';
import { ServingStatus, type HealthCheckRequest, type HealthCheckResponse } from '@spillway/protocol';

export const ADS_SERVICE_NAME = 'envoy.service.discovery.v3.AggregatedDiscoveryService';
export const HEALTH_SERVICES: readonly string[] = ['', 'liveness', 'readiness', ADS_SERVICE_NAME];

export class XdsHealth {
  private ready = false;
  private readonly watchers = new Set<ServerWritableStream<HealthCheckRequest, HealthCheckResponse>>();

  statusOf(service: string): ServingStatus {
    if (!HEALTH_SERVICES.includes(service)) return ServingStatus.SERVICE_UNKNOWN;
    if (service === 'liveness' || this.ready) return ServingStatus.SERVING;
    return ServingStatus.NOT_SERVING;
  }

  get isReady(): boolean {
    return this.ready;
  }

  setReady(ready: boolean): void {
    if (ready === this.ready) return;
    this.ready = ready;
    for (const call of this.watchers) call.write({ status: this.statusOf(call.request.service) });
  }

  closeWatchers(): void {
    for (const call of this.watchers) call.end();
    this.watchers.clear();
  }

  implementation(): UntypedServiceImplementation {
    return {
      check: (call: ServerUnaryCall<HealthCheckRequest, HealthCheckResponse>, callback: sendUnaryData<HealthCheckResponse>) => {
        const status = this.statusOf(call.request.service);
        if (status === ServingStatus.SERVICE_UNKNOWN)
          callback({ code: GrpcStatus.NOT_FOUND, details: `unknown service ${JSON.stringify(call.request.service)}` });
        else callback(null, { status });
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
