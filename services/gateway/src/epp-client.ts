// The gRPC side: one channel to the EPP shared by all requests (HTTP/2 multiplexes the streams,
// as Envoy's EPP cluster does), and one bidirectional Process stream per request.
import { Client, Metadata, credentials, status as GrpcStatus } from '@grpc/grpc-js';
import type { ClientDuplexStream, ServiceError } from '@grpc/grpc-js';
import { EXT_PROC_PATH, extProcService } from '@spillway/protocol';
import type { ProcessingRequest, ProcessingResponse } from '@spillway/protocol';
import type { EppTlsOptions } from './options.js';

export function createEppClient(address: string, tls: EppTlsOptions | undefined): Client {
  const creds = tls === undefined ? credentials.createInsecure() : credentials.createSsl(tls.ca ?? null, tls.key ?? null, tls.cert ?? null);
  const options =
    tls?.serverName === undefined ? {} : { 'grpc.ssl_target_name_override': tls.serverName, 'grpc.default_authority': tls.serverName };
  return new Client(address, creds, options);
}

export type StreamEvent =
  | { readonly kind: 'message'; readonly message: ProcessingResponse }
  /** The EPP closed the stream with OK. */
  | { readonly kind: 'end' }
  | { readonly kind: 'error'; readonly code: GrpcStatus; readonly details: string };

/**
 * The gateway's end of one ext_proc stream to the EPP (the EPP's end is its ExtProcStream).
 * Responses are queued as events so the request path can read them in order while it is still
 * sending; writes respect HTTP/2 flow control.
 */
export class EppStream {
  readonly #call: ClientDuplexStream<ProcessingRequest, ProcessingResponse>;
  readonly #queue: StreamEvent[] = [];
  #waiter: ((event: StreamEvent) => void) | undefined;
  #terminal: StreamEvent | undefined;
  #halfClosed = false;
  readonly #onTerminal = new Set<() => void>();

  constructor(client: Client, deadline: Date) {
    this.#call = client.makeBidiStreamRequest(
      EXT_PROC_PATH,
      extProcService.process.requestSerialize,
      extProcService.process.responseDeserialize,
      new Metadata(),
      { deadline },
    );
    this.#call.on('data', (message: ProcessingResponse) => this.#push({ kind: 'message', message }));
    this.#call.on('error', (error: ServiceError) => this.#finish({ kind: 'error', code: error.code, details: error.details }));
    this.#call.on('status', (status: { code: GrpcStatus }) => {
      if (status.code === GrpcStatus.OK) this.#finish({ kind: 'end' });
    });
  }

  /** True once the stream ended, failed or was cancelled. */
  get closed(): boolean {
    return this.#terminal !== undefined;
  }

  /** The next response, or how the stream ended (repeated on every later call). */
  next(): Promise<StreamEvent> {
    const queued = this.#queue.shift();
    if (queued !== undefined) return Promise.resolve(queued);
    if (this.#terminal !== undefined) return Promise.resolve(this.#terminal);
    return new Promise((resolve) => (this.#waiter = resolve));
  }

  /** Writes messages in order, waiting for flow control; silently drops them once closed. */
  async send(messages: readonly ProcessingRequest[]): Promise<void> {
    for (const message of messages) {
      if (this.#terminal !== undefined || this.#halfClosed) return;
      if (!this.#call.write(message)) await this.#drained();
    }
  }

  /** Half-close: nothing more to send (Envoy closes its side after the last message). */
  end(): void {
    if (this.#halfClosed || this.#terminal !== undefined) return;
    this.#halfClosed = true;
    this.#call.end();
  }

  /** Cancels the stream (client gone, error already answered, or done with the exchange). */
  cancel(): void {
    if (this.#terminal === undefined) this.#call.cancel();
  }

  // Resolves on 'drain', or when the stream ends (then no 'drain' will ever come).
  #drained(): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => {
        this.#call.off('drain', done);
        this.#onTerminal.delete(done);
        resolve();
      };
      this.#call.on('drain', done);
      this.#onTerminal.add(done);
    });
  }

  #push(event: StreamEvent): void {
    const waiter = this.#waiter;
    if (waiter !== undefined) {
      this.#waiter = undefined;
      waiter(event);
    } else {
      this.#queue.push(event);
    }
  }

  #finish(event: StreamEvent): void {
    if (this.#terminal !== undefined) return;
    this.#terminal = event;
    this.#push(event);
    for (const callback of [...this.#onTerminal]) callback();
  }
}
