// The gRPC side: one channel to the EPP shared by all requests (HTTP/2 multiplexes the streams,
// as Envoy's EPP cluster does), and one bidirectional Process stream per request.
import { Client, Metadata, credentials, status as GrpcStatus } from '@grpc/grpc-js';
import type { ChannelCredentials, ChannelOptions, ClientDuplexStream, ServiceError } from '@grpc/grpc-js';
import { EXT_PROC_PATH, extProcService } from '@spillway/protocol';
import type { ProcessingRequest, ProcessingResponse } from '@spillway/protocol';
import type { EppTlsOptions } from './options.js';

/** Credentials and channel options for the EPP's address (plaintext, TLS or mutual TLS). */
export function eppChannel(tls: EppTlsOptions | undefined): { credentials: ChannelCredentials; options: ChannelOptions } {
  const creds = tls === undefined ? credentials.createInsecure() : credentials.createSsl(tls.ca ?? null, tls.key ?? null, tls.cert ?? null);
  const options =
    tls?.serverName === undefined ? {} : { 'grpc.ssl_target_name_override': tls.serverName, 'grpc.default_authority': tls.serverName };
  return { credentials: creds, options };
}

/**
 * Envoy's connection pool opens a connection for a new stream whenever it has none, so a restarted
 * EPP is reached by the next request. grpc-js instead fails calls fast while it backs off between
 * reconnection attempts (up to 2 minutes by default): short back-offs keep that window small.
 */
const RECONNECT = { 'grpc.initial_reconnect_backoff_ms': 100, 'grpc.max_reconnect_backoff_ms': 1_000 };

export function createEppClient(address: string, tls: EppTlsOptions | undefined): Client {
  const channel = eppChannel(tls);
  return new Client(address, channel.credentials, { ...channel.options, ...RECONNECT });
}

export type StreamEvent =
  | { readonly kind: 'message'; readonly message: ProcessingResponse }
  /** The EPP closed the stream with OK. */
  | { readonly kind: 'end' }
  | { readonly kind: 'error'; readonly code: GrpcStatus; readonly details: string };

/**
 * The gateway's end of one ext_proc stream to the EPP (the EPP's end is its ExtProcStream).
 * Every response and the stream's end are handed to `onEvent` as they arrive, as Envoy's gRPC
 * client calls the filter back; writes respect HTTP/2 flow control.
 */
export class EppStream {
  readonly #call: ClientDuplexStream<ProcessingRequest, ProcessingResponse>;
  #terminal = false;
  #closed = false;
  readonly #onTerminal = new Set<() => void>();

  constructor(client: Client, deadline: Date, onEvent: (event: StreamEvent) => void) {
    this.#call = client.makeBidiStreamRequest(
      EXT_PROC_PATH,
      extProcService.process.requestSerialize,
      extProcService.process.responseDeserialize,
      new Metadata(),
      { deadline },
    );
    const finish = (event: StreamEvent): void => {
      if (this.#terminal) return;
      this.#terminal = true;
      for (const callback of [...this.#onTerminal]) callback();
      // A stream the gateway closed itself reports nothing more: its end is no news.
      if (!this.#closed) onEvent(event);
    };
    this.#call.on('data', (message: ProcessingResponse) => {
      if (!this.#closed) onEvent({ kind: 'message', message });
    });
    this.#call.on('error', (error: ServiceError) => finish({ kind: 'error', code: error.code, details: error.details }));
    this.#call.on('status', (status: { code: GrpcStatus }) => {
      if (status.code === GrpcStatus.OK) finish({ kind: 'end' });
    });
  }

  /** True once the gateway closed the stream or the stream ended. */
  get closed(): boolean {
    return this.#closed || this.#terminal;
  }

  /** Writes messages in order, waiting for flow control; silently drops them once closed. */
  async send(messages: readonly ProcessingRequest[]): Promise<void> {
    for (const message of messages) {
      if (this.closed) return;
      if (!this.#call.write(message)) await this.#drained();
    }
  }

  /**
   * Envoy's close of the side stream (ProcessorStreamImpl::close, used unless the
   * ext_proc_graceful_grpc_close guard is on, which it is not by default): half-close, then reset
   * at once, so the EPP sees the stream cancelled.
   */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#terminal) return;
    this.#call.end();
    this.#call.cancel();
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
}
