import { z } from 'zod';

/**
 * NATS connection settings shared by every Spillway process (EPP, collector, fleet CLI): one flag
 * spec for node:util `parseArgs`, one resolver from flags + environment, one zod schema. A flag
 * wins over `SPILLWAY_<FLAG>` (DESIGN §6), which wins over the conventional `NATS_*` variable.
 */
export const natsFlagSpec = {
  nats: { type: 'string' },
  'nats-name': { type: 'string' },
  'nats-user': { type: 'string' },
  'nats-password': { type: 'string' },
  'nats-token': { type: 'string' },
  'nats-nkey-seed': { type: 'string' },
  'nats-creds': { type: 'string' },
  'nats-tls-ca': { type: 'string' },
  'nats-tls-cert': { type: 'string' },
  'nats-tls-key': { type: 'string' },
} as const;

export type NatsFlag = keyof typeof natsFlagSpec;

/** Help text lines for the NATS flags, for each binary's `--help`. */
export const natsFlagHelp: readonly string[] = [
  '  --nats URL[,URL]        NATS server(s) (env SPILLWAY_NATS or NATS_URL; default nats://127.0.0.1:4222)',
  '  --nats-name NAME        client connection name shown by the server (env NATS_NAME)',
  '  --nats-user USER        user name; needs --nats-password (env NATS_USER / NATS_PASSWORD)',
  '  --nats-password PASS    password for --nats-user',
  '  --nats-token TOKEN      token authentication (env NATS_TOKEN)',
  '  --nats-nkey-seed FILE   file holding an nkey user seed (SU...) (env NATS_NKEY_SEED)',
  '  --nats-creds FILE       JWT credentials file (env NATS_CREDS)',
  '  --nats-tls-ca FILE      CA bundle to verify the server (env NATS_TLS_CA)',
  '  --nats-tls-cert FILE    client certificate for mTLS; needs --nats-tls-key (env NATS_TLS_CERT)',
  '  --nats-tls-key FILE     client key for mTLS (env NATS_TLS_KEY)',
];

/** Conventional environment names, used when neither the flag nor SPILLWAY_<FLAG> is set. */
const conventionalEnv: Record<NatsFlag, string> = {
  nats: 'NATS_URL',
  'nats-name': 'NATS_NAME',
  'nats-user': 'NATS_USER',
  'nats-password': 'NATS_PASSWORD',
  'nats-token': 'NATS_TOKEN',
  'nats-nkey-seed': 'NATS_NKEY_SEED',
  'nats-creds': 'NATS_CREDS',
  'nats-tls-ca': 'NATS_TLS_CA',
  'nats-tls-cert': 'NATS_TLS_CERT',
  'nats-tls-key': 'NATS_TLS_KEY',
};

export const DEFAULT_NATS_URL = 'nats://127.0.0.1:4222';

/** nats://, tls://, ws:// or wss:// URL, or bare host[:port]; optional user:pass@; IPv6 in brackets. */
const SERVER_URL = /^((nats|tls):\/\/)?([^\s/@]+@)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(:\d{1,5})?\/?$/;
const serverUrl = z.string().regex(SERVER_URL, 'must be nats://host[:port], tls://host[:port] or host:port');

const file = z.string().min(1);

export const natsSettingsSchema = z
  .object({
    servers: z.array(serverUrl).min(1),
    name: z.string().min(1).max(256).optional(),
    user: z.string().min(1).optional(),
    password: z.string().min(1).optional(),
    token: z.string().min(1).optional(),
    nkeySeedFile: file.optional(),
    credsFile: file.optional(),
    tls: z
      .object({ caFile: file.optional(), certFile: file.optional(), keyFile: file.optional() })
      .optional(),
    /** Delay between reconnect attempts; short, so an EPP's view is stale for as little as possible. */
    reconnectTimeWaitMs: z.number().int().min(10).max(60_000).default(500),
    /** A dead server is noticed after pingInterval × maxPingOut (DESIGN default 120 s × 2 is far too slow). */
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
const flagOfPath: Record<string, NatsFlag> = {
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

/** A bad NATS flag or environment value; `flag` is the flag name (without dashes). */
export class NatsOptionsError extends Error {
  constructor(
    readonly flag: string,
    message: string,
  ) {
    super(`--${flag}: ${message}`);
    this.name = 'NatsOptionsError';
  }
}

export type NatsFlagValues = Partial<Record<NatsFlag, string | boolean | undefined>>;
export type Environment = Readonly<Record<string, string | undefined>>;

function envNameOf(flag: string): string {
  return `SPILLWAY_${flag.toUpperCase().replace(/-/g, '_')}`;
}

function pick(flag: NatsFlag, values: NatsFlagValues, env: Environment): string | undefined {
  const fromFlag = values[flag];
  if (typeof fromFlag === 'string') return fromFlag;
  const spillway = env[envNameOf(flag)];
  if (spillway !== undefined && spillway !== '') return spillway;
  const conventional = env[conventionalEnv[flag]];
  return conventional !== undefined && conventional !== '' ? conventional : undefined;
}

/**
 * Resolves NATS settings from parsed flags (node:util parseArgs `values`) and the environment.
 * Throws NatsOptionsError naming the offending flag.
 */
export function natsOptionsFromFlags(values: NatsFlagValues, env: Environment = process.env): NatsSettings {
  const get = (flag: NatsFlag) => pick(flag, values, env);
  const servers = (get('nats') ?? DEFAULT_NATS_URL)
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
  const caFile = get('nats-tls-ca');
  const certFile = get('nats-tls-cert');
  const keyFile = get('nats-tls-key');
  const input: NatsSettingsInput = {
    servers,
    name: get('nats-name'),
    user: get('nats-user'),
    password: get('nats-password'),
    token: get('nats-token'),
    nkeySeedFile: get('nats-nkey-seed'),
    credsFile: get('nats-creds'),
    tls: caFile || certFile || keyFile ? { caFile, certFile, keyFile } : undefined,
  };
  return parseNatsSettings(input);
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
