import { parseArgs } from 'node:util';
import type { z } from 'zod';

/**
 * One flag of a binary. Values arrive as strings (flags, environment) and the zod schema turns them
 * into typed values, so `--port abc` and `SPILLWAY_PORT=abc` fail the same way, naming the flag.
 */
export interface FlagSpec<S extends z.ZodType = z.ZodType> {
  description: string;
  schema: S;
  /** A flag without a value (`--once`); its environment form accepts true/false/1/0. */
  boolean?: boolean;
  /** Shown in help, e.g. `URL` or `N`. */
  placeholder?: string;
}

export type FlagSpecs = Record<string, FlagSpec>;
export type FlagValues<F extends FlagSpecs> = { [K in keyof F]: z.output<F[K]['schema']> };

export class CliError extends Error {
  /**
   * @param flag the flag at fault, kebab-case without dashes (`grpc-port`), when there is one; the
   * message then starts with `--<flag>:` or, for a value from the environment, `SPILLWAY_<FLAG>:`.
   */
  constructor(
    message: string,
    readonly flag?: string,
  ) {
    super(message);
    this.name = 'CliError';
  }
}

/** `grpcPort` -> `grpc-port`: flags are kebab-case, the code's keys camelCase. */
export function flagName(key: string): string {
  return key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
}

/** `grpcPort` -> `SPILLWAY_GRPC_PORT` (docs/flags.md: every flag also as an environment variable). */
export function envName(key: string): string {
  return `SPILLWAY_${flagName(key).replace(/-/g, '_').toUpperCase()}`;
}

export interface ParsedCommandLine<F extends FlagSpecs> {
  /** Empty when `help` is true: check it first. */
  values: FlagValues<F>;
  help: boolean;
  /** Keys given explicitly on the command line or in the environment (not defaulted). */
  explicit: Set<keyof F>;
}

/**
 * Reads flags, then `SPILLWAY_*` environment variables for flags not given, then `base` (for
 * example a config file's values) for the rest, and validates everything with the flag schemas.
 * Throws CliError naming the first bad flag.
 */
export function parseCommandLine<F extends FlagSpecs>(
  specs: F,
  argv: readonly string[],
  env: NodeJS.ProcessEnv = {},
  base: Partial<Record<keyof F, unknown>> = {},
): ParsedCommandLine<F> {
  const options: Record<string, { type: 'string' | 'boolean' }> = { help: { type: 'boolean' } };
  for (const [key, spec] of Object.entries(specs)) options[flagName(key)] = { type: spec.boolean ? 'boolean' : 'string' };
  let parsed: ReturnType<typeof parseArgs>;
  try {
    parsed = parseArgs({ args: [...argv], options, strict: true, allowPositionals: false });
  } catch (error) {
    throw parseArgsError(error as Error & { code?: string });
  }
  const explicit = new Set<keyof F>();
  // --help wins over everything: required flags may be missing, and nothing is validated.
  if (parsed.values['help'] === true) return { values: {} as FlagValues<F>, help: true, explicit };
  const values: Record<string, unknown> = {};
  for (const [key, spec] of Object.entries(specs)) {
    const fromFlag = parsed.values[flagName(key)];
    const fromEnv = env[envName(key)];
    let raw: unknown;
    let source: string;
    if (fromFlag !== undefined) {
      raw = fromFlag;
      source = `--${flagName(key)}`;
      explicit.add(key);
    } else if (fromEnv !== undefined && fromEnv !== '') {
      raw = spec.boolean ? parseBooleanEnv(fromEnv, envName(key), key) : fromEnv;
      source = envName(key);
      explicit.add(key);
    } else {
      raw = base[key];
      source = `--${flagName(key)}`;
    }
    const result = spec.schema.safeParse(raw);
    if (!result.success) {
      const issue = result.error.issues[0];
      throw new CliError(`${source}: ${issue?.message ?? 'invalid value'}${raw === undefined ? ' (required)' : ''}`, flagName(key));
    }
    values[key] = result.data;
  }
  return { values: values as FlagValues<F>, help: false, explicit };
}

function parseBooleanEnv(text: string, name: string, key: string): boolean {
  if (/^(1|true|yes)$/i.test(text)) return true;
  if (/^(0|false|no)$/i.test(text)) return false;
  throw new CliError(`${name}: expected true or false, got ${JSON.stringify(text)}`, flagName(key));
}

/** node:util's parse errors, rephrased to start with the flag they are about (`--zone: needs a value`). */
function parseArgsError(error: Error & { code?: string }): CliError {
  const message = error.message.replace(/^TypeError \[\w+\]: /, '');
  const option = /'(-{1,2}[\w-]+)/.exec(message)?.[1];
  if (option === undefined || error.code === 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL') return new CliError(message);
  const flag = option.replace(/^-+/, '');
  if (error.code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') return new CliError(`${option}: unknown flag (see --help)`, flag);
  if (/argument missing/.test(message)) return new CliError(`${option}: needs a value`, flag);
  if (/does not take an argument/.test(message)) return new CliError(`${option}: takes no value`, flag);
  return new CliError(`${option}: ${message}`, flag);
}

/** `--help` text listing every flag with its environment variable. */
export function renderHelp(command: string, summary: string, specs: FlagSpecs): string {
  const rows = Object.entries(specs).map(([key, spec]) => {
    const left = `  --${flagName(key)}${spec.boolean ? '' : ` ${spec.placeholder ?? 'VALUE'}`}`;
    return `${left.padEnd(34)} ${spec.description} [${envName(key)}]`;
  });
  return [`Usage: ${command} [flags]`, '', summary, '', 'Flags:', ...rows, `${'  --help'.padEnd(34)} show this help`, ''].join('\n');
}
