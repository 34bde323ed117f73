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

const PREFIX = `${SUBJECT_ROOT}.`;

/**
 * Whether `subject` is exactly `subjectFor(parts)`, compared in place (no string built): the reader
 * asks this of every message. Escaping is canonical, so this is the same as parsing the subject and
 * comparing its names.
 */
export function isSubjectFor(subject: string, parts: SubjectParts): boolean {
  if (!subject.startsWith(PREFIX) || !parts.pool || !parts.zone || !parts.pod) return false;
  let at = matchToken(subject, PREFIX.length, escapeToken(parts.pool));
  at = matchToken(subject, at, escapeToken(parts.zone));
  at = matchToken(subject, at, escapeToken(parts.pod));
  return at >= 0 && subject.length === at + parts.kind.length && subject.endsWith(parts.kind);
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

/** Where the next token starts when `token` and a dot are at `at`; -1 when not (or `at` is -1). */
function matchToken(subject: string, at: number, token: string): number {
  if (at < 0 || !subject.startsWith(token, at) || subject.charCodeAt(at + token.length) !== 46 /* . */) return -1;
  return at + token.length + 1;
}
