import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A tiny model server for tests: serves a settable exposition on /metrics and a settable status
 * on /health, counts scrapes, and can stall (accept and never answer) like a hung process.
 */
export interface FakeModelServer {
  readonly address: string;
  readonly port: number;
  exposition: string;
  healthy: boolean;
  stall: boolean;
  scrapes: number;
  close(): Promise<void>;
}

export async function startFakeModelServer(exposition: string, port = 0): Promise<FakeModelServer> {
  const hung = new Set<ServerResponse>();
  const state = {
    exposition,
    healthy: true,
    stall: false,
    scrapes: 0,
  };
  const server = createServer((req, res) => {
    if (state.stall) {
      hung.add(res);
      res.on('close', () => hung.delete(res));
      return;
    }
    if (req.url === '/metrics') {
      state.scrapes++;
      res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' });
      res.end(state.exposition);
    } else if (req.url === '/health') {
      res.writeHead(state.healthy ? 200 : 503);
      res.end();
    } else {
      res.writeHead(404);
      res.end();
    }
  });
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  const bound = (server.address() as AddressInfo).port;
  return Object.assign(state, {
    address: `127.0.0.1:${bound}`,
    port: bound,
    async close() {
      for (const res of hung) res.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  });
}

/** A vLLM exposition with the given gauges (the shape vLLM v0.10 serves). */
export function vllmExposition(waiting: number, running: number, kv: number): string {
  const labels = 'engine="0",model_name="m"';
  return [
    '# TYPE vllm:num_requests_running gauge',
    `vllm:num_requests_running{${labels}} ${running}`,
    '# TYPE vllm:num_requests_waiting gauge',
    `vllm:num_requests_waiting{${labels}} ${waiting}`,
    '# TYPE vllm:kv_cache_usage_perc gauge',
    `vllm:kv_cache_usage_perc{${labels}} ${kv}`,
    '',
  ].join('\n');
}

/** vLLM's rate counters (prompt and generation tokens, completed requests), to append to an exposition. */
export function vllmCounters(prompt: number | string, generation: number | string, requests: number | string): string {
  const labels = 'engine="0",model_name="m"';
  return [
    '# TYPE vllm:prompt_tokens_total counter',
    `vllm:prompt_tokens_total{${labels}} ${prompt}`,
    '# TYPE vllm:generation_tokens_total counter',
    `vllm:generation_tokens_total{${labels}} ${generation}`,
    '# TYPE vllm:request_success_total counter',
    `vllm:request_success_total{${labels},finished_reason="stop"} ${requests}`,
    '',
  ].join('\n');
}

/**
 * vLLM's prefill-time histogram (`request_prefill_time_seconds`, in seconds) with its buckets, to
 * append to an exposition: every observation counted in the bucket of `sumS / count`.
 */
export function vllmPrefill(sumS: number | string, count: number | string): string {
  const labels = 'engine="0",model_name="m"';
  const mean = Number(sumS) / Number(count);
  const buckets = [0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680];
  return [
    '# HELP vllm:request_prefill_time_seconds Histogram of time spent in PREFILL phase for request.',
    '# TYPE vllm:request_prefill_time_seconds histogram',
    ...buckets.map((le) => `vllm:request_prefill_time_seconds_bucket{${labels},le="${le.toFixed(1)}"} ${mean <= le ? count : 0}`),
    `vllm:request_prefill_time_seconds_bucket{${labels},le="+Inf"} ${count}`,
    `vllm:request_prefill_time_seconds_count{${labels}} ${count}`,
    `vllm:request_prefill_time_seconds_sum{${labels}} ${sumS}`,
    '',
  ].join('\n');
}
