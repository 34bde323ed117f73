import { CliError, commaList, logLevel, parseCommandLine, port, renderHelp, type FlagSpecs } from '@spillway/cli';
import { ENGINE_MODES, PRESET_NAMES } from '@spillway/engine';
import type { EngineMode, PresetName } from '@spillway/engine';
import { TOKENIZER_PRESETS } from '@spillway/tokenizer';
import { z } from 'zod';

export type MetricsFlavor = 'vllm' | 'sglang' | 'trtllm';

/** Everything `startSim` needs; the CLI flags map one to one onto these fields. */
export interface SimOptions {
  port: number;
  host: string;
  model: string;
  lora: string[];
  preset: PresetName;
  engineMode: EngineMode;
  timeScale: number;
  maxNumSeqs?: number;
  numBlocks?: number;
  maxWaiting?: number;
  maxLoras?: number;
  seed: number;
  engineMetrics: MetricsFlavor;
  errorRate: number;
  stall: boolean;
  stallAfterMs?: number;
  crashAfterMs?: number;
  /** Serve `/admin/fault` (runtime fault injection); off by default, so nobody can reach it by accident. */
  admin: boolean;
  logLevel: string;
  /** ZeroMQ PUB endpoint for vLLM-layout KV events (off when absent). */
  kvEvents?: string;
  /** ZeroMQ ROUTER endpoint answering replay requests (needs kvEvents). */
  kvReplay?: string;
  kvTopic: string;
  kvBatchMaxEvents: number;
  kvBatchMs: number;
  kvReplayBuffer: number;
  /** vLLM's struct encoding of KV events: `map` (the newest vLLM) or `array` (earlier releases). */
  kvEventsLayout: 'map' | 'array';
  /** A hybrid model's sliding-window group beside the full-attention one, this many tokens wide (KV events only). */
  kvSlidingWindow?: number;
  /** A CPU offload tier of this many blocks (KV events only). */
  kvOffloadBlocks?: number;
  /** Data-parallel ranks (vLLM --data-parallel-size): engines of their own, each with its KV-event stream. */
  dataParallelSize: number;
  /** A `@spillway/tokenizer` preset or a tokenizer.json path: prompts are tokenized as the model does. */
  tokenizer?: string;
}

const int = (min: number) => z.coerce.number().int().min(min);
const ZMQ_ENDPOINT = /^(tcp|ipc|inproc):\/\/[^,]+$/;
/** One ZeroMQ endpoint, or one per data-parallel rank separated by commas. */
const zmqEndpoint = z
  .string()
  .refine(
    (s) => s.split(',').every((e) => ZMQ_ENDPOINT.test(e)),
    'a ZeroMQ endpoint such as tcp://*:5557 (or one per rank, comma-separated)',
  );

/** spillway-sim's flags, each also `SPILLWAY_<FLAG>`; they map one to one onto SimOptions. */
export const simFlags = {
  port: {
    description: 'listen port; 0 picks a free one (the bound URL is logged as JSON: {"msg":"listening","url":...})',
    schema: port(8000),
    placeholder: 'N',
  },
  host: { description: 'listen address (default 127.0.0.1)', schema: z.string().min(1).default('127.0.0.1'), placeholder: 'ADDR' },
  model: {
    description: 'served model name (default meta-llama/Llama-3.1-8B-Instruct)',
    schema: z.string().min(1).default('meta-llama/Llama-3.1-8B-Instruct'),
    placeholder: 'NAME',
  },
  lora: {
    description: 'comma-separated LoRA adapter names served on top of the model',
    schema: commaList().default([]),
    placeholder: 'a,b',
  },
  preset: {
    description: `engine calibration: ${PRESET_NAMES.join(' | ')} (default llama-8b-h100)`,
    schema: z.enum(PRESET_NAMES as [PresetName, ...PresetName[]]).default('llama-8b-h100'),
    placeholder: 'P',
  },
  engineMode: {
    description: 'engine timing: step (vLLM-style steps under a token budget) | closed-form (per-request formulas) (default step)',
    schema: z.enum(ENGINE_MODES as [EngineMode, ...EngineMode[]]).default('step'),
    placeholder: 'MODE',
  },
  timeScale: {
    description: 'run X times faster than real time: every latency is divided by X (default 1)',
    schema: z.coerce.number().positive().finite().default(1),
    placeholder: 'X',
  },
  maxNumSeqs: { description: 'maximum running requests (default from the preset)', schema: int(1).optional(), placeholder: 'N' },
  numBlocks: { description: 'KV-cache blocks of 16 tokens (default from the preset)', schema: int(1).optional(), placeholder: 'N' },
  maxWaiting: {
    description: 'waiting requests beyond this get 429 (default from the preset)',
    schema: int(0).optional(),
    placeholder: 'N',
  },
  maxLoras: { description: 'LoRA adapters that may run at once (default from the preset)', schema: int(0).optional(), placeholder: 'N' },
  seed: {
    description: 'seed of latency jitter and error injection (default 1)',
    schema: z.coerce.number().int().default(1),
    placeholder: 'N',
  },
  engineMetrics: {
    description: 'metric names to expose: vllm | sglang | trtllm (default vllm)',
    schema: z.enum(['vllm', 'sglang', 'trtllm']).default('vllm'),
    placeholder: 'NAME',
  },
  errorRate: {
    description: 'fraction 0..1 of completion requests answered with 500',
    schema: z.coerce.number().min(0).max(1).default(0),
    placeholder: 'F',
  },
  stall: {
    description: 'accept connections but never answer (completions, /health and /metrics hang)',
    schema: z.boolean().default(false),
    boolean: true,
  },
  stallAfterMs: { description: 'start stalling this long after start', schema: int(0).optional(), placeholder: 'MS' },
  crashAfterMs: { description: 'exit the process this long after start', schema: int(0).optional(), placeholder: 'MS' },
  admin: {
    description: 'serve GET|POST /admin/fault to change faults at runtime (default off: 404)',
    schema: z.boolean().default(false),
    boolean: true,
  },
  logLevel: { description: 'pino level (default info)', schema: logLevel(), placeholder: 'LEVEL' },
  kvEvents: {
    description:
      'publish KV-cache events as vLLM does on this ZeroMQ PUB endpoint, bound (e.g. tcp://*:5557; tcp://127.0.0.1:* picks a port); with --data-parallel-size, rank r binds port + r, or the r-th of a comma-separated list',
    schema: zmqEndpoint.optional(),
    placeholder: 'ENDPOINT',
  },
  kvReplay: {
    description: 'also answer replay requests on this ZeroMQ ROUTER endpoint, bound (e.g. tcp://*:5558)',
    schema: zmqEndpoint.optional(),
    placeholder: 'ENDPOINT',
  },
  kvTopic: {
    description: 'first frame of every KV-event message (default empty, as vLLM)',
    schema: z.string().max(256).default(''),
    placeholder: 'TOPIC',
  },
  kvBatchMaxEvents: {
    description: 'send a KV-event batch once it holds N events (default 256)',
    schema: int(1).max(4096).default(256),
    placeholder: 'N',
  },
  kvBatchMs: {
    description: 'gather KV events for MS before sending a batch; 0 = one batch per engine step (default 0)',
    schema: int(0).max(10_000).default(0),
    placeholder: 'MS',
  },
  kvReplayBuffer: {
    description: 'KV-event batches kept for replay (default 10000, as vLLM; also at most 64 MiB)',
    schema: int(1).max(1_000_000).default(10_000),
    placeholder: 'N',
  },
  kvEventsLayout: {
    description: "KV events' struct encoding: map (the newest vLLM) | array (vLLM's earlier array_like structs) (default map)",
    schema: z.enum(['map', 'array']).default('map'),
    placeholder: 'LAYOUT',
  },
  kvSlidingWindow: {
    description:
      "a hybrid-attention model's KV events: every stored block also in a second KV-cache group (group 1, kind sliding_window, this window in tokens), as vLLM's hybrid KV-cache manager reports it (default: one full-attention group)",
    schema: int(1).max(1_048_576).optional(),
    placeholder: 'TOKENS',
  },
  kvOffloadBlocks: {
    description:
      "a CPU offload tier of N blocks in the KV events, as vLLM's offloading connector reports it: each stored block copied to the CPU medium, the least recently offloaded evicted past N (default: none)",
    schema: int(1).max(100_000_000).optional(),
    placeholder: 'N',
  },
  dataParallelSize: {
    description:
      'data-parallel ranks, as vLLM --data-parallel-size: that many engines, each with its own KV cache; requests go to the least loaded (or the rank in an X-data-parallel-rank header); with --kv-events rank r publishes on its port + r (a * port: one free port each) (default 1)',
    schema: int(1).max(32).default(1),
    placeholder: 'N',
  },
  tokenizer: {
    description: `tokenize prompts with a real tokenizer: a preset (${TOKENIZER_PRESETS.join(', ')}) or a tokenizer.json path; chat through its template (default: a toy tokenizer)`,
    schema: z.string().min(1).optional(),
    placeholder: 'NAME|PATH',
  },
} satisfies FlagSpecs;

export const HELP =
  renderHelp('spillway-sim', 'spillway-sim: a vLLM-compatible model-server simulator', simFlags) +
  [
    '',
    'Endpoints: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /health,',
    'GET /metrics; with --admin also GET|POST /admin/fault {"errorRate","stall","crashAfterMs"} and',
    'POST /reset_prefix_cache (drops the prefix cache when no request holds a block; a KV event says so).',
    '',
  ].join('\n');

export type ParsedArgs = { help: true } | { help: false; options: SimOptions };

/** Parse argv (without node and script) and the environment; throws CliError naming the bad flag. */
export function parseSimArgs(argv: readonly string[], env: NodeJS.ProcessEnv = {}): ParsedArgs {
  const parsed = parseCommandLine(simFlags, argv, env);
  if (parsed.help) return { help: true };
  if (parsed.values.kvReplay !== undefined && parsed.values.kvEvents === undefined)
    throw new CliError('a replay socket needs --kv-events', 'kv-replay');
  if (parsed.values.kvSlidingWindow !== undefined && parsed.values.kvEvents === undefined)
    throw new CliError('a sliding-window group is reported in KV events: it needs --kv-events', 'kv-sliding-window');
  if (parsed.values.kvOffloadBlocks !== undefined && parsed.values.kvEvents === undefined)
    throw new CliError('a CPU tier is reported in KV events: it needs --kv-events', 'kv-offload-blocks');
  return { help: false, options: parsed.values };
}

/** Options for programmatic use: anything not given takes the CLI default. */
export function simOptions(partial: Partial<SimOptions> = {}): SimOptions {
  const base: SimOptions = parseCommandLine(simFlags, []).values;
  return { ...base, ...Object.fromEntries(Object.entries(partial).filter(([, v]) => v !== undefined)) };
}
