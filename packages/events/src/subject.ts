import { EVENT_KINDS, type EventKind, type SpillwayEvent } from './schema.js';
import { escapeToken, unescapeToken } from './token.js';

export const SUBJECT_ROOT = 'spillway.v1';
/** Everything of contract v1: the default stream's subject filter. */
export const ALL_SUBJECTS = `${SUBJECT_ROOT}.>`;

export interface SubjectParts {
  pool: string;
  zone: string;
  pod: string;
  kind: EventKind;
}

/** `spillway.v1.<pool>.<zone>.<pod>.<kind>` with each name escaped to one token. */
export function subjectFor(parts: SubjectParts): string {
  return `${SUBJECT_ROOT}.${escapeToken(parts.pool)}.${escapeToken(parts.zone)}.${escapeToken(parts.pod)}.${parts.kind}`;
}

export function subjectOf(event: SpillwayEvent): string {
  return subjectFor(event);
}

/** The filter an EPP replays: every zone, pod and kind of one pool. */
export function poolFilter(pool: string): string {
  return `${SUBJECT_ROOT}.${escapeToken(pool)}.>`;
}

/** The subjects one zone's collector publishes (for per-zone permissions). */
export function zoneFilter(pool: string, zone: string): string {
  return `${SUBJECT_ROOT}.${escapeToken(pool)}.${escapeToken(zone)}.>`;
}

export function parseSubject(subject: string): SubjectParts | undefined {
  const tokens = subject.split('.');
  if (tokens.length !== 6 || tokens[0] !== 'spillway' || tokens[1] !== 'v1') return undefined;
  const kind = EVENT_KINDS.find((k) => k === tokens[5]);
  if (kind === undefined) return undefined;
  const pool = unescapeToken(tokens[2] ?? '');
  const zone = unescapeToken(tokens[3] ?? '');
  const pod = unescapeToken(tokens[4] ?? '');
  if (!pool || !zone || !pod) return undefined;
  return { pool, zone, pod, kind };
}
