import {
  DiscardPolicy,
  JetStreamApiError,
  RetentionPolicy,
  StorageType,
  type JetStreamManager,
  type StreamConfig,
  type StreamInfo,
} from '@nats-io/jetstream';
import { nanos } from '@nats-io/nats-core';
import { ALL_SUBJECTS } from '@spillway/events';
import { z } from 'zod';

export const DEFAULT_STREAM = 'SPILLWAY';

/** A JetStream stream name: the one schema of every `--stream` flag and stream setting. */
export const streamNameSchema = z.string().regex(/^[A-Za-z0-9_-]{1,255}$/, 'stream names are letters, digits, _ and -');

/** Stream settings with the defaults for one NATS server (docs/events.md, "Streams"). */
export const streamSettingsSchema = z.object({
  name: streamNameSchema.default(DEFAULT_STREAM),
  subjects: z.array(z.string().min(1)).min(1).default([ALL_SUBJECTS]),
  maxMsgsPerSubject: z.number().int().min(1).default(1),
  maxAgeMs: z
    .number()
    .int()
    .min(0)
    .default(24 * 60 * 60 * 1000),
  duplicateWindowMs: z
    .number()
    .int()
    .min(0)
    .default(2 * 60 * 1000),
  storage: z.enum(['file', 'memory']).default('file'),
  replicas: z.number().int().min(1).max(5).default(1),
  /**
   * What the caller needs an existing stream to capture, when less than `subjects` (which is what
   * a new stream gets). A zone's collector needs only its own zone's subjects, which a per-zone
   * stream (`spillway.v1.*.<zone>.>`) covers without capturing `spillway.v1.>`.
   */
  requiredSubjects: z.array(z.string().min(1)).min(1).optional(),
});

export type StreamSettings = z.output<typeof streamSettingsSchema>;
export type StreamSettingsInput = z.input<typeof streamSettingsSchema>;

export interface StreamDifference {
  field: string;
  /** What Spillway asked for. */
  wanted: string;
  /** What the existing stream has (kept as is). */
  actual: string;
}

export interface EnsureStreamResult {
  name: string;
  created: boolean;
  /** Subjects added to an existing stream (the only change ensureStream ever makes to one). */
  addedSubjects: string[];
  /** Settings where the existing stream differs from what was asked; left untouched. */
  differences: StreamDifference[];
  info: StreamInfo;
}

/** JetStream's "stream name already in use with a different configuration". */
const STREAM_NAME_IN_USE = 10058;

export function streamConfigFor(settings: StreamSettings): Partial<StreamConfig> & { name: string } {
  return {
    name: settings.name,
    subjects: settings.subjects,
    retention: RetentionPolicy.Limits,
    max_msgs_per_subject: settings.maxMsgsPerSubject,
    // Old values give way to new ones: a stream of last values must never refuse a newer event.
    discard: DiscardPolicy.Old,
    storage: settings.storage === 'file' ? StorageType.File : StorageType.Memory,
    num_replicas: settings.replicas,
    allow_direct: true,
    duplicate_window: nanos(settings.duplicateWindowMs),
    max_age: nanos(settings.maxAgeMs),
  };
}

/**
 * Makes sure the event stream exists (docs/events.md: whoever starts first creates it). An existing
 * stream is never changed destructively: differing limits, storage or retention are reported, not
 * fixed, because another team may have tuned them on purpose and changing storage would lose data.
 * The one change made is adding a missing subject, which is purely additive (it only makes the
 * stream capture more); if the server refuses it (say it overlaps another stream) it is reported
 * as a difference instead.
 *
 * Two processes starting at once may both try to create it: the loser's create fails (or returns
 * the winner's identical stream), and it falls through to comparing the winner's stream.
 */
export async function ensureStream(jsm: JetStreamManager, input: StreamSettingsInput = {}): Promise<EnsureStreamResult> {
  const settings = streamSettingsSchema.parse(input);
  const wanted = streamConfigFor(settings);
  const existing = await findStream(jsm, settings.name);
  if (!existing) {
    try {
      const info = await jsm.streams.add(wanted);
      return { name: settings.name, created: true, addedSubjects: [], differences: [], info };
    } catch (error) {
      if (!(error instanceof JetStreamApiError) || error.code !== STREAM_NAME_IN_USE) throw error;
      // Lost the race to another process creating it with other settings: compare below.
    }
  }
  const info = existing ?? (await jsm.streams.info(settings.name));
  return reconcile(jsm, settings, info);
}

/** The stream's info, or undefined when it does not exist (other errors are thrown). */
export async function findStream(jsm: JetStreamManager, name: string): Promise<StreamInfo | undefined> {
  try {
    return await jsm.streams.info(name);
  } catch (error) {
    if (error instanceof JetStreamApiError && error.code === 10059) return undefined;
    throw error;
  }
}

async function reconcile(jsm: JetStreamManager, settings: StreamSettings, info: StreamInfo): Promise<EnsureStreamResult> {
  const config = info.config;
  const differences = compare(settings, config);
  const have = config.subjects ?? [];
  // A stream fed by sources (a zone's aggregate, docs/events.md "Topologies") must not capture
  // subjects itself: it would also take live traffic routed over leaf nodes. Leave its (empty)
  // subjects alone.
  const sourced = (config.sources?.length ?? 0) > 0 || config.mirror !== undefined;
  const required = settings.requiredSubjects ?? settings.subjects;
  const missing = sourced ? [] : required.filter((s) => !have.some((h) => subjectCovers(h, s)));
  let addedSubjects: string[] = [];
  let current = info;
  if (missing.length > 0) {
    try {
      current = await jsm.streams.update(settings.name, { subjects: [...(config.subjects ?? []), ...missing] });
      addedSubjects = missing;
    } catch (error) {
      differences.push({
        field: 'subjects',
        wanted: settings.subjects.join(','),
        actual: `${(config.subjects ?? []).join(',')} (adding failed: ${(error as Error).message})`,
      });
    }
  }
  return { name: settings.name, created: false, addedSubjects, differences, info: current };
}

function compare(settings: StreamSettings, config: StreamConfig): StreamDifference[] {
  const wanted = streamConfigFor(settings);
  const out: StreamDifference[] = [];
  const check = (field: string, want: unknown, actual: unknown) => {
    if (String(want) !== String(actual)) out.push({ field, wanted: String(want), actual: String(actual) });
  };
  check('max_msgs_per_subject', wanted.max_msgs_per_subject, config.max_msgs_per_subject);
  check('discard', wanted.discard, config.discard);
  check('storage', wanted.storage, config.storage);
  check('retention', wanted.retention, config.retention);
  check('allow_direct', wanted.allow_direct, config.allow_direct);
  check('duplicate_window', wanted.duplicate_window, config.duplicate_window);
  check('max_age', wanted.max_age, config.max_age);
  check('num_replicas', wanted.num_replicas, config.num_replicas);
  return out;
}

/** One line per difference, for a startup warning. */
export function describeDifferences(result: EnsureStreamResult): string[] {
  return result.differences.map((d) => `stream ${result.name}: ${d.field} is ${d.actual}, Spillway expects ${d.wanted} (left unchanged)`);
}

/** True when every subject matching `wanted` also matches `pattern` (NATS `*` and `>` wildcards). */
export function subjectCovers(pattern: string, wanted: string): boolean {
  const p = pattern.split('.');
  const w = wanted.split('.');
  for (let i = 0; i < p.length; i++) {
    const token = p[i];
    if (token === '>') return i < w.length;
    const other = w[i];
    if (other === undefined || other === '>') return false;
    if (token !== '*' && token !== other) return false;
  }
  return p.length === w.length;
}
