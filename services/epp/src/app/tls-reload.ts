import { createHash, X509Certificate } from 'node:crypto';
import { watch, type FSWatcher } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import { basename, dirname } from 'node:path';
import { experimental, type ServerCredentials } from '@grpc/grpc-js';
import type { Logger } from 'pino';
import { serverTlsProblem, type ServerTls } from '../config/config.js';

type CaListener = experimental.CaCertificateUpdateListener;
type IdentityListener = experimental.IdentityCertificateUpdateListener;

/** Re-read the files this often whatever the watcher reports (events can be lost). */
export const DEFAULT_TLS_POLL_MS = 5000;
/** Quiet time after a change event before reading: one Secret update is several events. */
const SETTLE_MS = 100;
/** A certificate, key or CA bundle larger than this is not one (real ones are a few kilobytes). */
const MAX_TLS_FILE_BYTES = 1024 * 1024;
const LOG_EVERY_MS = 60_000;

export interface TlsReloadHooks {
  /** The certificate in force (at start, and after each reload) expires then (ms since the epoch; NaN if unknown). */
  inForce(notAfterMs: number): void;
  /** The files changed: `applied` (new connections get them), or `rejected` (not usable together; the material in force stays). */
  reloaded(result: 'applied' | 'rejected'): void;
}

/**
 * The server's TLS material, kept in step with its files (`--tls-cert`, `--tls-key`,
 * `--tls-client-ca`): grpc-js takes it through a certificate provider, and every new connection
 * gets the material in force when it arrives (connections already open keep theirs). It watches the
 * files' directories (a Kubernetes Secret volume, like a ConfigMap's, updates by swapping a `..data`
 * symlink there) and re-reads them every `pollMs`. A new version is put in force only when the
 * three files together make usable material (the key is the certificate's, the CA parses): files
 * caught half-rotated (a new certificate, the old key) change nothing until they agree, and are
 * counted and logged. grpc-js's own file watcher would instead hand the server an unusable pair,
 * which makes it drop every new connection until the files agree.
 */
export class ReloadingTls implements experimental.CertificateProvider {
  private current: ServerTls;
  /** The version last judged (a hash of the three files' bytes), so a bad one is logged once. */
  private lastSeen: string;
  private readonly caListeners = new Set<CaListener>();
  private readonly identityListeners = new Set<IdentityListener>();
  private readonly watchers: FSWatcher[] = [];
  private readonly poll: NodeJS.Timeout;
  private settle: NodeJS.Timeout | undefined;
  private reading: Promise<void> | undefined;
  private again = false;
  private closed = false;
  private lastWarnedAt = Number.NEGATIVE_INFINITY;

  constructor(
    initial: ServerTls,
    private readonly logger: Logger,
    private readonly hooks: TlsReloadHooks,
    pollMs = DEFAULT_TLS_POLL_MS,
  ) {
    this.current = initial;
    this.lastSeen = versionOf(initial);
    const files = [initial.files.cert, initial.files.key, initial.files.clientCa].filter((f): f is string => f !== undefined);
    const names = new Map<string, Set<string>>();
    for (const file of files) names.set(dirname(file), (names.get(dirname(file)) ?? new Set()).add(basename(file)));
    for (const [dir, watched] of names) this.watchDirectory(dir, watched);
    this.poll = setInterval(() => void this.check(), pollMs);
    this.poll.unref();
    hooks.inForce(notAfterOf(initial.cert));
  }

  /** Server credentials backed by this provider (mTLS when a client CA is given). */
  credentials(): ServerCredentials {
    const withCa = this.current.clientCa !== undefined;
    return experimental.createCertificateProviderServerCredentials(this, withCa ? this : null, withCa);
  }

  /** Reads the files now (tests, and after each event); resolves once judged. */
  check(): Promise<void> {
    if (this.reading !== undefined) {
      this.again = true;
      return this.reading;
    }
    this.reading = (async () => {
      do {
        this.again = false;
        await this.readOnce();
      } while (this.again && !this.closed);
      this.reading = undefined;
    })();
    return this.reading;
  }

  close(): void {
    this.closed = true;
    clearInterval(this.poll);
    clearTimeout(this.settle);
    for (const watcher of this.watchers) watcher.close();
  }

  // ---- grpc-js's CertificateProvider ----------------------------------------------------------

  addCaCertificateListener(listener: CaListener): void {
    this.caListeners.add(listener);
    // Not at once: grpc-js registers its own watcher right after asking.
    if (this.current.clientCa !== undefined) process.nextTick(listener, { caCertificate: this.current.clientCa });
  }

  removeCaCertificateListener(listener: CaListener): void {
    this.caListeners.delete(listener);
  }

  addIdentityCertificateListener(listener: IdentityListener): void {
    this.identityListeners.add(listener);
    process.nextTick(listener, { certificate: this.current.cert, privateKey: this.current.key });
  }

  removeIdentityCertificateListener(listener: IdentityListener): void {
    this.identityListeners.delete(listener);
  }

  // ---- reading ----------------------------------------------------------------------------------

  private watchDirectory(dir: string, names: ReadonlySet<string>): void {
    try {
      const watcher = watch(dir, { persistent: false }, (_event, name) => {
        if (name !== null && !names.has(name) && !name.startsWith('..')) return;
        clearTimeout(this.settle);
        this.settle = setTimeout(() => void this.check(), SETTLE_MS);
        this.settle.unref();
      });
      watcher.on('error', (error) => {
        this.logger.warn({ err: error, dir }, 'cannot watch the TLS files; polling only');
        watcher.close();
      });
      this.watchers.push(watcher);
    } catch (error) {
      this.logger.warn({ err: error, dir }, 'cannot watch the TLS files; polling only');
    }
  }

  private async readOnce(): Promise<void> {
    const { files } = this.current;
    let next: ServerTls;
    try {
      const [cert, key, clientCa] = await Promise.all([
        readSmall(files.cert),
        readSmall(files.key),
        files.clientCa === undefined ? undefined : readSmall(files.clientCa),
      ]);
      next = { cert, key, clientCa, files };
    } catch (error) {
      // A file missing for a moment (being replaced) is no new version; the next event or poll reads it.
      return this.warn({ error: (error as Error).message }, 'cannot read the TLS files; keeping the certificate in force');
    }
    const version = versionOf(next);
    if (this.closed || version === this.lastSeen) return;
    this.lastSeen = version;
    const problem = serverTlsProblem(next);
    if (problem !== undefined) {
      this.hooks.reloaded('rejected');
      this.lastWarnedAt = Number.NEGATIVE_INFINITY;
      return this.warn({ error: problem.message }, 'new TLS files are not usable together; keeping the certificate in force');
    }
    this.current = next;
    const notAfter = notAfterOf(next.cert);
    this.hooks.inForce(notAfter);
    this.hooks.reloaded('applied');
    for (const listener of this.identityListeners) listener({ certificate: next.cert, privateKey: next.key });
    if (next.clientCa !== undefined) for (const listener of this.caListeners) listener({ caCertificate: next.clientCa });
    this.logger.info(
      { cert: files.cert, notAfter: new Date(notAfter).toISOString(), fingerprint: fingerprintOf(next.cert) },
      'TLS certificate reloaded; new connections get it',
    );
  }

  /** A warning at most once a minute (a file left unreadable is polled every few seconds). */
  private warn(fields: Record<string, unknown>, message: string): void {
    const now = Date.now();
    if (now - this.lastWarnedAt < LOG_EVERY_MS) return;
    this.lastWarnedAt = now;
    this.logger.warn(fields, message);
  }
}

async function readSmall(path: string): Promise<Buffer> {
  if ((await stat(path)).size > MAX_TLS_FILE_BYTES) throw new Error(`${path}: larger than ${MAX_TLS_FILE_BYTES} bytes`);
  return readFile(path);
}

function versionOf(tls: ServerTls): string {
  const hash = createHash('sha256');
  for (const part of [tls.cert, tls.key, tls.clientCa]) hash.update(part ?? '').update('\0');
  return hash.digest('hex');
}

/** The (first) certificate's expiry, ms since the epoch; NaN when it does not parse. */
function notAfterOf(cert: Buffer): number {
  try {
    return Date.parse(new X509Certificate(cert).validTo);
  } catch {
    return Number.NaN;
  }
}

function fingerprintOf(cert: Buffer): string | undefined {
  try {
    return new X509Certificate(cert).fingerprint256;
  } catch {
    return undefined;
  }
}
