import { connect } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { startNatsServer, waitForPort, type NatsServerHandle } from '@spillway/testkit';

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ port, host: '127.0.0.1' }, () => {
      socket.destroy();
      resolve(true);
    });
    socket.on('error', () => resolve(false));
  });
}

describe('private nats-server', () => {
  let server: NatsServerHandle | undefined;
  afterAll(() => server?.stop());

  it('starts on a free port, can be killed and restarted on the same port', async () => {
    server = await startNatsServer({ forcePrivate: true });
    expect(server.owned).toBe(true);
    expect(server.url).toBe(`nats://127.0.0.1:${server.port}`);
    expect(await accepts(server.port)).toBe(true);
    await server.kill();
    expect(await accepts(server.port)).toBe(false);
    await server.restart();
    expect(await accepts(server.port)).toBe(true);
  });

  it('fails clearly when nothing listens', async () => {
    await expect(waitForPort(1, 100)).rejects.toThrow(/nothing listening/);
  });
});
