import { CHARS_PER_TOKEN, hashBlock, Rng, textBlockHashes, tokenize } from '@spillway/engine';
import { kvBlockKeys } from '@spillway/events';

/**
 * Workloads: Poisson arrivals per zone gateway with request shapes drawn from the seed, so every
 * strategy of a run sees the identical arrival sequence. Prompts are text (4 characters per token,
 * the engine's stand-in tokenizer), so the scheduler's 64-character block hashes and the engine's
 * 16-token block hashes both see a shared system prompt as a shared prefix.
 */
export interface ShareGptSpec {
  readonly kind: 'sharegpt';
  /** Means of the lognormal prompt and output lengths (tokens), and their log-space sigma. */
  readonly inputMean: number;
  readonly outputMean: number;
  readonly sigma: number;
  /** Lengths are clamped to these. */
  readonly inputMax: number;
  readonly outputMax: number;
}

export interface SharedPrefixSpec {
  readonly kind: 'shared-prefix';
  readonly groups: number;
  /** System prompt length per group, uniform in [min, max] tokens (rounded to whole 16-token blocks). */
  readonly prefixTokens: readonly [number, number];
  /** Question length per request, uniform in [min, max] tokens. */
  readonly questionTokens: readonly [number, number];
  /** Output length, lognormal around this mean (sigma 0.3). */
  readonly outputTokens: number;
}

export type SingleWorkload = ShareGptSpec | SharedPrefixSpec;

/** Requests naming LoRA adapters: `share` of them, adapter k drawn with weight 1 / (k + 1)^skew. */
export interface LoraSpec {
  readonly adapters: number;
  readonly share: number;
  readonly skew: number;
}

/** A tenant: its share of each gateway's arrivals, its fairness id, its requests' priority bands. */
export interface TenantSpec {
  readonly name: string;
  readonly share: number;
  readonly fairnessId: string;
  readonly priorities: readonly { readonly priority: number; readonly share: number }[];
}

/** A workload: one or more request shapes drawn by weight, the share of sheddable (priority −1) requests, LoRA use, tenants. */
export interface WorkloadSpec {
  readonly parts: readonly { readonly weight: number; readonly spec: SingleWorkload }[];
  readonly sheddableShare: number;
  readonly lora?: LoraSpec | undefined;
  readonly tenants?: readonly TenantSpec[] | undefined;
}

export interface SimRequest {
  readonly id: number;
  readonly gateway: number;
  readonly arrivalAt: number;
  readonly promptTokens: number;
  readonly outputTokens: number;
  readonly prompt: string;
  /** The engine's block hashes of the prompt; absent when the workload has no reusable prefix. */
  readonly blockHashes: number[] | undefined;
  /**
   * The prompt's token ids (what an EPP with the model's tokenizer computes) and the content keys
   * of its full blocks (`kvBlockKeys`, what a collector relays for the blocks the engine stores),
   * index for index with `blockHashes`; absent with it.
   */
  readonly tokenIds: Uint32Array | undefined;
  readonly contentKeys: number[] | undefined;
  /** Shared-prefix group (`part:group`), or -1. */
  readonly group: number;
  /** Its band: 0, −1 for sheddable requests, or its tenant's band. */
  readonly priority: number;
  /** Its tenant (index in the workload's tenants; 0 without tenants) and fairness id (undefined without tenants). */
  readonly tenant: number;
  readonly fairnessId: string | undefined;
  /** The LoRA adapter it names (the model it asks for), or undefined for the base model. */
  readonly lora: string | undefined;
}

/** Deterministic filler text; slices of it make prompts of any length. */
const FILLER = (() => {
  const words = [
    'the',
    'model',
    'server',
    'answers',
    'each',
    'question',
    'about',
    'books',
    'with',
    'care',
    'and',
    'cites',
    'titles',
    'never',
    'prices',
    'zone',
  ];
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

/** The adapter a LoRA request names: Zipf over the adapters, or none (the base model). */
function adapterOf(spec: LoraSpec, rng: Rng): string | undefined {
  if (rng.next() >= spec.share) return undefined;
  let total = 0;
  for (let k = 0; k < spec.adapters; k++) total += 1 / (k + 1) ** spec.skew;
  let u = rng.next() * total;
  for (let k = 0; k < spec.adapters; k++) {
    u -= 1 / (k + 1) ** spec.skew;
    if (u < 0) return `adapter-${k}`;
  }
  return `adapter-${spec.adapters - 1}`;
}

/** An index drawn by share (the shares sum to 1; rounding lands on the last). */
function drawShare(items: readonly { readonly share: number }[], rng: Rng): number {
  let u = rng.next();
  for (let i = 0; i < items.length - 1; i++) {
    u -= (items[i] as { share: number }).share;
    if (u < 0) return i;
  }
  return items.length - 1;
}

function clampInt(x: number, lo: number, hi: number): number {
  return Math.max(lo, Math.min(hi, Math.round(x)));
}

/** The shared system prompts of a shared-prefix workload, built once per run from the seed. */
export class PrefixGroups {
  private readonly prompts: string[] = [];
  private readonly hashes: number[][] = [];
  private readonly tokens: Uint32Array[] = [];
  private readonly keys: number[][] = [];

  constructor(
    readonly spec: SharedPrefixSpec,
    seed: number,
    /** Distinguishes the groups of two shared-prefix parts of one workload. */
    readonly part = 0,
  ) {
    const rng = new Rng((seed ^ 0x9a7e ^ (part * 0x3c6ef372)) >>> 0);
    const [min, max] = spec.prefixTokens;
    for (let g = 0; g < spec.groups; g++) {
      const tokens = 16 * Math.round((min + rng.next() * (max - min)) / 16);
      const prompt = text(`[system prompt ${part}.${g}] `, tokens * CHARS_PER_TOKEN, g * 977 + part * 13);
      this.prompts.push(prompt);
      this.hashes.push(textBlockHashes(prompt));
      const ids = tokenize(prompt);
      this.tokens.push(ids);
      this.keys.push(kvBlockKeys(ids, 16));
    }
  }

  /**
   * The engine's block hashes of `prompt(group) + question`: the group's cached hashes continued
   * over the question (a system prompt is whole blocks, so the chain and the token boundaries line
   * up) — the same numbers as `textBlockHashes` of the whole prompt, for a fraction of the work.
   */
  blockHashes(group: number, question: string, tokens = tokenize(question)): number[] {
    const head = this.hashes[group] as number[];
    const n = Math.floor(tokens.length / 16);
    const out = head.slice();
    let parent = head.length > 0 ? (head[head.length - 1] as number) : 0;
    for (let i = 0; i < n; i++) {
      parent = hashBlock(parent, tokens, i * 16, (i + 1) * 16);
      out.push(parent);
    }
    return out;
  }

  /** The token ids and content keys of `prompt(group) + question` (see SimRequest), built like blockHashes. */
  content(group: number, questionTokens: Uint32Array): { tokenIds: Uint32Array; contentKeys: number[] } {
    const head = this.tokens[group] as Uint32Array;
    const tokenIds = new Uint32Array(head.length + questionTokens.length);
    tokenIds.set(head);
    tokenIds.set(questionTokens, head.length);
    const headKeys = this.keys[group] as number[];
    const tail = kvBlockKeys(questionTokens, 16, { parent: headKeys.length > 0 ? headKeys[headKeys.length - 1] : undefined });
    return { tokenIds, contentKeys: headKeys.concat(tail) };
  }

  prompt(group: number): string {
    return this.prompts[group] as string;
  }

  get count(): number {
    return this.spec.groups;
  }
}

/** Builds the prefix groups of every shared-prefix part of a workload (undefined for other parts). */
export function prefixGroupsOf(workload: WorkloadSpec, seed: number): (PrefixGroups | undefined)[] {
  return workload.parts.map((p, i) => (p.spec.kind === 'shared-prefix' ? new PrefixGroups(p.spec, seed, i) : undefined));
}

/** A gateway's arrival rate over time: piecewise constant, `rates[i]` from `startsMs[i]` on. */
export interface RateSchedule {
  readonly startsMs: readonly number[];
  readonly rates: readonly number[];
}

export const constantRate = (rate: number): RateSchedule => ({ startsMs: [0], rates: [rate] });

/**
 * Arrivals of one zone gateway: a Poisson process whose rate follows `schedule`, in [0, endMs).
 * At a rate change the pending gap is redrawn at the new rate (the process is memoryless, so this
 * is exact and stays deterministic).
 */
export interface ArrivalOptions {
  readonly workload: WorkloadSpec;
  readonly groups: readonly (PrefixGroups | undefined)[];
  readonly schedule: RateSchedule;
  /** This gateway's index, and how many there are (request ids interleave over gateways). */
  readonly gateway: number;
  readonly gateways: number;
  readonly seed: number;
  /** No arrival at or after this time. */
  readonly endMs: number;
  /** Draw shared-prefix groups from the first `groupLimit` only (capacity calibration). */
  readonly groupLimit?: number | undefined;
}

export class ArrivalStream {
  private readonly rng: Rng;
  private k = 0;
  private nextAt: number;
  private readonly workload: WorkloadSpec;
  private readonly groups: readonly (PrefixGroups | undefined)[];
  private readonly schedule: RateSchedule;
  private readonly gateway: number;
  private readonly gateways: number;
  private readonly endMs: number;
  private readonly groupLimit: number;

  constructor(o: ArrivalOptions) {
    this.workload = o.workload;
    this.groups = o.groups;
    this.schedule = o.schedule;
    this.gateway = o.gateway;
    this.gateways = o.gateways;
    this.endMs = o.endMs;
    this.groupLimit = o.groupLimit ?? Number.POSITIVE_INFINITY;
    this.rng = new Rng((o.seed * 7919 + o.gateway * 104_729 + 17) >>> 0);
    this.nextAt = this.after(0);
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
    this.nextAt = this.after(at);
    return request;
  }

  /** The first arrival after `t`. */
  private after(t: number): number {
    const { startsMs, rates } = this.schedule;
    for (;;) {
      let seg = 0;
      while (seg + 1 < startsMs.length && (startsMs[seg + 1] as number) <= t) seg++;
      const segEnd = seg + 1 < startsMs.length ? (startsMs[seg + 1] as number) : Number.POSITIVE_INFINITY;
      const rate = rates[seg] as number;
      if (rate > 0) {
        const at = t + (-Math.log(1 - this.rng.next()) / rate) * 1000;
        if (at < segEnd) return at;
      }
      if (!Number.isFinite(segEnd) || segEnd >= this.endMs) return Number.POSITIVE_INFINITY;
      t = segEnd;
    }
  }

  private make(id: number, at: number): SimRequest {
    const rng = this.rng;
    const parts = this.workload.parts;
    let part = 0;
    if (parts.length > 1) {
      let u = rng.next() * parts.reduce((a, p) => a + p.weight, 0);
      while (part < parts.length - 1 && u >= (parts[part] as { weight: number }).weight) u -= (parts[part++] as { weight: number }).weight;
    }
    const shed = this.workload.sheddableShare > 0 && rng.next() < this.workload.sheddableShare;
    const lora = this.workload.lora ? adapterOf(this.workload.lora, rng) : undefined;
    // Drawn only when the workload has tenants, so the requests of a workload without are unchanged.
    const tenants = this.workload.tenants;
    const tenant = tenants ? drawShare(tenants, rng) : 0;
    const spec0 = tenants?.[tenant];
    const band = spec0 ? (spec0.priorities[drawShare(spec0.priorities, rng)]?.priority ?? 0) : 0;
    const priority = shed ? -1 : band;
    const who = { tenant, fairnessId: spec0?.fairnessId };
    const spec = (parts[part] as { spec: SingleWorkload }).spec;
    if (spec.kind === 'sharegpt') {
      const promptTokens = clampInt(lognormal(rng, spec.inputMean, spec.sigma), 4, spec.inputMax);
      const outputTokens = clampInt(lognormal(rng, spec.outputMean, spec.sigma), 4, spec.outputMax);
      const prompt = text(`[user request ${id}] `, promptTokens * CHARS_PER_TOKEN, id * 131);
      return {
        id,
        gateway: this.gateway,
        arrivalAt: at,
        promptTokens,
        outputTokens,
        prompt,
        blockHashes: undefined,
        tokenIds: undefined,
        contentKeys: undefined,
        group: -1,
        priority,
        ...who,
        lora,
      };
    }
    const groups = this.groups[part] as PrefixGroups;
    const group = rng.int(Math.min(groups.count, this.groupLimit));
    const [qMin, qMax] = spec.questionTokens;
    const questionTokens = clampInt(qMin + rng.next() * (qMax - qMin), 1, 1 << 20);
    const outputTokens = clampInt(lognormal(rng, spec.outputTokens, 0.3), 4, 4096);
    const question = text(`\n[question ${id}] `, questionTokens * CHARS_PER_TOKEN, id * 131);
    const prompt = groups.prompt(group) + question;
    const promptTokens = Math.ceil(prompt.length / CHARS_PER_TOKEN);
    const questionIds = tokenize(question);
    const blockHashes = groups.blockHashes(group, question, questionIds);
    const { tokenIds, contentKeys } = groups.content(group, questionIds);
    return {
      id,
      gateway: this.gateway,
      arrivalAt: at,
      promptTokens,
      outputTokens,
      prompt,
      blockHashes,
      tokenIds,
      contentKeys,
      group: part * 1_000_000 + group,
      priority,
      ...who,
      lora,
    };
  }
}
