import type { ModelRewriteRule } from '@spillway/protocol';

/** The label value of every model that is not configured. */
export const OTHER_MODEL = 'other';
/** Longest label value written; a longer configured name is cut here (Prometheus keeps every byte). */
export const MAX_LABEL_CHARS = 128;

/**
 * Model names as metric label values. Clients choose the model of each request, and every label
 * value is a Prometheus series kept for the process's life, so only configured models (the
 * `modelRewrites` matches and targets, and `metricModels`) get their own value; every other name
 * is counted under `other`. The number of model series is thus fixed by the config file.
 */
export class ModelLabels {
  private readonly labels = new Map<string, string>();

  constructor(rewrites: readonly ModelRewriteRule[], extra: readonly string[]) {
    const add = (model: string): void => {
      this.labels.set(model, capLabel(model));
    };
    for (const rule of rewrites) {
      add(rule.match);
      for (const target of rule.targets) add(target.model);
    }
    for (const model of extra) add(model);
  }

  /** The label value for `model`: itself when configured, `other` otherwise. */
  of(model: string): string {
    return this.labels.get(model) ?? OTHER_MODEL;
  }

  get size(): number {
    return this.labels.size;
  }
}

export function capLabel(value: string): string {
  return value.length <= MAX_LABEL_CHARS ? value : value.slice(0, MAX_LABEL_CHARS);
}
