import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAgent, getStreamed, type GetRequest } from '../src/http-get.js';
import { getStreamedPlain } from '../src/http-get-plain.js';

/**
 * getStreamed reads a scrape through undici's dispatch handler; getStreamedPlain is the same
 * contract through `request()`, the plain version. Against one server with every behaviour a
 * model server may show, both must end the same way: the same body in the same order, or the same
 * failure (kind and, but for a socket error's wording, message), and both reuse the keep-alive
 * socket after a drained error answer.
 */
const BIG = Buffer.alloc(300 * 1024, 'x');

function handler(req: IncomingMessage, res: ServerResponse): void {
  switch (req.url) {
    case '/ok':
      // Several writes, so the body arrives in pieces.
      res.writeHead(200, { 'content-type': 'text/plain' });
      for (let i = 0; i < 20; i++) res.write(`line ${i} ${'y'.repeat(i * 50)}\n`);
      res.end('last 1\n');
      return;
    case '/empty':
      res.writeHead(200, { 'content-length': 0 });
      res.end();
      return;
    case '/hints':
      res.writeEarlyHints({ link: '</style.css>; rel=preload' });
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.end('after hints\n');
      return;
    case '/status':
      res.writeHead(503, { 'content-type': 'text/plain' });
      res.end('overloaded\n');
      return;
    case '/status-big':
      res.writeHead(500, { 'content-length': BIG.length });
      res.end(BIG);
      return;
    case '/big':
      res.writeHead(200, { 'content-length': BIG.length });
      res.end(BIG);
      return;
    case '/silent':
      return;
    case '/trickle': {
      res.writeHead(200, { 'content-type': 'text/plain' });
      const timer = setInterval(() => res.write('z'), 20);
      res.on('close', () => clearInterval(timer));
      return;
    }
    case '/reset':
      req.socket.destroy();
      return;
    default:
      res.writeHead(404);
      res.end();
  }
}

let server: Server;
let origin: string;
let connections = 0;
beforeAll(async () => {
  server = createServer(handler);
  server.keepAliveTimeout = 60_000;
  server.on('connection', () => connections++);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

type Get = typeof getStreamed;
type Outcome = { body: string } | { error: string; reason: unknown; message?: string };

async function outcome(get: Get, request: Partial<GetRequest> & { path: string }, consumer?: (chunk: Buffer) => void): Promise<Outcome> {
  const agent = createAgent();
  const chunks: Buffer[] = [];
  try {
    await get(agent, { origin, timeoutMs: 300, maxBytes: 1024 * 1024, ...request }, consumer ?? ((chunk) => chunks.push(chunk)));
    return { body: Buffer.concat(chunks).toString() };
  } catch (error) {
    const { name, message } = error as Error & { reason?: unknown };
    const reason = (error as { reason?: unknown }).reason;
    // A socket error's wording is undici's and may differ between its two APIs; its kind may not.
    return reason === 'connect' ? { error: name, reason } : { error: name, reason, message };
  } finally {
    await agent.destroy();
  }
}

async function expectSame(request: Partial<GetRequest> & { path: string }, consumer?: (chunk: Buffer) => void): Promise<Outcome> {
  const fast = await outcome(getStreamed, request, consumer);
  expect(fast).toEqual(await outcome(getStreamedPlain, request, consumer));
  return fast;
}

describe('getStreamed (dispatch handler) equals getStreamedPlain (request())', () => {
  it('a body in pieces, an empty body, a body after 1xx hints', async () => {
    expect(await expectSame({ path: '/ok' })).toMatchObject({ body: expect.stringContaining('last 1\n') });
    expect(await expectSame({ path: '/empty' })).toEqual({ body: '' });
    expect(await expectSame({ path: '/hints' })).toEqual({ body: 'after hints\n' });
  });

  it('an error status (small body drained, large body cut), a missing path', async () => {
    expect(await expectSame({ path: '/status' })).toMatchObject({ reason: 'http-status', message: 'HTTP 503' });
    expect(await expectSame({ path: '/status-big' })).toMatchObject({ reason: 'http-status', message: 'HTTP 500' });
    expect(await expectSame({ path: '/nothing' })).toMatchObject({ reason: 'http-status', message: 'HTTP 404' });
  });

  it('a body over maxBytes, a silent server, a trickling one, a reset socket, a refused connection', async () => {
    expect(await expectSame({ path: '/big', maxBytes: 100 * 1024 })).toMatchObject({ reason: 'too-large' });
    expect(await expectSame({ path: '/big', maxBytes: BIG.length })).toEqual({ body: BIG.toString() });
    expect(await expectSame({ path: '/silent', timeoutMs: 100 })).toMatchObject({ reason: 'timeout' });
    expect(await expectSame({ path: '/trickle', timeoutMs: 150 })).toMatchObject({ reason: 'timeout' });
    expect(await expectSame({ path: '/reset' })).toMatchObject({ reason: 'connect' });
    const refused = createServer();
    await new Promise<void>((resolve) => refused.listen(0, '127.0.0.1', resolve));
    const port = (refused.address() as AddressInfo).port;
    await new Promise((resolve) => refused.close(resolve));
    expect(await expectSame({ path: '/', origin: `http://127.0.0.1:${port}` })).toMatchObject({ reason: 'connect' });
  });

  it("a consumer's error is rethrown as is, and reading stops there", async () => {
    const fail = (): ((chunk: Buffer) => void) => {
      let seen = 0;
      return () => {
        if (++seen === 2) throw new RangeError('consumer refused');
      };
    };
    expect(await outcome(getStreamed, { path: '/big' }, fail())).toEqual(await outcome(getStreamedPlain, { path: '/big' }, fail()));
    expect(await outcome(getStreamed, { path: '/big' }, fail())).toMatchObject({ error: 'RangeError', message: 'consumer refused' });
  });

  it('after a drained error answer the keep-alive socket is reused, as with request()', async () => {
    for (const get of [getStreamed, getStreamedPlain]) {
      const agent = createAgent();
      const before = connections;
      const request = { origin, timeoutMs: 1_000, maxBytes: 1024 * 1024 };
      // undici frees a socket a turn of the event loop after its answer ends; a scraper asks again an
      // interval later, not at once (back to back, the dispatch handler's next GET would open a second one).
      const later = (): Promise<unknown> => new Promise((resolve) => setTimeout(resolve, 20));
      await expect(get(agent, { ...request, path: '/status' }, () => undefined)).rejects.toMatchObject({ reason: 'http-status' });
      await later();
      await get(agent, { ...request, path: '/ok' }, () => undefined);
      await later();
      await get(agent, { ...request, path: '/ok' }, () => undefined);
      expect({ get: get.name, connections: connections - before }).toEqual({ get: get.name, connections: 1 });
      await agent.destroy();
    }
  });
});
