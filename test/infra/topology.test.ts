/**
 * infra/topology.yaml is the one source of zones and regions: it parses, bad topologies are refused
 * with the field named, and `npm run render` turns it into files (and fresh NATS passwords).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { Secret } from 'kubernetes-models/v1';
import { DEFAULT_ZONES } from '../../infra/nats/topology.js';
import { randomPassword } from '../../infra/render.js';
import { loadTopology, parseTopology, TOPOLOGY_FILE } from '../../infra/topology.js';

const ROOT = join(TOPOLOGY_FILE, '..', '..');
const VALID = `pool: llama
model: llama
namespace: spillway
image: spillway/spillway:0.1.0
natsImage: nats:2.10-alpine
zones:
  - { name: zone-a, region: r1, modelServers: 1 }
`;

function render(args: string[]): { status: number | null; stdout: string; stderr: string } {
  return spawnSync(process.execPath, ['--conditions=@spillway/source', '--import', 'tsx', join(ROOT, 'infra', 'render.ts'), ...args], {
    encoding: 'utf8',
    cwd: ROOT,
  });
}

describe('the deployment topology', () => {
  it('names three zones in two regions, which the laptop NATS configs use too', () => {
    const topology = loadTopology();
    expect(topology.zones.map((z) => `${z.name}/${z.region}`)).toEqual(['zone-a/r1', 'zone-b/r1', 'zone-c/r2']);
    expect(DEFAULT_ZONES).toEqual(topology.zones.map((z) => z.name));
  });

  it('refuses bad topologies, naming the field', () => {
    expect(parseTopology(VALID).zones).toHaveLength(1);
    const bad = (text: string) => () => parseTopology(text, 'my.yaml');
    expect(bad(VALID.replace('pool: llama', 'pool: Llama_1'))).toThrow(/^my\.yaml: pool: must be a DNS label/);
    expect(bad(VALID.replace('zones:\n  - { name: zone-a, region: r1, modelServers: 1 }', 'zones: []'))).toThrow(
      /zones: name at least one zone/,
    );
    expect(bad(`${VALID}  - { name: zone-a, region: r2, modelServers: 1 }\n`)).toThrow(/zones\.1\.name: zone zone-a appears twice/);
    expect(bad(VALID.replace('name: zone-a', 'name: hub'))).toThrow(/zones\.0\.name: is reserved/);
    expect(bad(VALID.replace('modelServers: 1', 'modelServers: -1'))).toThrow(/zones\.0\.modelServers/);
    expect(bad(VALID.replace('region: r1,', 'region: r1, regoin: r2,'))).toThrow(/zones\.0: Unrecognized key: "regoin"/);
    expect(bad(VALID.replace('image: ', 'imgae: '))).toThrow(/Unrecognized key: "imgae"/);
    expect(bad('pool: [')).toThrow();
  });

  it('`npm run render -- --check` passes on the committed files, and --out renders another topology elsewhere', () => {
    const check = render(['--check']);
    expect(check.status, check.stderr).toBe(0);
    expect(check.stdout).toMatch(/\d+ files match the topology/);
    const dir = mkdtempSync(join(tmpdir(), 'spillway-render-'));
    try {
      const file = join(dir, 'mine.yaml');
      writeFileSync(file, VALID.replace('zone-a', 'eu-1a'));
      const result = render(['--topology', file, '--out', join(dir, 'out')]);
      expect(result.status, result.stderr).toBe(0);
      expect(readdirSync(join(dir, 'out', 'envoy'))).toEqual(['envoy-eu-1a.yaml']);
      expect(readdirSync(join(dir, 'out', 'k8s'))).toContain('nats.yaml');
      // The laptop NATS configs belong to the committed topology only.
      expect(readdirSync(join(dir, 'out'))).not.toContain('nats');
      const stale = render(['--topology', file, '--out', join(dir, 'out'), '--check']);
      expect(stale.status).toBe(0);
      writeFileSync(file, VALID.replace('zone-a', 'eu-1b'));
      const changed = render(['--topology', file, '--out', join(dir, 'out'), '--check']);
      expect(changed.status).toBe(1);
      expect(changed.stderr).toMatch(/out of date/);
      const broken = render(['--topology', join(dir, 'missing.yaml')]);
      expect(broken.status).toBe(1);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);

  it('--secrets prints a valid Secret with a fresh password for every NATS user', () => {
    const first = render(['--secrets']);
    expect(first.status, first.stderr).toBe(0);
    const secret = parse(first.stdout) as { stringData: Record<string, string> };
    expect(() => new Secret(secret as never).validate()).not.toThrow();
    const users = Object.keys(secret.stringData);
    expect(users).toEqual(expect.arrayContaining(['admin-hub', 'leaf-zone-a', 'admin-zone-c', 'collector-zone-b', 'epp-zone-a']));
    for (const value of Object.values(secret.stringData)) expect(value).toMatch(/^[A-Za-z][A-Za-z0-9_-]{31,}$/);
    expect(new Set(Object.values(secret.stringData)).size).toBe(users.length);
    const second = parse(render(['--secrets']).stdout) as { stringData: Record<string, string> };
    expect(second.stringData['admin-hub']).not.toBe(secret.stringData['admin-hub']);
    expect(randomPassword()).toMatch(/^p[A-Za-z0-9_-]{32}$/);
  }, 60_000);
});
