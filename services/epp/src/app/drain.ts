import type { Logger } from 'pino';
import type { GrpcListener } from './grpc-listener.js';
import type { Readiness } from './readiness.js';

export interface DrainParts {
  readonly readiness: Readiness;
  /** The ext_proc port (gRPC health is served there too: Envoy health-checks the EPP cluster on it). */
  readonly extProc: GrpcListener;
  readonly logger: Logger;
  /** How long gateways get to notice NOT_SERVING (--drain-delay-ms). */
  readonly delayMs: number;
  /** How long streams in flight get to finish once no new connection is accepted (--drain-timeout-ms). */
  readonly timeoutMs: number;
}

/**
 * A graceful stop of the ext_proc side (SIGTERM), so that a restarting EPP loses no request:
 *
 * 1. NOT_SERVING on both ports at once (readiness never turns back).
 * 2. While the EPP had been serving and a gateway is connected, keep serving for `delayMs`:
 *    new streams are still picked, while the gateways' health checks see NOT_SERVING and move new
 *    requests to their other EPPs (Envoy marks a host unhealthy after `unhealthy_threshold`
 *    failed checks; the shipped config checks every 2 s with a 1 s timeout, 2 to fail, so 6 s
 *    covers even checks that time out). The wait ends early once no connection is left.
 * 3. Refuse new connections and send every open one HTTP/2 GOAWAY: streams in flight (requests
 *    waiting for their response headers) finish, for at most `timeoutMs`; then they are reset.
 *
 * An EPP that never reported SERVING skips the wait: no health check ever sent a gateway here.
 */
export async function drainExtProc(parts: DrainParts): Promise<void> {
  const { extProc, logger } = parts;
  const wasServing = parts.readiness.drain();
  if (wasServing && extProc.connections > 0 && parts.delayMs > 0) {
    logger.info(
      { delayMs: parts.delayMs, connections: extProc.connections },
      "draining: NOT_SERVING; still serving until the gateways' health checks notice",
    );
    await extProc.idle(parts.delayMs);
  }
  const connections = extProc.connections;
  if (connections > 0) logger.info({ connections, timeoutMs: parts.timeoutMs }, 'draining: no new connections; streams in flight finish');
  await extProc.drain(parts.timeoutMs);
  if (connections > 0) logger.info('drained');
}
