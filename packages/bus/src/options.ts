import { CliError, parseCommandLine, type FlagSpecs } from '@spillway/cli';
import { z } from 'zod';

export const DEFAULT_NATS_URL = 'nats://127.0.0.1:4222';

const flagValue = z.string().min(1).optional();

/**
 * NATS connection flags shared by every Spillway process (EPP, collector, fleet CLI), as
 * `@spillway/cli` flag specs: spread them into a binary's flags, parse with `parseCommandLine`
 * (flag, then `SPILLWAY_<FLAG>`), then resolve with `natsSettingsFromValues`, which falls back to
 * the conventional `NATS_*` variables.
 */
export const natsFlags = {
  nats: {
    description: `NATS server URL(s), comma-separated (also NATS_URL; default ${DEFAULT_NATS_URL})`,
    schema: flagValue,
    placeholder: 'URL',
  },
  natsName: { description: 'client connection name shown by the server (also NATS_NAME)', schema: flagValue, placeholder: 'NAME' },
  natsUser: { description: 'NATS user; needs --nats-password (also NATS_USER)', schema: flagValue, placeholder: 'USER' },
  natsPassword: { description: 'password for --nats-user (also NATS_PASSWORD)', schema: flagValue, placeholder: 'PASS' },
  natsToken: { description: 'NATS token authentication (also NATS_TOKEN)', schema: flagValue, placeholder: 'TOKEN' },
  natsNkeySeed: { description: 'file holding an nkey user seed (SU...) (also NATS_NKEY_SEED)', schema: flagValue, placeholder: 'FILE' },
  natsCreds: { description: 'NATS JWT credentials file (also NATS_CREDS)', schema: flagValue, placeholder: 'FILE' },
  natsTlsCa: { description: 'CA bundle to verify the NATS server (also NATS_TLS_CA)', schema: flagValue, placeholder: 'FILE' },
  natsTlsCert: {
    description: 'client certificate for NATS mTLS; needs --nats-tls-key (also NATS_TLS_CERT)',
    schema: flagValue,
    placeholder: 'FILE',
  },
  natsTlsKey: { description: 'client key for NATS mTLS (also NATS_TLS_KEY)', schema: flagValue, placeholder: 'FILE' },
} satisfies FlagSpecs;

export type NatsFlagKey = keyof typeof natsFlags;
/** Parsed NATS flag values (from `parseCommandLine`); a binary's own values object fits. */
export type NatsFlagValues = { readonly [K in NatsFlagKey]?: string | undefined };
export type Environment = Readonly<Record<string, string | undefined>>;

/** Conventional environment names, used when neither the flag nor SPILLWAY_<FLAG> is set. */
const conventionalEnv: Record<NatsFlagKey, string> = {
  nats: 'NATS_URL',
  natsName: 'NATS_NAME',
  natsUser: 'NATS_USER',
  natsPassword: 'NATS_PASSWORD',
  natsToken: 'NATS_TOKEN',
  natsNkeySeed: 'NATS_NKEY_SEED',
  natsCreds: 'NATS_CREDS',
  natsTlsCa: 'NATS_TLS_CA',
  natsTlsCert: 'NATS_TLS_CERT',
  natsTlsKey: 'NATS_TLS_KEY',
};

/** nats://, tls://, ws:// or wss:// URL, or bare host[:port]; optional user:pass@; IPv6 in brackets. */
const SERVER_URL = /^((nats|tls):\/\/)?([^\s/@]+@)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(:\d{1,5})?\/?$/;
const serverUrl = z.string().regex(SERVER_URL, 'must be nats://host[:port], tls://host[:port] or host:port');

const file = z.string().min(1);

/** `tls://host:port`: the operator asked for TLS, so a connection without it is refused. */
export function isTlsUrl(server: string): boolean {
  return server.startsWith('tls://');
}

export const natsSettingsSchema = z
  .object({
    servers: z.array(serverUrl).min(1),
    name: z.string().min(1).max(256).optional(),
    user: z.string().min(1).optional(),
    password: z.string().min(1).optional(),
    token: z.string().min(1).optional(),
    nkeySeedFile: file.optional(),
    credsFile: file.optional(),
    tls: z.object({ caFile: file.optional(), certFile: file.optional(), keyFile: file.optional() }).optional(),
    /** Delay between reconnect attempts; short, so an EPP's view is stale for as little as possible. */
    reconnectTimeWaitMs: z.number().int().min(10).max(60_000).default(500),
    /** A dead server is noticed after pingInterval × maxPingOut (nats.js's default 120 s × 2 is far too slow). */
    pingIntervalMs: z.number().int().min(100).max(600_000).default(10_000),
    maxPingOut: z.number().int().min(1).max(100).default(3),
  })
  .superRefine((s, ctx) => {
    if ((s.user === undefined) !== (s.password === undefined)) {
      ctx.addIssue({ code: 'custom', path: [s.user === undefined ? 'user' : 'password'], message: 'user and password go together' });
    }
    const methods = [s.user !== undefined, s.token !== undefined, s.nkeySeedFile !== undefined, s.credsFile !== undefined];
    if (methods.filter(Boolean).length > 1) {
      const path = s.token !== undefined ? 'token' : s.nkeySeedFile !== undefined ? 'nkeySeedFile' : 'credsFile';
      ctx.addIssue({ code: 'custom', path: [path], message: 'choose one of user/password, token, nkey seed, creds' });
    }
    // One TLS setting covers every server (nats.js has one), so tls:// and nats:// cannot be mixed.
    const tlsUrls = s.servers.filter(isTlsUrl).length;
    if (tlsUrls > 0 && tlsUrls < s.servers.length) {
      ctx.addIssue({
        code: 'custom',
        path: ['servers'],
        message: 'tls:// and other URLs cannot be mixed: TLS is required of every server or of none',
      });
    }
    if (s.tls && (s.tls.certFile === undefined) !== (s.tls.keyFile === undefined)) {
      ctx.addIssue({
        code: 'custom',
        path: ['tls', s.tls.certFile === undefined ? 'certFile' : 'keyFile'],
        message: 'a client certificate and its key go together',
      });
    }
  });

export type NatsSettings = z.output<typeof natsSettingsSchema>;
export type NatsSettingsInput = z.input<typeof natsSettingsSchema>;

/** Maps a settings path back to the flag the user typed, so errors name the flag. */
const flagOfPath: Record<string, string> = {
  servers: 'nats',
  name: 'nats-name',
  user: 'nats-user',
  password: 'nats-password',
  token: 'nats-token',
  nkeySeedFile: 'nats-nkey-seed',
  credsFile: 'nats-creds',
  'tls.caFile': 'nats-tls-ca',
  'tls.certFile': 'nats-tls-cert',
  'tls.keyFile': 'nats-tls-key',
};

/** A bad NATS setting or file; `flag` is the flag name (without dashes). */
export class NatsOptionsError extends Error {
  constructor(
    readonly flag: string,
    message: string,
  ) {
    super(`--${flag}: ${message}`);
    this.name = 'NatsOptionsError';
  }
}

/**
 * Builds NATS settings from parsed flag values (`parseCommandLine` over `natsFlags`, which already
 * took the flag, then `SPILLWAY_<FLAG>`); a value still missing comes from the conventional
 * `NATS_*` variable. Throws CliError naming the offending flag.
 */
export function natsSettingsFromValues(values: NatsFlagValues, env: Environment = process.env): NatsSettings {
  const get = (key: NatsFlagKey): string | undefined => {
    const value = values[key];
    if (value !== undefined && value !== '') return value;
    const conventional = env[conventionalEnv[key]];
    return conventional !== undefined && conventional !== '' ? conventional : undefined;
  };
  const servers = (get('nats') ?? DEFAULT_NATS_URL)
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
  const caFile = get('natsTlsCa');
  const certFile = get('natsTlsCert');
  const keyFile = get('natsTlsKey');
  const input: NatsSettingsInput = {
    servers,
    name: get('natsName'),
    user: get('natsUser'),
    password: get('natsPassword'),
    token: get('natsToken'),
    nkeySeedFile: get('natsNkeySeed'),
    credsFile: get('natsCreds'),
    tls: caFile || certFile || keyFile ? { caFile, certFile, keyFile } : undefined,
  };
  try {
    return parseNatsSettings(input);
  } catch (error) {
    if (error instanceof NatsOptionsError) throw new CliError(error.message, error.flag);
    throw error;
  }
}

/**
 * @deprecated Only for callers outside the binaries (test/bench) until they move to
 * `parseNatsSettings` or `natsFlags` + `natsSettingsFromValues`; this is that same path, with
 * values keyed by flag name (`{ nats: url, 'nats-user': u }`).
 */
export function natsOptionsFromFlags(flags: Readonly<Record<string, string | undefined>>, env: Environment = process.env): NatsSettings {
  const argv = Object.entries(flags).flatMap(([flag, value]) => (value === undefined ? [] : [`--${flag}=${value}`]));
  return natsSettingsFromValues(parseCommandLine(natsFlags, argv, env).values, env);
}

/** Validates settings given as an object (config files, tests). Throws NatsOptionsError. */
export function parseNatsSettings(input: NatsSettingsInput): NatsSettings {
  const parsed = natsSettingsSchema.safeParse(input);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  const path = (issue?.path ?? []).filter((p) => typeof p === 'string').join('.');
  const flag = flagOfPath[path] ?? (path || 'nats');
  throw new NatsOptionsError(flag, issue?.message ?? 'invalid');
}
