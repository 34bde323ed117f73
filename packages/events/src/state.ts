import { encode } from '@msgpack/msgpack';
import { MsgpackError, MsgpackReader } from './msgpack-reader.js';
import { z } from 'zod';
import { escapeToken, unescapeToken } from './token.js';

/**
 * State shared between the EPPs of a pool (active-active picking): the picks each EPP has in
 * flight, the prompt blocks it sent where (prefix placements) and the passive-health penalties it
 * gave. It is short-lived and high-rate, so it travels on core NATS outside the stream's
 * `spillway.v1.>` (never stored, never replayed):
 *
 * - `spillway.state.<pool>.<zone>.<epp-id>`: one EPP's batches. Per-zone publish permissions bound
 *   which subjects an EPP may use, and a receiver checks that the batch's origin is the subject's.
 * - `spillway.state.<pool>.<zone>.<epp-id>.sync`: a starting EPP's warm-start request; every peer
 *   answers on the request's reply subject with a snapshot (batches flagged `snapshot`).
 *
 * A batch is msgpack: a map with the header fields and `entries`, each entry a tuple whose first
 * element is its kind (compact, and cheap to tell apart while decoding):
 *
 *   [1, id, zone, pod, pickedAt, hashes]  a pick: request `id` of the origin went to (zone, pod) at
 *                                          `pickedAt` (origin's clock); the prompt's block hashes
 *                                          as the prefix index inserts them (may be empty)
 *   [2, id, releasedAt]                    the request finished (completed, failed or cancelled)
 *   [3, zone, pod, until]                  (zone, pod) is penalised until `until` (origin's clock)
 *   [4, zone, pod, hashes]                 (zone, pod) caches these blocks, oldest first (snapshots only)
 *   [5, id, startedAt, promptTokens, maxTokens]  request `id`'s response began at `startedAt`: it stays
 *                                          charged to its endpoint past its stream; its prompt and
 *                                          output limit (0: the body set none) bound it
 *
 * A release's `releasedAt` 0 says the charge ended without a completion (the endpoint's samples
 * accounted for it, or its bound passed): no receiver counts it as released since a sample.
 *
 * Kinds from 5 on travel in the header field `lifecycle`: a binary holding their msgpack array. A
 * reader that predates them fails a batch on an unknown kind in `entries`, but skips an unknown
 * header field, and a binary whatever its length (test/fixtures/state-reader-v1-first.ts is that
 * reader, frozen). They are applied after the batch's `entries`, in their order, and a reader skips
 * the kinds there it does not know, so the field can grow again.
 *
 * When the gateway reports that a fallback served a request, its charge moves: a release of `id`
 * and a pick of the same `id` at the endpoint that served it, in that order.
 *
 * Times are the origin's clock: a receiver translates them by the batch's `sentAt` (see docs/sharing.md).
 */
export const STATE_SUBJECT_ROOT = 'spillway.state';

export interface StateSubjectParts {
  pool: string;
  zone: string;
  /** The publishing EPP's id. */
  epp: string;
}

/** One EPP's batch subject. */
export function stateSubjectFor(parts: StateSubjectParts): string {
  return `${STATE_SUBJECT_ROOT}.${escapeToken(parts.pool)}.${escapeToken(parts.zone)}.${escapeToken(parts.epp)}`;
}

/** One EPP's warm-start request subject. */
export function stateSyncSubjectFor(parts: StateSubjectParts): string {
  return `${stateSubjectFor(parts)}.sync`;
}

/** Every EPP's batches of one pool (and not the sync requests): what an EPP subscribes to. */
export function statePoolFilter(pool: string): string {
  return `${STATE_SUBJECT_ROOT}.${escapeToken(pool)}.*.*`;
}

/** Every EPP's warm-start requests of one pool: what an EPP answers once it is ready. */
export function stateSyncFilter(pool: string): string {
  return `${STATE_SUBJECT_ROOT}.${escapeToken(pool)}.*.*.sync`;
}

/** Everything one zone's EPPs publish, batches and sync requests of every pool (for per-zone permissions). */
export function stateZoneFilter(zone: string): string {
  return `${STATE_SUBJECT_ROOT}.*.${escapeToken(zone)}.>`;
}

/** Every pool's state subjects (what an EPP user may subscribe to). */
export const ALL_STATE_SUBJECTS = `${STATE_SUBJECT_ROOT}.>`;

/** The parts of a batch or sync subject; undefined for anything else. */
export function parseStateSubject(subject: string): (StateSubjectParts & { sync: boolean }) | undefined {
  const tokens = subject.split('.');
  const sync = tokens.length === 6 && tokens[5] === 'sync';
  if ((tokens.length !== 5 && !sync) || tokens[0] !== 'spillway' || tokens[1] !== 'state') return undefined;
  const pool = unescapeToken(tokens[2] ?? '');
  const zone = unescapeToken(tokens[3] ?? '');
  const epp = unescapeToken(tokens[4] ?? '');
  if (!pool || !zone || !epp) return undefined;
  return { pool, zone, epp, sync };
}

/** An EPP id that is unique per process and readable: `<host>-<suffix>`, at most 64 characters. */
export function eppIdOf(host: string, suffix: string): string {
  const base =
    host
      .replace(/[^A-Za-z0-9_-]/g, '-')
      .replace(/^-+|-+$/g, '')
      .slice(0, 48) || 'epp';
  return `${base}-${suffix.replace(/[^A-Za-z0-9]/g, '').slice(0, 15) || '0'}`;
}

// ---- the batch ------------------------------------------------------------------------------

export const STATE_PICK = 1;
export const STATE_RELEASE = 2;
export const STATE_PENALTY = 3;
export const STATE_PLACEMENT = 4;
/** The first kind carried in `lifecycle` (unknown to the first readers). */
export const STATE_STARTED = 5;
/** A release's `releasedAt` when the charge ended without a completion (by samples, at its bound). */
export const RELEASED_WITHOUT_COMPLETION = 0;

/**
 * Bounds of one batch, enforced on decode so a hostile or broken publisher cannot make a receiver
 * hold more, nor spend more than about half a millisecond reading one batch (every EPP reads every
 * peer's batches on its event loop, between requests): bytes (below NATS's default 1 MiB max
 * payload), entries, and block hashes in all. Reading costs about 0.3 µs per entry and 0.02 µs
 * per hash (`npm run bench -- decode`), so the largest valid batch stays well under 1 ms.
 * Publishers split what they send to fit (services/epp/src/shared-state/batches.ts).
 */
export const MAX_STATE_BATCH_BYTES = 1024 * 1024;
export const MAX_STATE_ENTRIES = 512;
export const MAX_STATE_HASHES = 16_384;
/**
 * Hashes of one pick or placement entry. The scheduler may hash more blocks of a prompt
 * (`prefix.maxBlocks`, ≤ 65,536): a pick then carries its first MAX_STATE_ENTRY_HASHES.
 */
export const MAX_STATE_ENTRY_HASHES = 16_384;

const MAX_TIME = 8.64e15;
const time = z.number().finite().nonnegative().max(MAX_TIME);
const id = z.number().int().min(0).max(Number.MAX_SAFE_INTEGER);
/**
 * Block hashes: whole numbers in [0, 2^53). Checked in one loop rather than one schema node per
 * element: a pick carries up to hundreds of them and receivers decode every peer's picks.
 */
function isHashList(value: unknown): value is number[] {
  if (!Array.isArray(value) || value.length > MAX_STATE_ENTRY_HASHES) return false;
  for (let i = 0; i < value.length; i++) {
    const h: unknown = value[i];
    if (typeof h !== 'number' || !Number.isSafeInteger(h) || h < 0) return false;
  }
  return true;
}
const hashes = z.custom<number[]>(isHashList, `a list of at most ${MAX_STATE_ENTRY_HASHES} block hashes (whole numbers in [0, 2^53))`);
/** Token counts of a started entry. */
const MAX_TOKEN_COUNT = 1_000_000_000;
const tokens = z.number().int().min(0).max(MAX_TOKEN_COUNT);
const name = z.string().min(1).max(253);
const eppId = z.string().min(1).max(128);

const pickEntry = z.tuple([z.literal(STATE_PICK), id, name, name, time, hashes]);
const releaseEntry = z.tuple([z.literal(STATE_RELEASE), id, time]);
const penaltyEntry = z.tuple([z.literal(STATE_PENALTY), name, name, time]);
const placementEntry = z.tuple([z.literal(STATE_PLACEMENT), name, name, hashes]);
const startedEntry = z.tuple([z.literal(STATE_STARTED), id, time, tokens, tokens]);

export const stateBatchSchema = z.object({
  v: z.literal(1),
  pool: name,
  zone: name,
  /** The publishing EPP (its id token of the subject). */
  epp: eppId,
  /** +1 per batch published on the subject (heartbeats included); a receiver counts the gaps. Snapshots carry the last one published. */
  seq: id,
  /** When the batch left, on the origin's clock: the reference for translating its times. */
  sentAt: time,
  /** In order; entries of kind 5 and more are sent in `lifecycle` and decoded after the others. */
  entries: z.array(z.union([pickEntry, releaseEntry, penaltyEntry, placementEntry, startedEntry])).max(2 * MAX_STATE_ENTRIES),
  /** Present on warm-start replies only: `last` is the responder's final part. */
  snapshot: z.object({ last: z.boolean() }).optional(),
  /**
   * On a sync request only: what the requester wants. `all` (the default): a starting EPP's warm
   * start. `in-flight`: requests in flight and penalties, no prefix placements (the operator's view).
   */
  want: z.enum(['all', 'in-flight']).optional(),
});

export type StateBatch = z.infer<typeof stateBatchSchema>;
export type StateEntry = StateBatch['entries'][number];
export type StatePickEntry = z.infer<typeof pickEntry>;
export type StateReleaseEntry = z.infer<typeof releaseEntry>;
export type StatePenaltyEntry = z.infer<typeof penaltyEntry>;
export type StatePlacementEntry = z.infer<typeof placementEntry>;
export type StateStartedEntry = z.infer<typeof startedEntry>;

export type StateDecodeReason = 'oversized' | 'not-msgpack' | 'invalid' | 'too-many-hashes' | 'subject-mismatch';
export type StateDecodeResult = { ok: true; batch: StateBatch } | { ok: false; reason: StateDecodeReason; detail: string };

/**
 * The batch's msgpack: entries of the first kinds in `entries`, later kinds (from STATE_STARTED on)
 * msgpack-encoded into the binary header field `lifecycle`, which readers that predate them skip.
 * Each of the two holds at most MAX_STATE_ENTRIES (the publisher splits batches so).
 */
export function encodeStateBatch(batch: StateBatch): Uint8Array {
  let later = 0;
  for (const entry of batch.entries) if (entry[0] >= STATE_STARTED) later++;
  if (later === 0) return encode(batch);
  const first: StateEntry[] = [];
  const lifecycle: StateEntry[] = [];
  for (const entry of batch.entries) (entry[0] >= STATE_STARTED ? lifecycle : first).push(entry);
  return encode({ ...batch, entries: first, lifecycle: encode(lifecycle) });
}

/** Block hashes in a batch, over its pick and placement entries. */
export function stateBatchHashes(batch: StateBatch): number {
  let total = 0;
  for (const entry of batch.entries) {
    if (entry[0] === STATE_PICK) total += entry[5].length;
    else if (entry[0] === STATE_PLACEMENT) total += entry[3].length;
  }
  return total;
}

/** Nesting an unknown header field may have (skipped unread): a batch is never deeper than its entries. */
const UNKNOWN_FIELD_DEPTH = 4;
const UNKNOWN_FIELD_ELEMENTS = 256;

/** A layout violation found while reading: reported as `invalid` with the field's path. */
class Invalid extends Error {}

function expect(ok: boolean, path: string, message: string): void {
  if (!ok) throw new Invalid(`${path}: ${message}`);
}

function readName(r: MsgpackReader, path: string, max = 253): string {
  const s = r.str(1024, path);
  expect(s.length >= 1 && s.length <= max, path, `a name of 1 to ${max} characters`);
  return s;
}

function readId(r: MsgpackReader, path: string): number {
  const n = r.number(path);
  expect(Number.isSafeInteger(n) && n >= 0, path, 'a whole number in [0, 2^53)');
  return n;
}

function readTime(r: MsgpackReader, path: string): number {
  const n = r.number(path);
  expect(Number.isFinite(n) && n >= 0 && n <= MAX_TIME, path, 'a time in ms since the epoch');
  return n;
}

/** Hash counts of the batch so far, so a batch past `MAX_STATE_HASHES` stops before reading the rest. */
interface HashBudget {
  left: number;
}

function readHashes(r: MsgpackReader, path: string, budget: HashBudget): number[] {
  const length = r.arrayHeader(MAX_STATE_ENTRY_HASHES, path);
  budget.left -= length;
  if (budget.left < 0) throw new TooManyHashes();
  const out = new Array<number>(length);
  const bad = r.wholeNumbers(length, out, path);
  if (bad >= 0) throw new Invalid(`${path}.${bad}: a block hash (a whole number in [0, 2^53))`);
  return out;
}

class TooManyHashes extends Error {}

function readStarted(r: MsgpackReader, path: string, length: number): StateStartedEntry {
  expect(length === 5, path, 'a start is [5, id, startedAt, promptTokens, maxTokens]');
  return [STATE_STARTED, readId(r, `${path}.1`), readTime(r, `${path}.2`), readTokens(r, `${path}.3`), readTokens(r, `${path}.4`)];
}

function readTokens(r: MsgpackReader, path: string): number {
  const n = r.number(path);
  expect(Number.isInteger(n) && n >= 0 && n <= MAX_TOKEN_COUNT, path, `a token count in [0, ${MAX_TOKEN_COUNT}]`);
  return n;
}

/**
 * The entries of `lifecycle`: a binary holding one msgpack array, read with the same bounds. A kind
 * this reader does not know is skipped (a later EPP's), within the entry's bound.
 */
function readLifecycle(data: Uint8Array, out: StateEntry[]): void {
  const r = new MsgpackReader(data);
  const length = r.arrayHeader(MAX_STATE_ENTRIES, 'lifecycle');
  for (let i = 0; i < length; i++) {
    const path = `lifecycle.${i}`;
    const size = r.arrayHeader(16, path);
    expect(size >= 1, path, 'an empty entry');
    const kind = r.number(`${path}.0`);
    if (kind === STATE_STARTED) out.push(readStarted(r, path, size));
    else {
      expect(Number.isInteger(kind) && kind > STATE_STARTED, `${path}.0`, `a lifecycle entry kind (${STATE_STARTED} or more)`);
      for (let k = 1; k < size; k++) r.skip(UNKNOWN_FIELD_DEPTH, UNKNOWN_FIELD_ELEMENTS, path);
    }
  }
  r.end('lifecycle');
}

function readEntry(r: MsgpackReader, path: string, budget: HashBudget): StateEntry {
  const length = r.arrayHeader(6, path);
  expect(length >= 1, path, 'an empty entry');
  const kind = r.number(`${path}.0`);
  switch (kind) {
    case STATE_PICK:
      expect(length === 6, path, 'a pick is [1, id, zone, pod, pickedAt, hashes]');
      return [
        STATE_PICK,
        readId(r, `${path}.1`),
        readName(r, `${path}.2`),
        readName(r, `${path}.3`),
        readTime(r, `${path}.4`),
        readHashes(r, `${path}.5`, budget),
      ];
    case STATE_RELEASE:
      expect(length === 3, path, 'a release is [2, id, releasedAt]');
      return [STATE_RELEASE, readId(r, `${path}.1`), readTime(r, `${path}.2`)];
    case STATE_PENALTY:
      expect(length === 4, path, 'a penalty is [3, zone, pod, until]');
      return [STATE_PENALTY, readName(r, `${path}.1`), readName(r, `${path}.2`), readTime(r, `${path}.3`)];
    case STATE_PLACEMENT:
      expect(length === 4, path, 'a placement is [4, zone, pod, hashes]');
      return [STATE_PLACEMENT, readName(r, `${path}.1`), readName(r, `${path}.2`), readHashes(r, `${path}.3`, budget)];
    case STATE_STARTED:
      return readStarted(r, path, length);
    default:
      throw new Invalid(`${path}.0: unknown entry kind ${kind}`);
  }
}

/**
 * Reads one batch by its layout (the rules of `stateBatchSchema`, checked by hand as each value is
 * read): every container's length is checked against its bound before any element is read, so a
 * hostile payload costs at most the bytes it takes to reach its first violation.
 */
function readStateBatch(data: Uint8Array): StateBatch {
  const r = new MsgpackReader(data);
  const budget: HashBudget = { left: MAX_STATE_HASHES };
  const fields = r.topMap(16, 'the batch');
  let v: unknown;
  let pool: string | undefined;
  let zone: string | undefined;
  let epp: string | undefined;
  let seq: number | undefined;
  let sentAt: number | undefined;
  let entries: StateEntry[] | undefined;
  const lifecycle: StateEntry[] = [];
  let snapshot: { last: boolean } | undefined;
  let want: 'all' | 'in-flight' | undefined;
  for (let f = 0; f < fields; f++) {
    const key = r.str(64, 'a field name');
    switch (key) {
      case 'v':
        v = r.number('v');
        break;
      case 'pool':
        pool = readName(r, 'pool');
        break;
      case 'zone':
        zone = readName(r, 'zone');
        break;
      case 'epp':
        epp = readName(r, 'epp', 128);
        break;
      case 'seq':
        seq = readId(r, 'seq');
        break;
      case 'sentAt':
        sentAt = readTime(r, 'sentAt');
        break;
      case 'entries': {
        const length = r.arrayHeader(MAX_STATE_ENTRIES, 'entries');
        entries = new Array<StateEntry>(length);
        for (let i = 0; i < length; i++) entries[i] = readEntry(r, `entries.${i}`, budget);
        break;
      }
      case 'lifecycle':
        expect(lifecycle.length === 0, 'lifecycle', 'given twice');
        readLifecycle(r.bin(MAX_STATE_BATCH_BYTES, 'lifecycle'), lifecycle);
        break;
      case 'snapshot': {
        if (r.nil()) break;
        let last: boolean | undefined;
        const n = r.mapHeader(8, 'snapshot');
        for (let i = 0; i < n; i++) {
          if (r.str(64, 'a field name') === 'last') last = r.bool('snapshot.last');
          else r.skip(UNKNOWN_FIELD_DEPTH, UNKNOWN_FIELD_ELEMENTS, 'snapshot');
        }
        expect(last !== undefined, 'snapshot.last', 'required');
        snapshot = { last: last as boolean };
        break;
      }
      case 'want': {
        if (r.nil()) break;
        const w = r.str(16, 'want');
        expect(w === 'all' || w === 'in-flight', 'want', "'all' or 'in-flight'");
        want = w as 'all' | 'in-flight';
        break;
      }
      default:
        // Unknown fields are ignored (forward compatible), skipped within bounds.
        r.skip(UNKNOWN_FIELD_DEPTH, UNKNOWN_FIELD_ELEMENTS, key);
    }
  }
  r.end('the batch');
  expect(v === 1, 'v', 'the version must be 1');
  expect(pool !== undefined, 'pool', 'required');
  expect(zone !== undefined, 'zone', 'required');
  expect(epp !== undefined, 'epp', 'required');
  expect(seq !== undefined, 'seq', 'required');
  expect(sentAt !== undefined, 'sentAt', 'required');
  expect(entries !== undefined, 'entries', 'required');
  const batch: StateBatch = {
    v: 1,
    pool: pool as string,
    zone: zone as string,
    epp: epp as string,
    seq: seq as number,
    sentAt: sentAt as number,
    entries: lifecycle.length === 0 ? (entries as StateEntry[]) : (entries as StateEntry[]).concat(lifecycle),
  };
  if (snapshot !== undefined) batch.snapshot = snapshot;
  if (want !== undefined) batch.want = want;
  return batch;
}

/**
 * Decodes and validates one batch; never throws. With `from` (the parts of the subject it arrived
 * on), the batch must come from that pool, zone and EPP: an EPP may publish only its own zone's
 * subjects, so the subject is what vouches for the origin, and a batch naming another is forged.
 *
 * Peers are not trusted to be well-formed, and every EPP decodes every peer's batches on its event
 * loop: the payload is read by its layout, bounded in bytes, elements and nesting before any work
 * (docs/hardening.md), so a hostile message costs about what reading its bytes up to the first
 * violation costs, never what building it would.
 */
export function decodeStateBatch(data: Uint8Array, from?: StateSubjectParts): StateDecodeResult {
  if (data.byteLength > MAX_STATE_BATCH_BYTES)
    return { ok: false, reason: 'oversized', detail: `${data.byteLength} bytes, limit ${MAX_STATE_BATCH_BYTES}` };
  let batch: StateBatch;
  try {
    batch = readStateBatch(data);
  } catch (error) {
    if (error instanceof TooManyHashes) return { ok: false, reason: 'too-many-hashes', detail: `more than ${MAX_STATE_HASHES} hashes` };
    if (error instanceof Invalid) return { ok: false, reason: 'invalid', detail: error.message };
    if (error instanceof MsgpackError) return { ok: false, reason: error.kind, detail: error.message };
    throw error;
  }
  if (from !== undefined && (from.pool !== batch.pool || from.zone !== batch.zone || from.epp !== batch.epp)) {
    return {
      ok: false,
      reason: 'subject-mismatch',
      detail: `a batch of ${batch.pool}/${batch.zone}/${batch.epp} on the subject of ${from.pool}/${from.zone}/${from.epp}`,
    };
  }
  return { ok: true, batch };
}
