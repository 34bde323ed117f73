import type { z } from 'zod';
import { compileSchema, REJECTED } from './precompile.js';
import { spillwayEventSchema, type SpillwayEvent } from './schema.js';
import { isSubjectFor, parseSubject } from './subject.js';

/** Events are small; anything this large is a bug or an attack and is rejected unparsed. */
export const MAX_EVENT_BYTES = 64 * 1024;

export type DecodeErrorReason =
  | 'oversized'
  | 'not-utf8'
  | 'not-json'
  | 'not-object'
  | 'unsupported-version'
  | 'invalid'
  | 'subject-mismatch';

export interface DecodeError {
  reason: DecodeErrorReason;
  /** Human-readable, naming the offending fields. */
  message: string;
}

export type DecodeResult = { ok: true; event: SpillwayEvent } | { ok: false; error: DecodeError };

const encoder = new TextEncoder();
/** The schema's fast accept-check (precompile.ts); zod itself still explains every rejection. */
const fastCheck = compileSchema(spillwayEventSchema);
const decoder = new TextDecoder('utf-8', { fatal: true });

export function encodeEvent(event: SpillwayEvent): Uint8Array {
  return encoder.encode(JSON.stringify(event));
}

function fail(reason: DecodeErrorReason, message: string): DecodeResult {
  return { ok: false, error: { reason, message } };
}

function describeIssues(error: z.ZodError): string {
  return error.issues
    .map((issue) => `${issue.path.length ? issue.path.join('.') : '(root)'}: ${issue.message}`)
    .join('; ');
}

/**
 * Decodes and validates one message. Never throws: every failure is a typed error.
 * With a subject, the payload must name the same pool, zone, pod and kind, because the stream
 * keeps the last message per subject and a mismatched one would shadow another pod's state.
 */
export function decodeEvent(payload: Uint8Array | string, subject?: string): DecodeResult {
  const size = typeof payload === 'string' ? payload.length : payload.byteLength;
  if (size > MAX_EVENT_BYTES) return fail('oversized', `payload is ${size} bytes, limit ${MAX_EVENT_BYTES}`);
  let text: string;
  if (typeof payload === 'string') {
    text = payload;
  } else {
    try {
      text = decoder.decode(payload);
    } catch {
      return fail('not-utf8', 'payload is not valid UTF-8');
    }
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    return fail('not-json', `payload is not JSON: ${(error as Error).message}`);
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json)) {
    return fail('not-object', 'payload is not a JSON object');
  }
  const version = (json as { v?: unknown }).v;
  if (version !== 1) return fail('unsupported-version', `v: ${JSON.stringify(version) ?? 'missing'} is not 1`);
  let event = fastCheck(json);
  if (event === REJECTED) {
    const parsed = spillwayEventSchema.safeParse(json);
    if (!parsed.success) return fail('invalid', describeIssues(parsed.error));
    event = parsed.data;
  }
  // Escaping is canonical (one subject per name), so the event's own subject is the only match;
  // comparing with it is cheaper than parsing the subject. A mismatch is parsed to say which way it fails.
  if (subject !== undefined && !isSubjectFor(subject, event)) {
    const parts = parseSubject(subject);
    if (!parts) return fail('subject-mismatch', `subject ${subject} is not a v1 event subject`);
    if (parts.pool !== event.pool || parts.zone !== event.zone || parts.pod !== event.pod || parts.kind !== event.kind) {
      return fail('subject-mismatch', `subject ${subject} does not name this event's pool, zone, pod and kind`);
    }
  }
  return { ok: true, event };
}
