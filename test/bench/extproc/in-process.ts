import { EventEmitter } from 'node:events';
import pino from 'pino';
import { decodeProcessingRequest, type ProcessingRequest, type ProcessingResponse } from '@spillway/protocol';
import { readiness, metrics } from '@spillway/testkit';
import { EppMetrics, loadEppConfig } from '@spillway/epp';
import { EppCore } from '../../../services/epp/src/app/core.js';
import { handleStream } from '../../../services/epp/src/request/stream.js';
import { grpcMessages, type EncodedRequest } from './request.js';

/**
 * The EPP's own work per request, without the transport: the ext_proc stream handler (request/stream.ts,
 * app/core.ts, the scheduler, metrics) driven in-process with the bench's decoded messages over a
 * stand-in for grpc-js's call object, on a view of `pods` pods. CPU µs per request from
 * process.cpuUsage. What this leaves out of the h2load figures is grpc-js, HTTP/2 and the codec,
 * which the bare server pays as well.
 */
class FakeCall extends EventEmitter {
  destroyed = false;
  writable = true;
  written = 0;
  write(_response: ProcessingResponse): boolean {
    this.written++;
    return true;
  }
  end(): void {
    this.writable = false;
  }
  isPaused(): boolean {
    return false;
  }
  pause(): void {}
  resume(): void {}
}

export interface InProcess {
  microsPerRequest: number;
  requests: number;
}

/**
 * `share`: with the shared-state outbox (its entries are made and buffered, then dropped: there is
 * no NATS channel here, so their encoding and publishing are not counted).
 */
export function eppInProcess(request: EncodedRequest, pods: number, zone: string, requests: number, share: boolean): InProcess {
  const config = loadEppConfig(['--pool', 'bench', '--zone', zone, '--nats', 'nats://127.0.0.1:1', '--share-state', String(share)], {});
  if (config === undefined) throw new Error('no EPP config');
  const core = new EppCore(config, new EppMetrics(), pino({ level: 'warn' }));
  const now = Date.now();
  for (let i = 0; i < pods; i++) {
    core.fleet.apply({ ...readiness('bench', i, now), zone: ['zone-a', 'zone-b', 'zone-c'][i % 3] as string }, now);
    core.fleet.apply({ ...metrics('bench', i, now), zone: ['zone-a', 'zone-b', 'zone-c'][i % 3] as string }, now);
  }
  const messages: ProcessingRequest[] = grpcMessages(request.bytes).map((m) => decodeProcessingRequest(m));
  const one = (): void => {
    const call = new FakeCall();
    handleStream(core.control, call as never);
    for (const message of messages) call.emit('data', message);
    call.emit('end');
    // Routed: the headers reply with the destination, the body, the response headers' continue.
    if (call.written !== 3) throw new Error(`the in-process EPP wrote ${call.written} replies, not the 3 of a routed request`);
  };
  for (let i = 0; i < Math.min(2000, requests); i++) one();
  const before = process.cpuUsage();
  for (let i = 0; i < requests; i++) one();
  const used = process.cpuUsage(before);
  core.deadlines.close();
  core.outbox?.close();
  return { microsPerRequest: (used.user + used.system) / requests, requests };
}
