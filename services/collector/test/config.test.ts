import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { CliError, envName } from '@spillway/cli';
import { Registry } from 'prom-client';
import { parseCollectorArgs } from '../src/config.js';
import { startMetricsServer } from '../src/metrics-server.js';
import { EndpointsFileError, parseEndpointsFile } from '../src/endpoints-file.js';

const base = ['--pool', 'llama', '--zone', 'zone-a', '--endpoints', 'eps.yaml'];

function flagError(argv: string[], env: Record<string, string> = {}): CliError {
  try {
    parseCollectorArgs(argv, env);
  } catch (error) {
    if (error instanceof CliError) return error;
    throw error;
  }
  throw new Error('expected a CliError');
}

describe('flags', () => {
  it('defaults per docs/flags.md and --help', () => {
    const parsed = parseCollectorArgs(base, {});
    if (parsed.help) throw new Error('help');
    expect(parsed.config).toMatchObject({
      pool: 'llama',
      zone: 'zone-a',
      region: undefined,
      endpointsFile: 'eps.yaml',
      sampleIntervalMs: 100,
      stream: 'SPILLWAY',
      readinessRepublishMs: 30_000,
      engine: undefined,
      kube: undefined,
      probe: { intervalMs: 1000, path: '/health', successThreshold: 1, failureThreshold: 2 },
      scrapeBackoffMaxMs: 30_000,
      scrapeLimits: { maxBytes: 4 * 1024 * 1024, cpuBudgetMs: 50 },
      metricsPort: 9091,
      metricsHost: '0.0.0.0',
    });
    const tuned = parseCollectorArgs(
      [...base, '--scrape-max-bytes', '1048576', '--scrape-cpu-budget-ms', '20', '--metrics-host', '127.0.0.1'],
      {},
    );
    if (tuned.help) throw new Error('help');
    expect(tuned.config).toMatchObject({ scrapeLimits: { maxBytes: 1_048_576, cpuBudgetMs: 20 }, metricsHost: '127.0.0.1' });
    expect(parsed.config.nats.servers).toEqual(['nats://127.0.0.1:4222']);
  });

  it('reads SPILLWAY_<FLAG> from the environment; the command line wins', () => {
    const parsed = parseCollectorArgs(['--sample-interval-ms', '50'], {
      SPILLWAY_POOL: 'p',
      SPILLWAY_ZONE: 'z',
      SPILLWAY_KUBE_NAMESPACE: 'llm',
      SPILLWAY_KUBE_ALL_ZONES: 'true',
      SPILLWAY_SAMPLE_INTERVAL_MS: '999',
      SPILLWAY_NATS: 'nats://10.0.0.1:4222',
    });
    if (parsed.help) throw new Error('help');
    expect(parsed.config.sampleIntervalMs).toBe(50);
    expect(parsed.config.kube).toMatchObject({ namespace: 'llm', allZones: true });
    expect(parsed.config.nats.servers).toEqual(['nats://10.0.0.1:4222']);
  });

  it('--help', () => {
    expect(parseCollectorArgs(['--help'], {})).toEqual({ help: true });
  });

  const bad: [string, string[], Record<string, string>, string][] = [
    ['missing --pool', ['--zone', 'z', '--endpoints', 'f'], {}, 'pool'],
    ['missing --zone', ['--pool', 'p', '--endpoints', 'f'], {}, 'zone'],
    ['no readiness source', ['--pool', 'p', '--zone', 'z'], {}, 'endpoints'],
    ['non-numeric interval', [...base, '--sample-interval-ms', '10ms'], {}, 'sample-interval-ms'],
    ['interval too small', [...base, '--sample-interval-ms', '1'], {}, 'sample-interval-ms'],
    ['unknown engine', [...base, '--engine', 'llamacpp'], {}, 'engine'],
    ['unknown engine from the environment', base, { SPILLWAY_ENGINE: 'llamacpp' }, 'engine'],
    ['port out of range', [...base, '--metrics-port', '70000'], {}, 'metrics-port'],
    ['probe path without /', [...base, '--probe-path', 'health'], {}, 'probe-path'],
    ['scrape byte limit below 64 KiB', [...base, '--scrape-max-bytes', '1000'], {}, 'scrape-max-bytes'],
    ['scrape CPU budget of zero', [...base, '--scrape-cpu-budget-ms', '0'], {}, 'scrape-cpu-budget-ms'],
    ['back-off cap not a number', [...base, '--scrape-backoff-max-ms', 'long'], {}, 'scrape-backoff-max-ms'],
    ['empty metrics host', [...base, '--metrics-host', ''], {}, 'metrics-host'],
    ['unknown flag', [...base, '--smaple-interval-ms', '5'], {}, 'smaple-interval-ms'],
    ['flag missing its value', [...base, '--zone'], {}, 'zone'],
    ['bad boolean in the environment', [...base], { SPILLWAY_KUBE_ALL_ZONES: 'maybe' }, 'kube-all-zones'],
    ['bad NATS URL', [...base, '--nats', 'http://x y'], {}, 'nats'],
    ['NATS user without password', [...base, '--nats-user', 'u'], {}, 'nats-password'],
  ];
  for (const [what, argv, env, flag] of bad) {
    it(`${what} names --${flag}`, () => {
      const error = flagError(argv, env);
      expect(error.flag).toBe(flag);
      // A value from the environment is reported by its variable (SPILLWAY_<FLAG>), as in every binary.
      const camel = flag.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
      const named = Object.keys(env).length > 0 ? envName(camel) : `--${flag}`;
      expect(error.message.startsWith(`${named}:`)).toBe(true);
    });
  }

  it('the binary exits non-zero naming the flag (needs `npx tsc -b services/collector`)', () => {
    const bin = join(import.meta.dirname, '..', 'bin', 'spillway-collector.js');
    const result = spawnSync(process.execPath, [bin, ...base, '--scrape-timeout-ms', 'soon'], { encoding: 'utf8' });
    expect(result.status).toBe(2);
    expect(result.stderr).toContain('--scrape-timeout-ms');
    const missing = spawnSync(process.execPath, [bin, '--pool', 'p', '--zone', 'z', '--endpoints', '/nonexistent/eps.yaml'], {
      encoding: 'utf8',
    });
    expect(missing.status).toBe(2);
    expect(missing.stderr).toContain('--endpoints');
    const help = spawnSync(process.execPath, [bin, '--help'], { encoding: 'utf8' });
    expect(help.status).toBe(0);
    expect(help.stdout).toContain('--kube-namespace');
  });
});

describe('endpoints file', () => {
  const defaults = { zone: 'zone-a', region: 'r1' };
  it('reads YAML and JSON, fills zone and region, canonicalises addresses', () => {
    const yaml = parseEndpointsFile(
      '- pod: a\n  address: 10.0.0.1:8000\n- pod: b\n  address: "[0:0::1]:8000"\n  zone: zone-b\n  engine: sglang\n',
      defaults,
    );
    expect(yaml).toEqual([
      { pod: 'a', address: '10.0.0.1:8000', zone: 'zone-a', region: 'r1', engine: undefined, labels: undefined, sourceReady: true },
      { pod: 'b', address: '[::1]:8000', zone: 'zone-b', region: 'r1', engine: 'sglang', labels: undefined, sourceReady: true },
    ]);
    const json = parseEndpointsFile(JSON.stringify({ endpoints: [{ pod: 'c', address: '10.0.0.3:80', labels: { app: 'x' } }] }), defaults);
    expect(json[0]).toMatchObject({ pod: 'c', labels: { app: 'x' } });
    expect(parseEndpointsFile('', defaults)).toEqual([]);
  });

  const bad: [string, string, RegExp][] = [
    ['not YAML', '- pod: [a\n', /not YAML/],
    ['a bad address', '- pod: a\n  address: localhost:80\n', /0\.address/],
    ['a port out of range', '- pod: a\n  address: 10.0.0.1:99999\n', /0\.address/],
    ['a missing pod', '- address: 10.0.0.1:80\n', /0\.pod/],
    ['an unknown engine', '- pod: a\n  address: 10.0.0.1:80\n  engine: tgi\n', /0\.engine/],
    ['an unknown key (typo)', '- pod: a\n  adress: 10.0.0.1:80\n', /Unrecognized|adress|address/],
    ['a duplicate pod', '- pod: a\n  address: 10.0.0.1:80\n- pod: a\n  address: 10.0.0.2:80\n', /duplicate pod a/],
    ['a scalar', '42\n', /root|Invalid/],
  ];
  for (const [what, text, message] of bad) {
    it(`rejects ${what}`, () => {
      expect(() => parseEndpointsFile(text, defaults)).toThrow(EndpointsFileError);
      expect(() => parseEndpointsFile(text, defaults)).toThrow(message);
    });
  }
});

describe('the metrics server address', () => {
  it('binds --metrics-host: all interfaces by default, loopback when asked', async () => {
    const registry = new Registry();
    for (const [host, expected] of [
      [undefined, '0.0.0.0'],
      ['127.0.0.1', '127.0.0.1'],
    ] as const) {
      const { server, port } = await startMetricsServer(registry, 0, host);
      try {
        expect(server.address()).toMatchObject({ address: expected, port });
        expect((await fetch(`http://127.0.0.1:${port}/health`)).status).toBe(200);
        expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200);
      } finally {
        await new Promise((resolve) => server.close(resolve));
      }
    }
  });

  it('takes --host as the same flag as --metrics-host, and refuses two different addresses', () => {
    const base = ['--pool', 'p', '--zone', 'a', '--endpoints', 'e.yaml'];
    const config = (argv: string[], env: NodeJS.ProcessEnv = {}) => {
      const parsed = parseCollectorArgs([...base, ...argv], env);
      if (parsed.help) throw new Error('help');
      return parsed.config.metricsHost;
    };
    expect(config([])).toBe('0.0.0.0');
    expect(config(['--host', '127.0.0.1'])).toBe('127.0.0.1');
    expect(config([], { SPILLWAY_HOST: '127.0.0.1' })).toBe('127.0.0.1');
    expect(config(['--metrics-host', '127.0.0.1', '--host', '127.0.0.1'])).toBe('127.0.0.1');
    expect(() => config(['--metrics-host', '127.0.0.1', '--host', '0.0.0.0'])).toThrow(/--host: /);
  });
});
