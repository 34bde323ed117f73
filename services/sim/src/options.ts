import { parseArgs } from 'node:util';
import { PRESET_NAMES } from '@spillway/engine';
import type { PresetName } from '@spillway/engine';
import { z } from 'zod';

export type MetricsFlavor = 'vllm' | 'sglang' | 'trtllm';

/** Everything `startSim` needs; the CLI flags map one to one onto these fields. */
export interface SimOptions {
  port: number;
  host: string;
  model: string;
  lora: string[];
  preset: PresetName;
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
  logLevel: string;
}

const int = (min: number) => z.coerce.number().int().min(min);

/** Flags as strings from argv or the environment, validated and converted. */
const FlagSchema = z.object({
  port: int(0).max(65535).default(8000),
  host: z.string().min(1).default('127.0.0.1'),
  model: z.string().min(1).default('meta-llama/Llama-3.1-8B-Instruct'),
  lora: z
    .string()
    .default('')
    .transform((s) => s.split(',').map((x) => x.trim()).filter((x) => x.length > 0)),
  preset: z.enum(PRESET_NAMES as [PresetName, ...PresetName[]]).default('llama-8b-h100'),
  timeScale: z.coerce.number().positive().finite().default(1),
  maxNumSeqs: int(1).optional(),
  numBlocks: int(1).optional(),
  maxWaiting: int(0).optional(),
  maxLoras: int(0).optional(),
  seed: z.coerce.number().int().default(1),
  engineMetrics: z.enum(['vllm', 'sglang', 'trtllm']).default('vllm'),
  errorRate: z.coerce.number().min(0).max(1).default(0),
  stall: z.boolean().default(false),
  stallAfterMs: int(0).optional(),
  crashAfterMs: int(0).optional(),
  logLevel: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
});

const FLAGS = {
  port: 'listen port; 0 picks a free one (the bound URL is logged as JSON: {"msg":"listening","url":...})',
  host: 'listen address (default 127.0.0.1)',
  model: 'served model name (default meta-llama/Llama-3.1-8B-Instruct)',
  lora: 'comma-separated LoRA adapter names served on top of the model',
  preset: `engine calibration: ${PRESET_NAMES.join(' | ')} (default llama-8b-h100)`,
  'time-scale': 'run X times faster than real time: every latency is divided by X (default 1)',
  'max-num-seqs': 'maximum running requests (default from the preset)',
  'num-blocks': 'KV-cache blocks of 16 tokens (default from the preset)',
  'max-waiting': 'waiting requests beyond this get 429 (default from the preset)',
  'max-loras': 'LoRA adapters that may run at once (default from the preset)',
  seed: 'seed of latency jitter and error injection (default 1)',
  'engine-metrics': 'metric names to expose: vllm | sglang | trtllm (default vllm)',
  'error-rate': 'fraction 0..1 of completion requests answered with 500',
  stall: 'accept connections but never answer (completions, /health and /metrics hang)',
  'stall-after-ms': 'start stalling this long after start',
  'crash-after-ms': 'exit the process this long after start',
  'log-level': 'pino level (default info)',
} as const;

type FlagName = keyof typeof FLAGS;
const BOOLEAN_FLAGS = new Set<FlagName>(['stall']);

export const HELP = [
  'spillway-sim: a vLLM-compatible model-server simulator',
  '',
  'Usage: spillway-sim [--port N] [--model NAME] [--lora a,b] [--preset P] [--time-scale X] ...',
  '',
  ...Object.entries(FLAGS).map(([f, d]) => `  --${f.padEnd(16)} ${d}`),
  '  --help             print this help',
  '',
  'Every flag can also be set as SPILLWAY_SIM_<FLAG> (e.g. SPILLWAY_SIM_TIME_SCALE=100); flags win.',
  'Endpoints: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /health,',
  'GET /metrics, GET|POST /admin/fault {"errorRate","stall","crashAfterMs"}.',
].join('\n');

export class UsageError extends Error {}

const camel = (flag: string): string => flag.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
const kebab = (key: string): string => key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
const envName = (flag: string): string => `SPILLWAY_SIM_${flag.toUpperCase().replace(/-/g, '_')}`;

export type ParsedArgs = { help: true } | { help: false; options: SimOptions };

/** Parse argv (without node and script) and the environment; throws UsageError naming the bad flag. */
export function parseSimArgs(argv: readonly string[], env: NodeJS.ProcessEnv = {}): ParsedArgs {
  const spec: Record<string, { type: 'string' | 'boolean' }> = { help: { type: 'boolean' } };
  for (const f of Object.keys(FLAGS) as FlagName[]) spec[f] = { type: BOOLEAN_FLAGS.has(f) ? 'boolean' : 'string' };
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({ args: [...argv], options: spec, strict: true, allowPositionals: false }));
  } catch (err) {
    throw new UsageError(err instanceof Error ? err.message : String(err));
  }
  if (values.help === true) return { help: true };

  const raw: Record<string, string | boolean> = {};
  for (const f of Object.keys(FLAGS) as FlagName[]) {
    const fromEnv = env[envName(f)];
    const v = values[f] ?? (fromEnv === undefined ? undefined : BOOLEAN_FLAGS.has(f) ? parseBool(f, fromEnv) : fromEnv);
    if (v !== undefined) raw[camel(f)] = v;
  }
  const parsed = FlagSchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const key = String(issue?.path[0] ?? '');
    throw new UsageError(`invalid value for --${kebab(key)}: ${issue?.message ?? 'invalid'}`);
  }
  return { help: false, options: parsed.data };
}

function parseBool(flag: string, v: string): boolean {
  if (/^(1|true|yes)$/i.test(v)) return true;
  if (/^(0|false|no|)$/i.test(v)) return false;
  throw new UsageError(`invalid value for --${flag} (from ${envName(flag)}): expected true or false`);
}

/** Options for programmatic use: anything not given takes the CLI default. */
export function simOptions(partial: Partial<SimOptions> = {}): SimOptions {
  const base = FlagSchema.parse({});
  return { ...base, ...Object.fromEntries(Object.entries(partial).filter(([, v]) => v !== undefined)) };
}
