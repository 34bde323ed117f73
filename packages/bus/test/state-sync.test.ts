import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Msg, NatsConnection, Subscription } from '@nats-io/nats-core';
import {
  decodeStateBatch,
  encodeStateBatch,
  parseStateSubject,
  STATE_PICK,
  stateSyncFilter,
  type StateBatch,
  type StateDecodeResult,
} from '@spillway/events';
import { startNatsServer, type NatsServerHandle } from '@spillway/testkit';
import { connectNats, natsSettingsFromValues, requestStateSync } from '../src/index.js';

const POOL = 'llama';
const self = { pool: POOL, zone: 'zone-a', epp: 'starting-1' };

let server: NatsServerHandle;
let nc: NatsConnection;
const responders: Subscription[] = [];

beforeAll(async () => {
  server = await startNatsServer({ forcePrivate: true });
  nc = await connectNats(natsSettingsFromValues({ nats: server.url }, {}));
});

afterAll(async () => {
  await nc?.close();
  await server?.stop();
});

function snapshot(epp: string, request: number, last: boolean): StateBatch {
  return {
    v: 1,
    pool: POOL,
    zone: 'zone-b',
    epp,
    seq: 3,
    sentAt: Date.now(),
    entries: [[STATE_PICK, request, 'zone-b', `pod-${request}`, 10, [request]]],
    snapshot: { last },
  };
}

/** An EPP of the pool that answers sync requests with `reply(request)`, each element one part. */
function respond(reply: (request: StateBatch, msg: Msg) => (Uint8Array | 'silence')[]): void {
  responders.push(
    nc.subscribe(stateSyncFilter(POOL), {
      callback: (error, msg) => {
        if (error) return;
        const decoded = decodeStateBatch(msg.data, parseStateSubject(msg.subject));
        if (!decoded.ok) throw new Error(`a sync request that does not decode: ${decoded.detail}`);
        for (const part of reply(decoded.batch, msg)) if (part !== 'silence') msg.respond(part);
      },
    }),
  );
}

function stopResponders(): void {
  for (const sub of responders.splice(0)) sub.unsubscribe();
}

async function sync(options: { deadlineMs?: number; quietMs?: number; want?: 'in-flight' } = {}) {
  const replies: { reply: StateDecodeResult; bytes: number }[] = [];
  const result = await requestStateSync(nc, {
    self,
    deadlineMs: options.deadlineMs ?? 3_000,
    quietMs: options.quietMs ?? 200,
    ...(options.want !== undefined && { want: options.want }),
    onReply: (reply, bytes) => replies.push({ reply, bytes }),
  });
  return { result, replies };
}

describe('requestStateSync', () => {
  it('hears at once that no EPP of the pool listens', async () => {
    const { result, replies } = await sync({ deadlineMs: 20_000 });
    expect(result.end).toBe('no-responders');
    expect(replies).toEqual([]);
  });

  it("takes every peer's parts, in order, and ends when they stop coming", async () => {
    const seen: StateBatch[] = [];
    respond((request) => {
      seen.push(request);
      return [snapshot('peer-1', 1, false), snapshot('peer-1', 2, true)].map(encodeStateBatch);
    });
    respond(() => [encodeStateBatch(snapshot('peer-2', 7, true))]);
    try {
      const { result, replies } = await sync({ want: 'in-flight' });
      expect(result).toMatchObject({ end: 'quiet', replies: 3 });
      const batches = replies.map(({ reply }) => (reply.ok ? reply.batch : undefined));
      expect(batches.filter((b) => b?.epp === 'peer-1').map((b) => b?.snapshot?.last)).toEqual([false, true]);
      expect(batches.filter((b) => b?.epp === 'peer-2')).toHaveLength(1);
      for (const { bytes } of replies) expect(bytes).toBeGreaterThan(0);
      // The request names its requester, carries no entries and says what it wants.
      expect(seen).toEqual([expect.objectContaining({ ...self, seq: 0, entries: [], want: 'in-flight' })]);
    } finally {
      stopResponders();
    }
  });

  it('asks for the whole state unless told otherwise', async () => {
    const seen: StateBatch[] = [];
    respond((request) => {
      seen.push(request);
      return [encodeStateBatch(snapshot('peer-1', 1, true))];
    });
    try {
      await sync();
      expect(seen[0]?.want).toBeUndefined();
    } finally {
      stopResponders();
    }
  });

  it('hands over malformed replies as decode failures, and keeps listening', async () => {
    // Not msgpack; msgpack but not a batch (no epp, no sequence); then a good part.
    const notABatch = encodeStateBatch({ v: 1, pool: POOL, entries: [] } as unknown as StateBatch);
    respond(() => [new Uint8Array([0xc1]), notABatch, encodeStateBatch(snapshot('peer-1', 1, true))]);
    try {
      const { result, replies } = await sync();
      expect(result).toMatchObject({ end: 'quiet', replies: 3 });
      expect(replies.map(({ reply }) => (reply.ok ? 'ok' : reply.reason))).toEqual(['not-msgpack', 'invalid', 'ok']);
    } finally {
      stopResponders();
    }
  });

  it('waits until the deadline for a listener that never answers', async () => {
    respond(() => ['silence']);
    try {
      const { result, replies } = await sync({ deadlineMs: 400 });
      expect(result).toMatchObject({ end: 'deadline', replies: 0 });
      expect(replies).toEqual([]);
    } finally {
      stopResponders();
    }
  });

  it('cuts a stream of replies that outlasts the deadline', async () => {
    // A peer that keeps answering, a part every 20 ms: never quiet for 5 s.
    let timer: NodeJS.Timeout | undefined;
    respond((_request, msg) => {
      let n = 0;
      timer = setInterval(() => msg.respond(encodeStateBatch(snapshot('chatty', ++n, false))), 20);
      return ['silence'];
    });
    try {
      const { result, replies } = await sync({ deadlineMs: 500, quietMs: 5_000 });
      expect(result.end).toBe('deadline');
      expect(replies.length).toBeGreaterThan(0);
    } finally {
      clearInterval(timer);
      stopResponders();
    }
  });

  it('fails, without throwing, on a closed connection', async () => {
    const closed = await connectNats(natsSettingsFromValues({ nats: server.url }, {}));
    await closed.close();
    const result = await requestStateSync(closed, { self, deadlineMs: 1000, quietMs: 100, onReply: () => undefined });
    expect(result.end).toBe('failed');
    expect(result.error).toBeInstanceOf(Error);
  });
});
