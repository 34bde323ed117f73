import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { eppIdOf } from '@spillway/events';

/**
 * This EPP's id on the shared-state channel: its pod name (`POD_NAME`, from the Kubernetes downward
 * API) or host name, plus a random suffix, so it is readable in metrics and logs, unique per
 * process, and a restarted EPP is a new peer (its old entries die with the old id).
 */
export function newEppId(env: NodeJS.ProcessEnv = process.env): string {
  return eppIdOf(env['POD_NAME'] || hostname(), randomBytes(4).toString('hex'));
}
