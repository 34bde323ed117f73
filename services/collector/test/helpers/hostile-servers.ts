import { spawn, type ChildProcess } from 'node:child_process';

/**
 * Misbehaving model servers in a child process of their own (so serving tens of megabytes costs
 * the test's event loop nothing): each answers `/health` with 200 and `/metrics` with
 * - `huge`: a 50 MB exposition (real vLLM gauges first, then 50 MB of another family's series),
 * - `large`: the same at 15 MB,
 * - `trickle`: a valid start, then one byte every 20 ms, never ending.
 * A control port answers `GET /attempts` with the times (ms since epoch) of every /metrics request.
 */
const SCRIPT = `
import { createServer } from 'node:http';
const gauges = [
  '# TYPE vllm:num_requests_waiting gauge', 'vllm:num_requests_waiting{engine="0",model_name="m"} 1',
  '# TYPE vllm:num_requests_running gauge', 'vllm:num_requests_running{engine="0",model_name="m"} 1',
  '# TYPE vllm:kv_cache_usage_perc gauge', 'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.1', '',
].join('\\n');
function exposition(bytes) {
  const line = 'python_gc_objects_collected_total{generation="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 12894.0\\n';
  return Buffer.from(gauges + line.repeat(Math.ceil(bytes / line.length)));
}
const bodies = { huge: exposition(50e6), large: exposition(15e6) };
const attempts = { huge: [], large: [], trickle: [] };
async function listen(handler) {
  const server = createServer(handler);
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return server.address().port;
}
const ports = {};
for (const name of Object.keys(attempts)) {
  ports[name] = await listen((req, res) => {
    if (req.url !== '/metrics') return res.writeHead(200).end('ok');
    attempts[name].push(Date.now());
    res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' });
    if (name !== 'trickle') return res.end(bodies[name]);
    res.write(gauges);
    const timer = setInterval(() => res.write('#'), 20);
    res.on('close', () => clearInterval(timer));
  });
}
ports.control = await listen((req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(attempts)));
process.stdout.write(JSON.stringify(ports) + '\\n');
`;

export type HostileName = 'huge' | 'large' | 'trickle';

export interface HostileServers {
  readonly child: ChildProcess;
  readonly addresses: Record<HostileName, string>;
  /** Times of the /metrics requests each server received. */
  attempts(): Promise<Record<HostileName, number[]>>;
  close(): Promise<void>;
}

export async function startHostileServers(): Promise<HostileServers> {
  const child = spawn(process.execPath, ['--input-type=module', '-e', SCRIPT], { stdio: ['ignore', 'pipe', 'inherit'] });
  const ports = await new Promise<Record<HostileName | 'control', number>>((resolve, reject) => {
    let out = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes('\n')) resolve(JSON.parse(out) as Record<HostileName | 'control', number>);
    });
    child.once('exit', (code) => reject(new Error(`hostile servers exited ${code}`)));
  });
  const address = (port: number): string => `127.0.0.1:${port}`;
  return {
    child,
    addresses: { huge: address(ports.huge), large: address(ports.large), trickle: address(ports.trickle) },
    async attempts() {
      return (await (await fetch(`http://${address(ports.control)}/attempts`)).json()) as Record<HostileName, number[]>;
    },
    async close() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const gone = new Promise<void>((resolve) => child.once('exit', () => resolve()));
      child.kill('SIGKILL');
      await gone;
    },
  };
}
