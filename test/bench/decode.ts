import { decode } from '@msgpack/msgpack';
import {
  decodeKvBatch,
  decodeStateBatch,
  decodeVllmKvBatch,
  DEFAULT_VLLM_KV_LIMITS,
  encodeKvBatch,
  encodeStateBatch,
  encodeVllmKvBatch,
  kvBatchSchema,
  MAX_KV_KEYS,
  MAX_STATE_BATCH_BYTES,
  MAX_STATE_ENTRIES,
  MAX_STATE_ENTRY_HASHES,
  MAX_STATE_HASHES,
  stateBatchSchema,
  type StateBatch,
} from '@spillway/events';
import { markdownTable, median, type BenchContext, type BenchPart } from './part.js';

/**
 * Untrusted msgpack (docs/hardening.md): the CPU one message costs the process that decodes it —
 * every EPP for `spillway.state.*` and `spillway.kv.*`, the collector for a model server's ZeroMQ
 * batch — for the hostile payloads of the hardening round and for the largest valid ones, against
 * the decoding they replaced measured in the same run (the generic decoder with its length limits,
 * then zod), the baseline.
 */
export const decodeBench: BenchPart = { name: 'decode', title: 'Untrusted msgpack: CPU per message', run };

/** The longest zone or pod name a state batch may carry (a Kubernetes DNS name). */
const MAX_NAME = 253;

/** `bytes` of nested one-element arrays with a nil at the bottom. */
function nested(bytes: number): Uint8Array {
  const b = new Uint8Array(bytes).fill(0x91);
  b[bytes - 1] = 0xc0;
  return b;
}

/** The state decoder before: one shared generic decoder, then the zod schema. */
function stateBaseline(data: Uint8Array): boolean {
  if (data.byteLength > MAX_STATE_BATCH_BYTES) return false;
  try {
    const raw = decode(data, {
      maxStrLength: 1024,
      maxArrayLength: MAX_STATE_ENTRY_HASHES,
      maxMapLength: 16,
      maxBinLength: 0,
      maxExtLength: 0,
    });
    return stateBatchSchema.safeParse(raw).success;
  } catch {
    return false;
  }
}

/** The KV-batch decoder before. */
function kvBaseline(data: Uint8Array): boolean {
  try {
    const raw = decode(data, { maxStrLength: 4096, maxArrayLength: MAX_KV_KEYS, maxMapLength: 64, maxBinLength: 0, maxExtLength: 0 });
    return kvBatchSchema.safeParse(raw).success;
  } catch {
    return false;
  }
}

/** The collector's model-server batch decoder before: the generic decoder with array-length limits only. */
function vllmBaseline(data: Uint8Array): boolean {
  const l = DEFAULT_VLLM_KV_LIMITS;
  try {
    decode(data, {
      useBigInt64: true,
      maxStrLength: 1024,
      maxBinLength: 64,
      maxArrayLength: Math.max(64, l.maxEvents, l.maxHashes, l.maxTokens),
      maxMapLength: 64,
      maxExtLength: 0,
    });
    return true;
  } catch {
    return false;
  }
}

/** What no single message may cost a picking EPP. */
const TARGET_MS = 1;

/** CPU per call in ms, the median of `rounds` rounds of `reps` calls. */
function cpuMs(fn: () => unknown, reps: number, rounds: number): number {
  fn();
  const per: number[] = [];
  for (let r = 0; r < rounds; r++) {
    const start = process.cpuUsage();
    for (let i = 0; i < reps; i++) fn();
    const used = process.cpuUsage(start);
    per.push((used.user + used.system) / 1000 / reps);
  }
  return median(per);
}

/** A state batch from one EPP of zone-a with these entries. */
function stateBatch(entries: StateBatch['entries']): Uint8Array {
  return encodeStateBatch({ v: 1, pool: 'llama', zone: 'zone-a', epp: 'epp-a-1', seq: 1, sentAt: 1_764_420_000_000, entries });
}

const hashList = (n: number, seed: number): number[] => Array.from({ length: n }, (_, i) => 2 ** 40 + seed * 1_000_003 + i * 7919);

/**
 * The largest valid state batches, one per bound and one at every bound at once: as many block
 * hashes as a batch may carry (in one placement), as many entries (picks of a busy EPP), and as
 * many entries with the longest names a pod may have and the hashes shared among them.
 */
function legitStates(): { what: string; data: Uint8Array }[] {
  const long = (c: string): string => c.repeat(MAX_NAME);
  return [
    {
      what: `${MAX_STATE_HASHES.toLocaleString('en')} hashes in one placement`,
      data: stateBatch([[4, 'zone-a', 'vllm-0', hashList(MAX_STATE_ENTRY_HASHES, 0)]]),
    },
    {
      what: `${MAX_STATE_ENTRIES} picks`,
      data: stateBatch(
        Array.from({ length: MAX_STATE_ENTRIES }, (_, i) => [1, 1e12 + i, 'zone-a', `vllm-${i % 100}`, 1_764_420_000_000 + i, []]),
      ),
    },
    {
      what: `every bound at once: ${MAX_STATE_ENTRIES} picks, ${MAX_NAME}-character names, ${MAX_STATE_HASHES.toLocaleString('en')} hashes`,
      data: stateBatch(
        Array.from({ length: MAX_STATE_ENTRIES }, (_, i) => [
          1,
          1e12 + i,
          long('z'),
          long('p').slice(0, MAX_NAME - 3) + String(i % 1000).padStart(3, '0'),
          1_764_420_000_000 + i,
          hashList(MAX_STATE_HASHES / MAX_STATE_ENTRIES, i),
        ]),
      ),
    },
  ];
}

function legitKv(): Uint8Array {
  const keys = Array.from({ length: MAX_KV_KEYS }, (_, i) => 2 ** 40 + i * 7919);
  return encodeKvBatch({
    v: 1,
    pool: 'llama',
    zone: 'zone-a',
    pod: 'vllm-0',
    seq: 1,
    observedAt: 1_764_420_000_000,
    blockSize: 16,
    events: [[1, keys]],
  });
}

function legitVllm(): Uint8Array {
  // A 32,000-token prefill: 2,000 blocks stored in one batch (the map form of the newest vLLM).
  const tokens = Array.from({ length: 32_000 }, (_, i) => (i * 7919) % 151_000);
  return encodeVllmKvBatch(
    1_764_420_000.5,
    [
      {
        type: 'stored',
        hashes: Array.from({ length: 2000 }, (_, i) => 2n ** 63n + BigInt(i)),
        parent: null,
        tokenIds: tokens,
        blockSize: 16,
        loraId: null,
        medium: 'GPU',
        loraName: null,
        extraKeys: Array.from({ length: 2000 }, () => null),
        group: 0,
        groupKind: 'full_attention',
      },
    ],
    0,
    'map',
  );
}

async function run({ quick, log, quiet }: BenchContext): Promise<string> {
  const rounds = quick ? 3 : 7;
  const MiB = 1024 * 1024;
  const hostile1 = nested(MiB - 16);
  const hugeMap = Uint8Array.from([0xdf, 0xff, 0xff, 0xff, 0xff, ...new Uint8Array(MiB - 16)]);
  // A valid batch with one more field, `x`, holding nested one-element arrays.
  const valid = encodeStateBatch({ v: 1, pool: 'p', zone: 'z', epp: 'e', seq: 1, sentAt: 1, entries: [] });
  const deepInField = Uint8Array.from([0x88, ...valid.subarray(1), 0xa1, 0x78, ...nested(MiB - 64 - valid.byteLength)]);
  const kv = legitKv();
  const vllm = legitVllm();
  const rows: (string | number)[][] = [];
  /** What each message costs an EPP now (state and KV batches: what every EPP decodes on its event loop). */
  const eppCosts: { what: string; ms: number }[] = [];
  const row = (what: string, baseline: () => unknown, bounded: () => unknown, reps: number): void => {
    const before = cpuMs(baseline, reps, rounds);
    const after = cpuMs(bounded, reps, rounds);
    if (!what.startsWith('collector')) eppCosts.push({ what, ms: after });
    const ratio = before / after;
    rows.push([what, before.toFixed(3), after.toFixed(3), `${ratio >= 10 ? ratio.toFixed(0) : ratio.toFixed(1)}×`]);
    log(`${what}: ${before.toFixed(3)} ms -> ${after.toFixed(3)} ms`);
  };
  row(
    'state: 1 MiB of nested one-element arrays',
    () => stateBaseline(hostile1),
    () => decodeStateBatch(hostile1),
    quick ? 2 : 5,
  );
  row(
    'state: a map header announcing 2^32-1 entries',
    () => stateBaseline(hugeMap),
    () => decodeStateBatch(hugeMap),
    20,
  );
  row(
    'state: nested arrays in an unknown header field',
    () => stateBaseline(deepInField.subarray(0, MiB)),
    () => decodeStateBatch(deepInField.subarray(0, MiB)),
    quick ? 2 : 5,
  );
  for (const state of legitStates()) {
    row(
      `state: the largest valid batch, ${state.what} (${(state.data.byteLength / 1024).toFixed(0)} KiB)`,
      () => stateBaseline(state.data),
      () => decodeStateBatch(state.data),
      20,
    );
  }
  row(
    'kv: 1 MiB of nested one-element arrays',
    () => kvBaseline(hostile1),
    () => decodeKvBatch('spillway.kv.llama.zone-a.vllm-0', hostile1),
    quick ? 2 : 5,
  );
  row(
    `kv: the largest valid batch (${MAX_KV_KEYS} keys, ${(kv.byteLength / 1024).toFixed(0)} KiB)`,
    () => kvBaseline(kv),
    () => decodeKvBatch('spillway.kv.llama.zone-a.vllm-0', kv),
    50,
  );
  row(
    'collector: 1 MiB of nested arrays from a model server',
    () => vllmBaseline(hostile1),
    () => decodeVllmKvBatch(hostile1),
    quick ? 1 : 3,
  );
  const hostile8 = nested(DEFAULT_VLLM_KV_LIMITS.maxPayloadBytes);
  row(
    'collector: 8 MiB (the default --kv-max-batch-bytes) of nested arrays',
    () => vllmBaseline(hostile8),
    () => decodeVllmKvBatch(hostile8),
    1,
  );
  row(
    `collector: a valid 2,000-block prefill batch (${(vllm.byteLength / 1024).toFixed(0)} KiB)`,
    () => vllmBaseline(vllm),
    () => decodeVllmKvBatch(vllm),
    10,
  );
  const worst = eppCosts.reduce((a, b) => (b.ms > a.ms ? b : a));
  const provisional = quiet.quiet ? '' : ' (provisional: the machine was not quiet)';
  return [
    '## Untrusted msgpack: CPU per message',
    '',
    'What one message costs the process that decodes it (docs/hardening.md, "Untrusted msgpack"): every EPP decodes every',
    "`spillway.state.*` and `spillway.kv.*` batch on its event loop, the collector every model server's ZeroMQ batch. The",
    'baseline is the decoding these replaced, run in the same process: the generic msgpack decoder with its length limits',
    '(then zod). Bounded: the layout readers (state, KV) and the shape scan before decoding (the collector). CPU ms per',
    `message, median of ${rounds} rounds.`,
    '',
    markdownTable(['message', 'baseline ms', 'bounded ms', 'ratio'], rows),
    '',
    `The state batch bounds (\`packages/events/src/state.ts\`): ${MAX_STATE_ENTRIES} entries, ${MAX_STATE_HASHES.toLocaleString('en')} block hashes in all and per entry, 1 MiB; publishers split what they send to fit (\`services/epp/src/shared-state/batches.ts\`). KV batches: ${MAX_KV_KEYS.toLocaleString('en')} keys.`,
    '',
    `- No single message costs an EPP more than ${TARGET_MS} ms (state and KV batches, hostile or the largest valid): worst ${worst.ms.toFixed(3)} ms (${worst.what}) — ${worst.ms < TARGET_MS ? '**MET**' : '**NOT MET**'}${provisional}.`,
  ].join('\n');
}
