import type { z } from 'zod';
import { compileSchema, REJECTED } from './precompile.js';
import { MAX_KV_SNAPSHOT_KEYS, spillwayEventSchema, type KvSnapshotEvent, type SpillwayEvent } from './schema.js';
import { isSubjectFor, parseSubject } from './subject.js';

/** Readiness and metrics events are small; anything this large is a bug or an attack and is rejected unparsed. */
export const MAX_EVENT_BYTES = 64 * 1024;
/**
 * A `kv` snapshot carries up to `MAX_KV_SNAPSHOT_KEYS` keys of up to 16 digits each (~280 KB); this
 * bounds it with room for the other fields. The only kind allowed past `MAX_EVENT_BYTES`.
 */
export const MAX_KV_SNAPSHOT_BYTES = 320 * 1024;

export type DecodeErrorReason =
  'oversized' | 'not-utf8' | 'not-json' | 'not-object' | 'unsupported-version' | 'invalid' | 'subject-mismatch';

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
  return error.issues.map((issue) => `${issue.path.length ? issue.path.join('.') : '(root)'}: ${issue.message}`).join('; ');
}

/**
 * Decodes and validates one message. Never throws: every failure is a typed error.
 * With a subject, the payload must name the same pool, zone, pod and kind, because the stream
 * keeps the last message per subject and a mismatched one would shadow another pod's state.
 */
export function decodeEvent(payload: Uint8Array | string, subject?: string): DecodeResult {
  const size = typeof payload === 'string' ? payload.length : payload.byteLength;
  // Unparsed, only a kv subject (or none) may carry more than MAX_EVENT_BYTES; parsed, each kind is held to its own limit.
  const preLimit = subject === undefined || subject.endsWith('.kv') ? MAX_KV_SNAPSHOT_BYTES : MAX_EVENT_BYTES;
  if (size > preLimit) return fail('oversized', `payload is ${size} bytes, limit ${preLimit}`);
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
  if (event.kind !== 'kv' && size > MAX_EVENT_BYTES)
    return fail('oversized', `payload is ${size} bytes, limit ${MAX_EVENT_BYTES} for kind ${event.kind}`);
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

/**
 * The snapshot with its oldest keys dropped so that it encodes to at most `maxBytes` (a NATS
 * server's `max_payload` may be below `MAX_KV_SNAPSHOT_BYTES`) and holds at most
 * `MAX_KV_SNAPSHOT_KEYS` keys. Keys are kept newest-last, so what is dropped is what the pod is
 * likeliest to evict next — though a block stored long ago and hit ever since is dropped too, so a
 * cut snapshot's `known` (when it has one) says it is not complete. Returns the same object when
 * nothing has to go.
 */
export function fitKvSnapshot(event: KvSnapshotEvent, maxBytes = MAX_KV_SNAPSHOT_BYTES): KvSnapshotEvent {
  const limit = Math.min(maxBytes, MAX_KV_SNAPSHOT_BYTES);
  const keys = event.keys;
  if (keys.length <= MAX_KV_SNAPSHOT_KEYS && encoder.encode(JSON.stringify(event)).byteLength <= limit) return event;
  // A cut snapshot no longer holds every block of the pod: it says so when it says anything of that.
  const known = event.known === undefined ? undefined : { since: event.known.since, complete: false };
  const cut: KvSnapshotEvent = known === undefined ? { ...event, keys: [] } : { ...event, keys: [], known };
  let budget = limit - encoder.encode(JSON.stringify(cut)).byteLength;
  let first = keys.length;
  // Each kept key costs its decimal digits plus a comma (one comma too many: a byte of slack).
  while (first > 0 && keys.length - first < MAX_KV_SNAPSHOT_KEYS) {
    const cost = String(keys[first - 1]).length + 1;
    if (cost > budget) break;
    budget -= cost;
    first--;
  }
  cut.keys = keys.slice(first);
  if (first === 0 && event.known !== undefined) cut.known = event.known;
  return cut;
}
