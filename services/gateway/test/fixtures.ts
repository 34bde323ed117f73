// Shared set-up: simulators as model servers, the fake EPP, a gateway between them, cleanup.
import { createServer } from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { ServerCredentials } from '@grpc/grpc-js';
import { pino } from 'pino';
import { startSim } from '@spillway/sim';
import type { SimServer } from '@spillway/sim';
import { freePort } from '@spillway/testkit';
import { afterEach } from 'vitest';
import { startGateway } from '../src/index.js';
import type { Gateway, GatewayOptions } from '../src/index.js';
import { startFakeEpp, tick } from './fake-epp.js';
import type { Decide, FakeEpp } from './fake-epp.js';

export const MODEL = 'test-model';
const cleanups: Array<() => Promise<void>> = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
});

export function onCleanup(cleanup: () => Promise<void>): void {
  cleanups.push(cleanup);
}

export async function sim(options: { errorRate?: number; timeScale?: number } = {}): Promise<SimServer & { address: string }> {
  // admin: the tests stall simulators at runtime through /admin/fault.
  const server = await startSim({ port: 0, preset: 'test', timeScale: 100, logLevel: 'silent', model: MODEL, admin: true, ...options });
  onCleanup(() => server.close());
  return Object.assign(server, { address: `127.0.0.1:${server.port}` });
}

/** An address nothing listens on: connecting to it is refused. */
export async function deadAddress(): Promise<string> {
  return `127.0.0.1:${await freePort()}`;
}

export async function fakeEpp(decide: Decide, credentials?: ServerCredentials): Promise<FakeEpp> {
  const epp = await startFakeEpp(decide, credentials);
  onCleanup(() => epp.close());
  return epp;
}

export async function gateway(options: Partial<GatewayOptions> & Pick<GatewayOptions, 'epp' | 'endpoints'>): Promise<Gateway> {
  const gw = await startGateway({
    port: 0,
    healthIntervalMs: 0,
    // The fake EPP serves no health service: checks only where a test turns them on.
    eppHealthIntervalMs: 0,
    logger: pino({ level: 'silent' }),
    ...options,
  });
  onCleanup(() => gw.close());
  return gw;
}

/** A hand-driven model server, for behaviour the simulator cannot be made to show. */
export async function rawUpstream(
  handler: (req: IncomingMessage, res: ServerResponse) => void,
): Promise<{ address: string; server: Server }> {
  const server = createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  onCleanup(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  return { address: `127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}

export function completion(extra: Record<string, unknown> = {}): string {
  return JSON.stringify({ model: MODEL, prompt: 'hello there', max_tokens: 3, ...extra });
}

export async function post(url: string, body: string, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
}

export const utf8 = (bytes: Uint8Array): string => Buffer.from(bytes).toString('utf8');

/**
 * A model server that sends its response headers and a first chunk at once, then holds the rest
 * of the body until `release()`, noting (on the fake EPP's `tick()` clock) when the body ended.
 */
export async function heldUpstream(): Promise<{
  address: string;
  release: () => void;
  endedAt: () => number | undefined;
  requests: Buffer[];
}> {
  let release: () => void = () => undefined;
  const released = new Promise<void>((resolve) => (release = resolve));
  let endedAt: number | undefined;
  const requests: Buffer[] = [];
  const { address } = await rawUpstream((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      requests.push(Buffer.concat(chunks));
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: {"n":1}\n\n');
      void released.then(() => {
        endedAt = tick();
        res.end('data: [DONE]\n\n');
      });
    });
  });
  return { address, release, endedAt: () => endedAt, requests };
}
