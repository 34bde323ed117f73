// Model rewrites: configured weighted targets per model, overridden by a request header.
import type { InferenceBody } from './openai.js';

export interface ModelRewriteTarget {
  readonly model: string;
  /** Relative weight, >= 0. When every weight of a rule is 0 the choice is uniform. */
  readonly weight: number;
}

export interface ModelRewriteRule {
  /** The requested model this rule applies to (exact match). */
  readonly match: string;
  readonly targets: readonly ModelRewriteTarget[];
}

/** A uniform random number in [0, 1); injected so that choices are reproducible in tests. */
export type Random = () => number;

export interface ModelRewriter {
  /**
   * The model to send upstream. A non-empty `x-gateway-model-name-rewrite` header wins;
   * otherwise the rule for `model`, if any, picks a target by weight; otherwise `model`.
   */
  target(model: string, headerOverride: string | undefined, random: Random): string;
}

interface CompiledRule {
  readonly models: readonly string[];
  /** Running totals of the weights; rules have few targets, so a linear scan finds the choice. */
  readonly cumulative: readonly number[];
  readonly total: number;
}

/** Validates the rules once (throws on a bad config) and indexes them by model. */
export function compileModelRewrites(rules: readonly ModelRewriteRule[]): ModelRewriter {
  const byModel = new Map<string, CompiledRule>();
  for (const rule of rules) {
    if (rule.match === '') throw new RangeError('model rewrite rule has an empty match');
    if (byModel.has(rule.match)) throw new RangeError(`two model rewrite rules match "${rule.match}"`);
    if (rule.targets.length === 0) throw new RangeError(`model rewrite rule for "${rule.match}" has no targets`);
    const cumulative: number[] = [];
    let total = 0;
    for (const target of rule.targets) {
      if (target.model === '') throw new RangeError(`model rewrite rule for "${rule.match}" has an empty target model`);
      if (!Number.isFinite(target.weight) || target.weight < 0) {
        throw new RangeError(`model rewrite target "${target.model}" has an invalid weight ${target.weight}`);
      }
      total += target.weight;
      cumulative.push(total);
    }
    byModel.set(rule.match, { models: rule.targets.map((target) => target.model), cumulative, total });
  }
  return {
    target(model, headerOverride, random) {
      if (headerOverride !== undefined && headerOverride !== '') return headerOverride;
      const rule = byModel.get(model);
      return rule === undefined ? model : choose(rule, random());
    },
  };
}

function choose(rule: CompiledRule, r: number): string {
  const { models, cumulative, total } = rule;
  // Clamp so a misbehaving random source cannot index past the end.
  const u = Math.min(Math.max(r, 0), 1 - Number.EPSILON);
  if (total === 0) return models[Math.floor(u * models.length)] ?? models[0] ?? '';
  const point = u * total;
  for (let i = 0; i < cumulative.length; i++) {
    // Strictly greater: a zero-weight target is never chosen.
    if ((cumulative[i] ?? 0) > point) return models[i] ?? '';
  }
  return models[models.length - 1] ?? '';
}

export interface RewrittenBody {
  /** The bytes to forward: the original ones unless the model changed. */
  readonly bytes: Uint8Array;
  readonly changed: boolean;
  /** The model sent upstream. */
  readonly model: string;
}

/**
 * Sets `model` to `target`. The body is re-serialised only when the model actually changes, so
 * an unchanged request is forwarded byte for byte. (Re-serialising keeps key order but not
 * formatting, and numbers beyond 2^53 lose precision, as with any JSON.parse.)
 */
export function rewriteModel(body: InferenceBody, original: Uint8Array, target: string): RewrittenBody {
  if (target === body.model) return { bytes: original, changed: false, model: target };
  const json = { ...body.json, model: target };
  return { bytes: Buffer.from(JSON.stringify(json), 'utf8'), changed: true, model: target };
}
