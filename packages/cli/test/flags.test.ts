import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  CliError,
  commaList,
  envName,
  loadConfigFile,
  MAX_CONFIG_FILE_BYTES,
  parseCommandLine,
  parseConfigText,
  port,
  readConfigBytesAsync,
  readConfigFile,
  renderHelp,
} from '@spillway/cli';

const specs = {
  pool: { description: 'pool name', schema: z.string().min(1), placeholder: 'NAME' },
  grpcPort: { description: 'ext_proc port', schema: port(9002), placeholder: 'N' },
  lora: { description: 'adapters', schema: commaList().default([]) },
  once: { description: 'print once', schema: z.boolean().default(false), boolean: true },
};

describe('parseCommandLine', () => {
  it('reads flags, then SPILLWAY_* environment, then the base values, then defaults', () => {
    const parsed = parseCommandLine(specs, ['--pool', 'llama', '--lora', 'a, b,,c'], {
      SPILLWAY_GRPC_PORT: '7000',
      SPILLWAY_POOL: 'ignored',
    });
    expect(parsed.values).toEqual({ pool: 'llama', grpcPort: 7000, lora: ['a', 'b', 'c'], once: false });
    expect([...parsed.explicit].sort()).toEqual(['grpcPort', 'lora', 'pool']);
    const fromBase = parseCommandLine(specs, [], {}, { pool: 'from-file', grpcPort: 1234 });
    expect(fromBase.values.pool).toBe('from-file');
    expect(fromBase.values.grpcPort).toBe(1234);
    expect(parseCommandLine(specs, ['--pool=x', '--once']).values.once).toBe(true);
    expect(parseCommandLine(specs, ['--pool=x'], { SPILLWAY_ONCE: 'true' }).values.once).toBe(true);
  });

  it('names the flag or variable that is wrong', () => {
    expect(() => parseCommandLine(specs, [])).toThrow(/--pool: .*\(required\)/);
    expect(() => parseCommandLine(specs, ['--pool', 'p', '--grpc-port', 'abc'])).toThrow(/--grpc-port/);
    expect(() => parseCommandLine(specs, ['--pool', 'p', '--grpc-port', '70000'])).toThrow(/--grpc-port/);
    expect(() => parseCommandLine(specs, ['--pool', 'p'], { SPILLWAY_GRPC_PORT: '-1' })).toThrow(/SPILLWAY_GRPC_PORT/);
    expect(() => parseCommandLine(specs, ['--pool', 'p', '--bogus', '1'])).toThrow(CliError);
    expect(() => parseCommandLine(specs, ['--pool', 'p', '--bogus'])).toThrow(/bogus/);
    expect(() => parseCommandLine(specs, ['--pool', 'p'], { SPILLWAY_ONCE: 'maybe' })).toThrow(/SPILLWAY_ONCE/);
    expect(() => parseCommandLine(specs, ['stray'])).toThrow(CliError);
  });

  it('tells which flag is at fault, in CliError.flag and at the start of the message', () => {
    const fault = (argv: string[], env: NodeJS.ProcessEnv = {}) => {
      try {
        parseCommandLine(specs, argv, env);
      } catch (error) {
        if (error instanceof CliError) return { flag: error.flag, message: error.message };
        throw error;
      }
      throw new Error('expected a CliError');
    };
    expect(fault([])).toMatchObject({ flag: 'pool', message: expect.stringMatching(/^--pool: /) });
    expect(fault(['--pool', 'p', '--grpc-port', 'x'])).toMatchObject({
      flag: 'grpc-port',
      message: expect.stringMatching(/^--grpc-port: /),
    });
    expect(fault(['--pool', 'p'], { SPILLWAY_GRPC_PORT: 'x' })).toMatchObject({
      flag: 'grpc-port',
      message: expect.stringMatching(/^SPILLWAY_GRPC_PORT: /),
    });
    expect(fault(['--pool', 'p'], { SPILLWAY_ONCE: 'maybe' })).toMatchObject({
      flag: 'once',
      message: expect.stringMatching(/^SPILLWAY_ONCE: /),
    });
    expect(fault(['--pool', 'p', '--bogus-flag'])).toEqual({ flag: 'bogus-flag', message: '--bogus-flag: unknown flag (see --help)' });
    expect(fault(['--pool'])).toEqual({ flag: 'pool', message: '--pool: needs a value' });
    expect(fault(['--pool', 'p', '--once=yes'])).toEqual({ flag: 'once', message: '--once: takes no value' });
    expect(fault(['stray']).flag).toBeUndefined();
  });

  it('reports --help and renders every flag with its variable', () => {
    expect(parseCommandLine(specs, ['--help', '--pool', 'p']).help).toBe(true);
    expect(parseCommandLine(specs, ['--help']).help).toBe(true); // even with required flags missing
    const help = renderHelp('spillway-x', 'Does x.', specs);
    expect(help).toContain('--grpc-port N');
    expect(help).toContain(envName('grpcPort'));
    expect(envName('grpcPort')).toBe('SPILLWAY_GRPC_PORT');
  });
});

describe('loadConfigFile', () => {
  const dir = mkdtempSync(join(tmpdir(), 'spillway-cli-'));
  const schema = z.object({ thresholds: z.object({ kv: z.number().max(1) }).default({ kv: 0.8 }) });

  it('reads YAML and JSON', () => {
    writeFileSync(join(dir, 'a.yaml'), 'thresholds:\n  kv: 0.5\n');
    writeFileSync(join(dir, 'b.json'), '{"thresholds":{"kv":0.7}}');
    writeFileSync(join(dir, 'empty.yaml'), '');
    expect(loadConfigFile(join(dir, 'a.yaml'), schema)).toEqual({ thresholds: { kv: 0.5 } });
    expect(loadConfigFile(join(dir, 'b.json'), schema)).toEqual({ thresholds: { kv: 0.7 } });
    expect(loadConfigFile(join(dir, 'empty.yaml'), schema)).toEqual({ thresholds: { kv: 0.8 } });
  });

  it('names the file and the field that is wrong', () => {
    writeFileSync(join(dir, 'bad.yaml'), 'thresholds:\n  kv: 2\n');
    writeFileSync(join(dir, 'broken.yaml'), 'thresholds: [1,\n');
    expect(() => loadConfigFile(join(dir, 'bad.yaml'), schema)).toThrow(/bad\.yaml: thresholds\.kv/);
    expect(() => loadConfigFile(join(dir, 'broken.yaml'), schema)).toThrow(/not valid YAML/);
    expect(() => loadConfigFile(join(dir, 'missing.yaml'), schema)).toThrow(/cannot read/);
  });

  it('refuses a file over MAX_CONFIG_FILE_BYTES, read or watched, before parsing it; one at the cap is read', async () => {
    // 50 MB of valid YAML (a comment), as the review wrote: refused, naming the file and the cap.
    const huge = join(dir, 'huge.yaml');
    writeFileSync(huge, `thresholds:\n  kv: 0.5\n#${'x'.repeat(50 * 1024 * 1024)}\n`);
    expect(() => loadConfigFile(huge, schema)).toThrow(/huge\.yaml: larger than 1048576 bytes/);
    expect(() => readConfigFile(huge, schema)).toThrow(CliError);
    await expect(readConfigBytesAsync(huge)).rejects.toThrow(/larger than 1048576 bytes/);
    expect(() => parseConfigText(`#${'é'.repeat(MAX_CONFIG_FILE_BYTES / 2)}`, 'edited.yaml', schema)).toThrow(/edited\.yaml: larger than/);
    const atCap = join(dir, 'at-cap.yaml');
    const body = 'thresholds:\n  kv: 0.5\n#';
    writeFileSync(atCap, body + 'x'.repeat(MAX_CONFIG_FILE_BYTES - body.length));
    expect(loadConfigFile(atCap, schema)).toEqual({ thresholds: { kv: 0.5 } });
    expect((await readConfigBytesAsync(atCap)).length).toBe(MAX_CONFIG_FILE_BYTES);
    await expect(readConfigBytesAsync(join(dir, 'missing.yaml'))).rejects.toThrow(/cannot read/);
  });
});
