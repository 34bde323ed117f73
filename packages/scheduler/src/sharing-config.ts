import { z } from 'zod';

/**
 * `sharedState` in the EPP's config file: the channel between the EPPs of a pool (docs/sharing.md).
 * On by default: every EPP connects to NATS, and sharing is what makes several EPPs pick as one.
 * `--share-state false` (or `sharedState: { enabled: false }`) turns it off.
 */
const ms = (min: number, max: number) => z.number().finite().min(min).max(max);

export const sharedStateConfigSchema = z
  .strictObject({
    enabled: z.boolean().default(true),
    /** A batch leaves at most this long after its first entry (off the request path, on a timer). */
    batchMs: ms(0, 1000).default(5),
    /**
     * ...or as soon as it holds this many entries. More than one batch carries (512, the receivers'
     * bound) is allowed: what is due leaves split into batches of at most that many.
     */
    batchEntries: z.number().int().min(1).max(8192).default(256),
    /** Entries waiting to be sent, at most (and their estimated bytes); beyond, new entries are dropped and counted. */
    maxBufferedEntries: z.number().int().min(1).max(1_000_000).default(16_384),
    maxBufferedBytes: z
      .number()
      .int()
      .min(1024)
      .max(256 * 1024 * 1024)
      .default(8 * 1024 * 1024),
    /** An EPP with nothing to say sends an empty batch this often, so its peers know it lives. */
    heartbeatMs: ms(10, 60_000).default(1000),
    /** A peer with no batch for this long is forgotten with its in-flight entries. */
    peerTimeoutMs: ms(100, 600_000).default(5000),
    /** A peer's in-flight entry is forgotten this long after it arrived, released or not. */
    remoteEntryTtlMs: ms(100, 3_600_000).default(30_000),
    /** Peers tracked at once; a new peer beyond it replaces the silent first, then the longest-silent of the fullest zone. */
    maxPeers: z.number().int().min(1).max(65_536).default(256),
    /** Peers tracked per zone; a new peer of a full zone replaces that zone's longest-silent one. */
    maxPeersPerZone: z.number().int().min(1).max(65_536).default(32),
    /** Warm start: how long a starting EPP waits for its peers' snapshots before it reports ready. */
    warmStartMs: ms(0, 60_000).default(2000),
    /** ...and how long after the last reply it stops waiting for more. */
    warmStartQuietMs: ms(1, 10_000).default(100),
    /** Bytes of snapshot this EPP sends per warm-start request, and takes in per warm start from each peer. */
    maxSnapshotBytes: z
      .number()
      .int()
      .min(64 * 1024)
      .max(256 * 1024 * 1024)
      .default(16 * 1024 * 1024),
    /** Warm-start requests this EPP answers per second at most (a snapshot costs a scan of its index). */
    maxSyncPerS: ms(0.01, 1000).default(5),
  })
  .superRefine((value, ctx) => {
    if (value.heartbeatMs * 2 > value.peerTimeoutMs) {
      ctx.addIssue({
        code: 'custom',
        path: ['peerTimeoutMs'],
        message: `must be at least twice heartbeatMs (${value.heartbeatMs}), or live peers are forgotten`,
      });
    }
  });

export type SharedStateConfig = z.output<typeof sharedStateConfigSchema>;

/** Every sharing setting at its default: the EPP's, and the routing simulation's EPPs'. */
export const SHARED_STATE_DEFAULTS: SharedStateConfig = sharedStateConfigSchema.parse({});
