import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { startCollector, type RunningCollector } from '../../src/app.js';
import { parseCollectorArgs } from '../../src/config.js';
import { MemorySink } from './memory-sink.js';

export interface TestCollector {
  running: RunningCollector;
  sink: MemorySink;
  file: string;
  writeEndpoints(entries: unknown): void;
  /** A counter or gauge value from the collector's own registry. */
  metric(name: string, labels?: Record<string, string>): Promise<number>;
}

/** An in-process collector with short intervals over an endpoints file, publishing into memory. */
export async function startTestCollector(entries: unknown, extraArgs: string[] = []): Promise<TestCollector> {
  const dir = mkdtempSync(join(tmpdir(), 'spillway-collector-'));
  const file = join(dir, 'endpoints.yaml');
  const write = (value: unknown): void => writeFileSync(file, typeof value === 'string' ? value : JSON.stringify(value));
  write(entries);
  const parsed = parseCollectorArgs(
    [
      '--pool',
      'llama',
      '--zone',
      'zone-a',
      '--region',
      'r1',
      '--endpoints',
      file,
      '--sample-interval-ms',
      '20',
      '--scrape-timeout-ms',
      '300',
      '--probe-interval-ms',
      '50',
      '--probe-timeout-ms',
      '200',
      '--endpoints-poll-ms',
      '30',
      '--metrics-port',
      '0',
      '--log-level',
      'silent',
      ...extraArgs,
    ],
    {},
  );
  if (parsed.help) throw new Error('unexpected --help');
  const sink = new MemorySink();
  const running = await startCollector(parsed.config, { sink, logger: pino({ level: 'silent' }) });
  return {
    running,
    sink,
    file,
    writeEndpoints: write,
    async metric(name, labels = {}) {
      const metric = running.metrics.registry.getSingleMetric(name);
      if (!metric) throw new Error(`no metric ${name}`);
      const { values } = await metric.get();
      return values
        .filter((v) => Object.entries(labels).every(([k, want]) => String((v.labels as Record<string, unknown>)[k]) === want))
        .reduce((sum, v) => sum + v.value, 0);
    },
  };
}
