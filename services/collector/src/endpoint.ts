import type { Engine } from '@spillway/events';

/**
 * One model-server endpoint as a readiness source describes it. `pod` identifies it (with the
 * pool) on the event subjects; `sourceReady` is what the source itself says (a Kubernetes
 * endpoint's conditions; always true for a static file, whose entries are probed).
 */
export interface EndpointSpec {
  readonly pod: string;
  /** `ip:port`, IPv6 as `[addr]:port`. */
  readonly address: string;
  readonly zone: string;
  readonly region: string | undefined;
  readonly engine: Engine | undefined;
  readonly labels: Readonly<Record<string, string>> | undefined;
  readonly sourceReady: boolean;
  /** The server's KV-event ZeroMQ PUB endpoint (`tcp://host:port`), when it publishes them. */
  readonly kvEvents?: string | undefined;
  /** Its ZeroMQ ROUTER replay endpoint, when it offers one. */
  readonly kvReplay?: string | undefined;
  /** One entry per data-parallel rank, in rank order, when the server names each rank's endpoints. */
  readonly kvRanks?: ReadonlyArray<{ readonly events: string; readonly replay?: string | undefined }> | undefined;
  /** Data-parallel ranks publishing on consecutive ports from `kvEvents` (vLLM `--data-parallel-size`). */
  readonly kvDataParallelSize?: number | undefined;
  /** How the server publishes them (`vllm`, `sglang`, `trtllm`); default from `--kv-events-format` or the engine. */
  readonly kvEventsFormat?: 'vllm' | 'sglang' | 'trtllm' | undefined;
}

/** Compares everything a readiness event carries, so a changed spec is re-published (the KV relay compares its own fields). */
export function sameSpec(a: EndpointSpec, b: EndpointSpec): boolean {
  return (
    a.pod === b.pod &&
    a.address === b.address &&
    a.zone === b.zone &&
    a.region === b.region &&
    a.engine === b.engine &&
    a.sourceReady === b.sourceReady &&
    JSON.stringify(a.labels ?? {}) === JSON.stringify(b.labels ?? {})
  );
}
