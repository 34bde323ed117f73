import {
  KV_CLEARED,
  KV_REMOVED,
  KV_STORED,
  MAX_KV_INFO_TEXT,
  MAX_KV_SKIPPED,
  type KvBlockInfo,
  type KvEvent,
  type KvSkipped,
  type KvStoredRun,
} from '@spillway/events';

/**
 * What the relay says of the blocks it relays (docs/kv-events.md "What a relayed batch says of its
 * blocks"): each stored change carries what the server said of its blocks, which ends up in the
 * batch's `stored` runs; blocks it does not relay as keys are tallied by description into the
 * batch's `skipped`. Pure.
 */

/** A change to relay: a relayed event, a stored one with what the server said of its blocks. */
export type KvChange = KvEvent | [typeof KV_STORED, number[], KvBlockInfo];

const MAX_U32 = 0xffffffff;
/** Lone UTF-16 surrogates (a string cut in the middle of a pair, or decoded from bad bytes): not encodable as UTF-8. */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/**
 * A server's text as a description field: cut to `max` characters and made well-formed; undefined
 * when absent or empty. Descriptions are for visibility, so a cut name is fine; a field a reader
 * would refuse is not (it would drop the whole batch, and blind that pod until its next snapshot).
 */
export function relayText(text: string | null | undefined, max = MAX_KV_INFO_TEXT): string | undefined {
  if (text === null || text === undefined || text === '') return undefined;
  return (text.length > max ? text.slice(0, max) : text).replace(LONE_SURROGATE, '\ufffd');
}

/** A server's whole number as a description field: undefined unless in [0, 2^32). */
export function relayWhole(n: number | null | undefined): number | undefined {
  return n !== null && n !== undefined && Number.isInteger(n) && n >= 0 && n <= MAX_U32 ? n : undefined;
}

/** What a server said of some blocks, as a description (fields it did not say are left out, not undefined). */
export function blockInfo(said: {
  medium?: string | null;
  group?: number | null;
  kind?: string | null;
  window?: number | null;
  lora?: string | null;
  extraKeys?: boolean;
}): KvBlockInfo {
  const info: KvBlockInfo = {};
  const medium = relayText(said.medium);
  if (medium !== undefined) info.medium = medium;
  const group = relayWhole(said.group);
  if (group !== undefined) info.group = group;
  const kind = relayText(said.kind);
  if (kind !== undefined) info.kind = kind;
  const window = relayWhole(said.window);
  if (window !== undefined) info.window = window;
  const lora = relayText(said.lora, 253);
  if (lora !== undefined) info.lora = lora;
  if (said.extraKeys === true) info.extraKeys = true;
  return info;
}

function sameInfo(a: KvBlockInfo, b: KvBlockInfo): boolean {
  return (
    a.medium === b.medium &&
    a.group === b.group &&
    a.kind === b.kind &&
    a.window === b.window &&
    a.lora === b.lora &&
    a.extraKeys === b.extraKeys
  );
}

function infoKey(reason: string, info: KvBlockInfo | undefined): string {
  if (info === undefined) return reason;
  return `${reason}\u0000${info.medium ?? ''}\u0000${info.group ?? ''}\u0000${info.kind ?? ''}\u0000${info.window ?? ''}\u0000${info.lora ?? ''}\u0000${info.extraKeys === true ? 1 : 0}`;
}

/**
 * Blocks of one server batch not relayed as keys, summed by reason and description. At most
 * `MAX_KV_SKIPPED` tallies: past `MAX_KV_SKIPPED - 1` descriptions, the rest are summed into one
 * tally with neither reason nor description, so a server naming a new medium per event cannot
 * make a batch grow (or make the relay publish more).
 */
export class SkippedTally {
  private readonly tallies = new Map<string, KvSkipped>();
  private rest: KvSkipped | undefined;

  add(reason: string, blocks: number, what: { info?: KvBlockInfo | undefined; removed?: boolean } = {}): void {
    if (blocks <= 0) return;
    const key = infoKey(reason, what.info);
    let tally = this.tallies.get(key);
    if (tally === undefined) {
      if (this.tallies.size < MAX_KV_SKIPPED - 1) {
        tally = { reason, ...what.info };
        this.tallies.set(key, tally);
      } else tally = this.rest ??= {};
    }
    const field = what.removed === true ? 'removed' : 'stored';
    tally[field] = Math.min(MAX_U32, (tally[field] ?? 0) + blocks);
  }

  /** The tallies (undefined when nothing was skipped). */
  list(): KvSkipped[] | undefined {
    if (this.tallies.size === 0 && this.rest === undefined) return undefined;
    const list = [...this.tallies.values()];
    if (this.rest !== undefined) list.push(this.rest);
    return list;
  }
}

/** One relayed batch's events and the runs describing its stored ones. */
export interface KvChunk {
  events: KvEvent[];
  stored: KvStoredRun[];
}

export interface ChunkBounds {
  maxEvents: number;
  maxKeys: number;
  /** Stored runs per batch (`MAX_KV_STORED_RUNS`): a new description past them starts a new batch. */
  maxRuns: number;
}

/**
 * Cuts changes into batches within the relay's bounds (events, keys, and runs of stored events
 * with one description per batch), cutting a long key list where needed. Order is kept; the
 * pieces of a cut stored event keep its description.
 */
export function chunkKvChanges(changes: readonly KvChange[], bounds: ChunkBounds): KvChunk[] {
  const chunks: KvChunk[] = [];
  let current: KvChunk = { events: [], stored: [] };
  let keys = 0;
  const cut = (): void => {
    chunks.push(current);
    current = { events: [], stored: [] };
    keys = 0;
  };
  const push = (event: KvEvent, n: number, info: KvBlockInfo | undefined): void => {
    if (current.events.length >= bounds.maxEvents || keys + n > bounds.maxKeys) cut();
    if (info !== undefined) {
      const last = current.stored[current.stored.length - 1];
      if (last !== undefined && sameInfo(last, info)) last.events++;
      else {
        if (current.stored.length >= bounds.maxRuns) cut();
        current.stored.push({ events: 1, ...info });
      }
    }
    current.events.push(event);
    keys += n;
  };
  for (const change of changes) {
    if (change[0] === KV_CLEARED) {
      push([KV_CLEARED], 0, undefined);
      continue;
    }
    const [tag, list] = change;
    // A stored change the relay did not describe is a run that says nothing (runs cover every stored event in order).
    const info = tag === KV_STORED ? (change[2] ?? {}) : undefined;
    for (let i = 0; i < list.length || i === 0; i += bounds.maxKeys) {
      const piece = list.slice(i, i + bounds.maxKeys);
      push(tag === KV_STORED ? [KV_STORED, piece] : [KV_REMOVED, piece], piece.length, info);
    }
  }
  if (current.events.length > 0) chunks.push(current);
  return chunks;
}
