import { CHARS_PER_TOKEN, hashBlock, Rng, textBlockHashes, tokenize } from '@spillway/engine';

/**
 * Workloads: Poisson arrivals per zone gateway with request lengths drawn from the seed, so every
 * strategy of a run sees the identical arrival sequence. Prompts are text (4 characters per token,
 * the engine's stand-in tokenizer), so the scheduler's 64-character block hashes and the engine's
 * 16-token block hashes both see a shared system prompt as a shared prefix.
 */
export type WorkloadSpec =
  | {
      readonly kind: 'sharegpt';
      /** Means of the lognormal input and output lengths (tokens), and their log-space sigma. */
      readonly inMean: number;
      readonly outMean: number;
      readonly sigma: number;
    }
  | {
      readonly kind: 'shared-prefix';
      readonly groups: number;
      /** System prompt length per group, uniform in [min, max] tokens (rounded to whole 16-token blocks). */
      readonly systemMin: number;
      readonly systemMax: number;
      /** Question length per request, uniform in [min, max] tokens. */
      readonly questionMin: number;
      readonly questionMax: number;
      /** Output length, lognormal around this mean (sigma 0.3). */
      readonly outMean: number;
    };

/** ShareGPT-like: the sample means of GIE's benchmark set are 252 in and 225 out. */
export const SHAREGPT: WorkloadSpec = { kind: 'sharegpt', inMean: 250, outMean: 225, sigma: 0.8 };

/**
 * landscape.md's shared_prefix methodology, scaled to the simulated cluster: 48 system prompts of
 * 2,000–6,000 tokens (≈ 192k tokens of distinct prefixes: more than one replica's KV pool, less
 * than a zone's), questions of 200–1,200 tokens, outputs around 200 tokens (the presets' 1,000
 * would multiply the simulation's token events by five for the same routing question).
 */
export const SHARED_PREFIX: WorkloadSpec = {
  kind: 'shared-prefix',
  groups: 48,
  systemMin: 2000,
  systemMax: 6000,
  questionMin: 200,
  questionMax: 1200,
  outMean: 200,
};

export interface SimRequest {
  readonly id: number;
  readonly gateway: number;
  readonly arrivalAt: number;
  readonly promptTokens: number;
  readonly outputTokens: number;
  readonly prompt: string;
  /** The engine's block hashes of the prompt; absent when the workload has no reusable prefix. */
  readonly blockHashes: number[] | undefined;
  /** Shared-prefix group, or -1. */
  readonly group: number;
}

/** Deterministic filler text; slices of it make prompts of any length. */
const FILLER = (() => {
  const words = ['the', 'model', 'server', 'answers', 'each', 'question', 'about', 'books', 'with', 'care', 'and', 'cites', 'titles', 'never', 'prices', 'zone'];
  const rng = new Rng(0x5eed);
  let s = '';
  while (s.length < 40_000) s += (words[rng.int(words.length)] as string) + ' ';
  return s;
})();

function text(header: string, chars: number, offset: number): string {
  const body = chars - header.length;
  if (body <= 0) return header.slice(0, chars);
  const start = offset % (FILLER.length - body);
  return header + FILLER.slice(start, start + body);
}

function lognormal(rng: Rng, mean: number, sigma: number): number {
  return Math.exp(Math.log(mean) - (sigma * sigma) / 2 + sigma * rng.gaussian());
}

function clampInt(x: number, lo: number, hi: number): number {
  return Math.max(lo, Math.min(hi, Math.round(x)));
}

/** The shared system prompts of a shared-prefix workload, built once per run from the seed. */
export class PrefixGroups {
  private readonly prompts: string[] = [];
  private readonly hashes: number[][] = [];

  constructor(
    private readonly spec: Extract<WorkloadSpec, { kind: 'shared-prefix' }>,
    seed: number,
  ) {
    const rng = new Rng(seed ^ 0x9a7e);
    for (let g = 0; g < spec.groups; g++) {
      const tokens = 16 * Math.round((spec.systemMin + rng.next() * (spec.systemMax - spec.systemMin)) / 16);
      const prompt = text(`[system prompt ${g}] `, tokens * CHARS_PER_TOKEN, g * 977);
      this.prompts.push(prompt);
      this.hashes.push(textBlockHashes(prompt));
    }
  }

  /**
   * The engine's block hashes of `prompt(group) + question`: the group's cached hashes continued
   * over the question (a system prompt is whole blocks, so the chain and the token boundaries line
   * up) — the same numbers as `textBlockHashes` of the whole prompt, for a fraction of the work.
   */
  blockHashes(group: number, question: string): number[] {
    const head = this.hashes[group] as number[];
    const tokens = tokenize(question);
    const n = Math.floor(tokens.length / 16);
    const out = head.slice();
    let parent = head.length > 0 ? (head[head.length - 1] as number) : 0;
    for (let i = 0; i < n; i++) {
      parent = hashBlock(parent, tokens, i * 16, (i + 1) * 16);
      out.push(parent);
    }
    return out;
  }

  prompt(group: number): string {
    return this.prompts[group] as string;
  }

  get count(): number {
    return this.spec.groups;
  }
}

/** Arrivals of one zone gateway: a Poisson process at `ratePerSec`, in [startMs, endMs). */
export class ArrivalStream {
  private readonly rng: Rng;
  private k = 0;
  private nextAt: number;

  constructor(
    private readonly spec: WorkloadSpec,
    private readonly groups: PrefixGroups | undefined,
    private readonly ratePerSec: number,
    private readonly gateway: number,
    private readonly gateways: number,
    seed: number,
    private readonly endMs: number,
    startMs = 0,
  ) {
    this.rng = new Rng((seed * 7919 + gateway * 104_729 + 17) >>> 0);
    this.nextAt = ratePerSec > 0 ? startMs + this.gap() : Number.POSITIVE_INFINITY;
  }

  /** When the next arrival is due (Infinity when the stream is done). */
  peekAt(): number {
    return this.nextAt < this.endMs ? this.nextAt : Number.POSITIVE_INFINITY;
  }

  next(): SimRequest | undefined {
    const at = this.peekAt();
    if (!Number.isFinite(at)) return undefined;
    const id = this.k++ * this.gateways + this.gateway;
    const request = this.make(id, at);
    this.nextAt = at + this.gap();
    return request;
  }

  private gap(): number {
    return (-Math.log(1 - this.rng.next()) / this.ratePerSec) * 1000;
  }

  private make(id: number, at: number): SimRequest {
    const rng = this.rng;
    const spec = this.spec;
    if (spec.kind === 'sharegpt') {
      const promptTokens = clampInt(lognormal(rng, spec.inMean, spec.sigma), 4, 2048);
      const outputTokens = clampInt(lognormal(rng, spec.outMean, spec.sigma), 4, 1024);
      const prompt = text(`[user request ${id}] `, promptTokens * CHARS_PER_TOKEN, id * 131);
      return { id, gateway: this.gateway, arrivalAt: at, promptTokens, outputTokens, prompt, blockHashes: undefined, group: -1 };
    }
    const groups = this.groups as PrefixGroups;
    const group = rng.int(groups.count);
    const questionTokens = clampInt(spec.questionMin + rng.next() * (spec.questionMax - spec.questionMin), 1, 1 << 20);
    const outputTokens = clampInt(lognormal(rng, spec.outMean, 0.3), 4, 4096);
    const question = text(`\n[question ${id}] `, questionTokens * CHARS_PER_TOKEN, id * 131);
    const prompt = groups.prompt(group) + question;
    const promptTokens = Math.ceil(prompt.length / CHARS_PER_TOKEN);
    return { id, gateway: this.gateway, arrivalAt: at, promptTokens, outputTokens, prompt, blockHashes: groups.blockHashes(group, question), group };
  }
}
