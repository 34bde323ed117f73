import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { Fleet } from '@spillway/fleet';
import {
  EppMetrics,
  FlowMetrics,
  KvCounters,
  registerChargeMetrics,
  registerKvMetrics,
  registerSharedStateMetrics,
  SharedStateCounters,
  TokenCache,
} from '@spillway/epp';
import { CollectorMetrics } from '@spillway/collector';

// The runbook must name what the binaries really export and log: a renamed metric or log line
// fails here instead of leaving an alert that never fires.
const root = join(import.meta.dirname, '..', '..');
const operations = readFileSync(join(root, 'docs/operations.md'), 'utf8');
const metricsDoc = readFileSync(join(root, 'docs/metrics.md'), 'utf8');

async function exported(): Promise<Set<string>> {
  const names = new Set<string>();
  const epp = new EppMetrics();
  // The TLS metrics join it when the EPP serves TLS (--tls-cert).
  epp.registerTls();
  // The shared-state channel's metrics join the EPP's registry when sharing is on (the default).
  registerSharedStateMetrics(epp.registry, {
    counters: new SharedStateCounters(),
    outboxDropped: () => 0,
    peerCount: () => 0,
    ownInFlight: () => 0,
    remoteInFlight: () => 0,
  });
  // So do the KV metrics (--kv-events, the default), the token cache's with a tokenizer.
  const stats = {
    pods: 0,
    partialPods: 0,
    blocks: 0,
    bytes: 0,
    gaps: 0,
    droppedBatches: 0,
    lookups: 0,
    hits: 0,
    evicted: 0,
    uncredited: 0,
    snapshots: 0,
    batches: 0,
  };
  registerKvMetrics(epp.registry, { counters: new KvCounters(), stats: () => stats, cache: new TokenCache(1024) });
  // And flow control's (every EPP).
  new FlowMetrics(epp.registry);
  // And the charges' (always).
  registerChargeMetrics(epp.registry, new Fleet());
  for (const registry of [epp.registry, new CollectorMetrics().registry]) {
    for (const metric of await registry.getMetricsAsJSON()) names.add(metric.name);
  }
  return names;
}

/** spillway_* and inference_* names in a text, without histogram/counter sample suffixes. */
function metricNames(text: string): Set<string> {
  const names = new Set<string>();
  for (const [name] of text.matchAll(/\b(?:spillway|inference)_[a-z0-9_]+/g)) names.add(name.replace(/_(bucket|sum|count)$/, ''));
  return names;
}

describe('docs/operations.md', () => {
  it('has example alert rules that parse and name only exported metrics', async () => {
    const block = /```yaml\n(groups:[\s\S]*?)```/.exec(operations)?.[1];
    expect(block).toBeDefined();
    const rules = (parseYaml(block as string) as { groups: { rules: { alert: string; expr: string }[] }[] }).groups.flatMap((g) => g.rules);
    expect(rules.length).toBeGreaterThan(10);
    const known = await exported();
    for (const rule of rules) {
      const names = metricNames(rule.expr);
      expect(names.size, rule.alert).toBeGreaterThan(0);
      for (const name of names) expect(known, `${rule.alert}: ${name}`).toContain(name);
    }
  });

  it('names only exported metrics anywhere in the runbook and the metrics reference', async () => {
    const known = await exported();
    // Families documented by a shared prefix (`..._output_tokens`) are spelled out in full elsewhere.
    for (const name of new Set([...metricNames(operations), ...metricNames(metricsDoc)])) {
      if (name.endsWith('_')) continue;
      expect(known, name).toContain(name);
    }
  });

  it('quotes log lines the code really writes', () => {
    const sources = ['app', 'request', 'telemetry', 'config', 'shared-state', 'kv', 'ui']
      .map((room) => `services/epp/src/${room}`)
      .concat(['packages/bus/src'])
      .flatMap((dir) =>
        readdirSync(join(root, dir))
          .filter((f) => f.endsWith('.ts'))
          .map((f) => readFileSync(join(root, dir, f), 'utf8')),
      )
      .join('\n');
    const table = operations.slice(operations.indexOf('## Logs'));
    const quoted = [...table.matchAll(/^\| `([^`]+)`(?: \/ `([^`]+)`)? \|/gm)]
      .flatMap((m) => [m[1], m[2]])
      .filter((s): s is string => s !== undefined);
    expect(quoted.length).toBeGreaterThan(5);
    for (const line of quoted) expect(sources, line).toContain(line.replace(/ \.\.\.$/, ''));
  });
});
