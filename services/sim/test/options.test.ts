import { describe, expect, it } from 'vitest';
import { CliError } from '@spillway/cli';
import { parseSimArgs } from '../src/index.js';

const opts = (argv: string[], env: NodeJS.ProcessEnv = {}) => {
  const r = parseSimArgs(argv, env);
  if (r.help) throw new Error('unexpected --help');
  return r.options;
};

describe('spillway-sim flags', () => {
  it('has defaults', () => {
    expect(opts([])).toMatchObject({
      port: 8000,
      host: '127.0.0.1',
      preset: 'llama-8b-h100',
      engineMode: 'step',
      timeScale: 1,
      lora: [],
      engineMetrics: 'vllm',
      errorRate: 0,
      stall: false,
      admin: false,
    });
  });

  it('parses every kind of flag', () => {
    expect(
      opts([
        '--port',
        '0',
        '--lora',
        'a, b,,c',
        '--time-scale',
        '100',
        '--max-num-seqs',
        '8',
        '--num-blocks',
        '100',
        '--max-waiting',
        '0',
        '--engine-metrics',
        'sglang',
        '--stall',
        '--error-rate',
        '0.25',
        '--preset',
        'test',
        '--crash-after-ms',
        '5',
        '--admin',
        '--engine-mode',
        'closed-form',
      ]),
    ).toMatchObject({
      admin: true,
      port: 0,
      lora: ['a', 'b', 'c'],
      timeScale: 100,
      maxNumSeqs: 8,
      numBlocks: 100,
      maxWaiting: 0,
      engineMetrics: 'sglang',
      stall: true,
      errorRate: 0.25,
      preset: 'test',
      crashAfterMs: 5,
      engineMode: 'closed-form',
    });
  });

  it('reads SPILLWAY_* and lets flags win', () => {
    const env = { SPILLWAY_TIME_SCALE: '50', SPILLWAY_MODEL: 'qwen', SPILLWAY_STALL: 'true', SPILLWAY_PORT: '9' };
    expect(opts(['--port', '10'], env)).toMatchObject({ timeScale: 50, model: 'qwen', stall: true, port: 10 });
  });

  it('answers --help', () => {
    expect(parseSimArgs(['--help'])).toEqual({ help: true });
  });

  const bad: [string[], NodeJS.ProcessEnv, RegExp][] = [
    [['--bogus'], {}, /--bogus/],
    [['--port', 'abc'], {}, /--port/],
    [['--port', '70000'], {}, /--port/],
    [['--time-scale=0'], {}, /--time-scale/],
    [['--time-scale=-2'], {}, /--time-scale/],
    [['--preset', 'gpt-9-tpu'], {}, /--preset/],
    [['--engine-metrics', 'triton'], {}, /--engine-metrics/],
    [['--engine-mode', 'fast'], {}, /--engine-mode/],
    [['--error-rate', '1.5'], {}, /--error-rate/],
    [['--max-num-seqs', '0'], {}, /--max-num-seqs/],
    [['--num-blocks', '2.5'], {}, /--num-blocks/],
    [['extra'], {}, /positional|extra/i],
    [[], { SPILLWAY_STALL: 'maybe' }, /SPILLWAY_STALL/],
    [[], { SPILLWAY_SEED: 'x' }, /SPILLWAY_SEED/],
    [['--kv-sliding-window', '4096'], {}, /needs --kv-events/],
    [['--kv-offload-blocks', '1000'], {}, /needs --kv-events/],
    [['--kv-events', 'tcp://*:5557', '--kv-sliding-window', '0'], {}, /--kv-sliding-window/],
    [['--kv-events', 'tcp://*:5557', '--kv-offload-blocks', 'many'], {}, /--kv-offload-blocks/],
  ];
  it('reads the KV-event shape flags', () => {
    const parsed = parseSimArgs(['--kv-events', 'tcp://*:5557', '--kv-sliding-window', '4096', '--kv-offload-blocks', '50000'], {});
    expect(parsed.help === false && parsed.options).toMatchObject({ kvSlidingWindow: 4096, kvOffloadBlocks: 50_000 });
  });
  it.each(bad)('rejects %j %j naming the flag', (argv, env, message) => {
    expect(() => parseSimArgs(argv, env)).toThrow(CliError);
    expect(() => parseSimArgs(argv, env)).toThrow(message);
  });
});
