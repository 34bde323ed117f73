import type { EndpointSpec } from './endpoint.js';
import { MAX_RANKS_PER_POD } from './kv-map.js';

/**
 * How a model server publishes its KV events:
 * - `vllm`: ZeroMQ PUB `[topic, seq, msgpack batch]` with a ROUTER replay socket (vLLM's `--kv-events-config`);
 * - `sglang`: the same stream (SGLang's `--kv-events-config`), read by the same decoder: its
 *   differences (no trailing vLLM fields, a cache salt beside the hashes, a publisher epoch in the
 *   topic frame) are told apart from the messages themselves;
 * - `trtllm`: JSON events drained by `POST /kv_cache_events` on the server's HTTP port (`trtllm-serve`).
 */
export const KV_EVENTS_FORMATS = ['vllm', 'sglang', 'trtllm'] as const;
export type KvEventsFormat = (typeof KV_EVENTS_FORMATS)[number];

/** One data-parallel rank's endpoints. */
export interface KvRankEndpoint {
  readonly events: string;
  readonly replay?: string | undefined;
}

/** Where and how the relay follows one pod's KV events. */
export interface KvSource {
  readonly format: KvEventsFormat;
  /** Rank order; TensorRT-LLM has one HTTP endpoint whatever its attention-DP size (the events say their rank). */
  readonly ranks: readonly KvRankEndpoint[];
}

export interface KvSourceDefaults {
  /** `--kv-events-format`; undefined: from each endpoint's engine (TensorRT-LLM's is `trtllm`, every other `vllm`). */
  format: KvEventsFormat | undefined;
  /** `--kv-events-port`: servers that name no KV endpoint publish on this port of their address. */
  eventsPort: number | undefined;
  /** `--kv-replay-port`. */
  replayPort: number | undefined;
  /** `--kv-data-parallel-size`: ranks of a server that names none, on consecutive ports from its endpoint's. */
  dataParallelSize: number;
}

/** The path `trtllm-serve` drains its KV-event queue on. */
export const TRTLLM_KV_EVENTS_PATH = '/kv_cache_events';

/**
 * vLLM's `ZmqEventPublisher.offset_endpoint_port` (and SGLang's copy of it): data-parallel rank
 * `r` publishes on the configured port plus `r`.
 */
export function offsetPort(endpoint: string, rank: number): string {
  if (rank === 0) return endpoint;
  const colon = endpoint.lastIndexOf(':');
  return `${endpoint.slice(0, colon)}:${Number(endpoint.slice(colon + 1)) + rank}`;
}

function hostOf(address: string): string {
  return address.slice(0, address.lastIndexOf(':'));
}

/**
 * An endpoint's KV source, the first that applies: the ranks it lists (endpoints file `kvEvents`
 * as a list), its one KV endpoint with the data-parallel size it names or `--kv-data-parallel-size`
 * (consecutive ports), or the port convention `tcp://<ip>:<--kv-events-port>`; for TensorRT-LLM,
 * its HTTP endpoint. Undefined when the endpoint has none.
 */
export function kvSourceOf(spec: EndpointSpec, defaults: KvSourceDefaults): KvSource | undefined {
  const format = spec.kvEventsFormat ?? defaults.format ?? (spec.engine === 'trtllm' ? 'trtllm' : 'vllm');
  if (format === 'trtllm') {
    const named = spec.kvEvents?.startsWith('http') ? spec.kvEvents : undefined;
    const conventional = defaults.format === 'trtllm' || defaults.eventsPort !== undefined;
    const url = named ?? (conventional ? `http://${spec.address}${TRTLLM_KV_EVENTS_PATH}` : undefined);
    return url === undefined ? undefined : { format, ranks: [{ events: url }] };
  }
  if (spec.kvRanks !== undefined && spec.kvRanks.length > 0) return { format, ranks: spec.kvRanks.slice(0, MAX_RANKS_PER_POD) };
  const host = hostOf(spec.address);
  const events = spec.kvEvents ?? (defaults.eventsPort === undefined ? undefined : `tcp://${host}:${defaults.eventsPort}`);
  if (events === undefined || !events.startsWith('tcp://')) return undefined;
  const replay = spec.kvReplay ?? (defaults.replayPort === undefined ? undefined : `tcp://${host}:${defaults.replayPort}`);
  const size = Math.min(MAX_RANKS_PER_POD, spec.kvDataParallelSize ?? defaults.dataParallelSize);
  const ranks: KvRankEndpoint[] = [];
  for (let r = 0; r < size; r++)
    ranks.push({ events: offsetPort(events, r), replay: replay === undefined ? undefined : offsetPort(replay, r) });
  return { format, ranks };
}

/** Whether two sources are the same subscription (a changed one is followed afresh). */
export function sameSource(a: KvSource, b: KvSource): boolean {
  return (
    a.format === b.format &&
    a.ranks.length === b.ranks.length &&
    a.ranks.every((r, i) => r.events === b.ranks[i]?.events && r.replay === b.ranks[i]?.replay)
  );
}
