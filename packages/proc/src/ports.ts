import { createServer } from 'node:net';

/**
 * Ports this process has handed out: never the same one twice, so two servers of one test or demo
 * (a simulator's HTTP port and another's ZeroMQ port, say) cannot be given one port and collide.
 * A port another process takes between this answer and the bind still can: callers wait for the
 * server's own "listening" word (not just any listener on the port) and retry on a failed start,
 * or bind port 0 themselves and read back what they got.
 */
const handedOut = new Set<number>();

/** Asks the kernel for a free TCP port on loopback, one not handed out before by this process. */
export async function freePort(host = '127.0.0.1'): Promise<number> {
  for (let attempt = 0; ; attempt++) {
    const port = await kernelPort(host);
    if (!handedOut.has(port) || attempt >= 50) {
      handedOut.add(port);
      return port;
    }
  }
}

function kernelPort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, host, () => {
      const address = server.address();
      server.close(() => {
        if (address && typeof address === 'object') resolve(address.port);
        else reject(new Error('could not read the bound port'));
      });
    });
  });
}
