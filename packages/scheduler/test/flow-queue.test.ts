import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { FlowQueue, MAX_FLOW_ID_CHARS, type Held } from '../src/flow-queue.js';

/** What a test remembers of each offered request. */
interface Item {
  readonly seq: number;
  readonly priority: number;
  readonly flow: string;
  readonly bytes: number;
  readonly at: number;
}

type Op =
  | { readonly kind: 'offer'; readonly priority: number; readonly flow: number; readonly bytes: number }
  | { readonly kind: 'take' }
  | { readonly kind: 'remove'; readonly pick: number }
  | { readonly kind: 'expire' }
  | { readonly kind: 'tick'; readonly ms: number };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.record({
      kind: fc.constant('offer' as const),
      priority: fc.integer({ min: -2, max: 2 }),
      flow: fc.integer({ min: 0, max: 5 }),
      bytes: fc.integer({ min: 0, max: 400 }),
    }),
  },
  { weight: 3, arbitrary: fc.constant({ kind: 'take' as const }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('remove' as const), pick: fc.nat() }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'expire' as const }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('tick' as const), ms: fc.integer({ min: 0, max: 300 }) }) },
);

const limitsArb = fc.record({
  maxRequests: fc.integer({ min: 1, max: 12 }),
  maxBytes: fc.integer({ min: 50, max: 2000 }),
  maxHoldMs: fc.integer({ min: 1, max: 1000 }),
});

const flowName = (k: number): string => (k === 0 ? '' : `tenant-${k}`);

/** Plays `ops` on a queue and checks every rule after every step; returns the order of takes. */
function play(limits: { maxRequests: number; maxBytes: number; maxHoldMs: number }, ops: readonly Op[]): Item[] {
  const queue = new FlowQueue<Item>(limits);
  const live = new Map<Held<Item>, Item>();
  const taken: Item[] = [];
  const fairness = new RoundRobinCheck();
  let now = 0;
  let seq = 0;
  const liveItems = (): Item[] => [...live.values()];

  for (const op of ops) {
    switch (op.kind) {
      case 'tick':
        now += op.ms;
        break;
      case 'offer': {
        const item: Item = { seq: seq++, priority: op.priority, flow: flowName(op.flow), bytes: op.bytes, at: now };
        const before = liveItems();
        const result = queue.offer({ value: item, priority: item.priority, flow: item.flow, bytes: item.bytes }, now);
        const size = item.bytes + item.flow.length;
        for (const victim of result.evicted) {
          // Only lower bands give way, newest first, and nothing lower or newer in its band is left behind.
          expect(victim.priority).toBeLessThan(item.priority);
          expect(live.has(victim)).toBe(true);
          live.delete(victim);
          fairness.left(victim.value, live);
          for (const other of live.values()) {
            expect(other.priority).toBeGreaterThanOrEqual(victim.priority);
            if (other.priority === victim.priority) expect(other.seq).toBeLessThan(victim.value.seq);
          }
        }
        if (result.held) {
          live.set(result.held, item);
        } else {
          expect(result.evicted).toHaveLength(0);
          // Refused only when even evicting every lower band would not make room.
          const kept = before.filter((b) => b.priority >= item.priority);
          const keptBytes = kept.reduce((a, b) => a + b.bytes + b.flow.length, 0);
          expect(kept.length + 1 > limits.maxRequests || keptBytes + size > limits.maxBytes).toBe(true);
        }
        break;
      }
      case 'take': {
        const peeked = queue.peek();
        const held = queue.take();
        expect(held).toBe(peeked);
        if (!held) {
          expect(live.size).toBe(0);
          break;
        }
        const item = live.get(held) as Item;
        expect(item).toBeDefined();
        const items = liveItems();
        // Highest band first; FCFS within the flow.
        expect(item.priority).toBe(Math.max(...items.map((i) => i.priority)));
        for (const other of items)
          if (other.flow === item.flow && other.priority === item.priority) expect(other.seq).toBeGreaterThanOrEqual(item.seq);
        live.delete(held);
        taken.push(item);
        // Round robin: between two takes of a flow that stayed backlogged, every other flow of its
        // band that stayed backlogged all along is taken exactly once.
        fairness.taken(item, live);
        break;
      }
      case 'remove': {
        const handles = [...live.keys()];
        const target = handles[op.pick % Math.max(1, handles.length)];
        if (!target) break;
        expect(queue.remove(target)).toBe(true);
        expect(queue.remove(target)).toBe(false);
        const item = live.get(target) as Item;
        live.delete(target);
        fairness.left(item, live);
        break;
      }
      case 'expire': {
        const out = queue.expire(now, []);
        for (const held of out) {
          expect(held.heldAt + limits.maxHoldMs).toBeLessThanOrEqual(now);
          const item = live.get(held) as Item;
          live.delete(held);
          fairness.left(item, live);
        }
        for (const held of live.keys()) expect(held.heldAt + limits.maxHoldMs).toBeGreaterThan(now);
        break;
      }
    }
    // Bounds and bookkeeping after every step.
    expect(queue.size).toBe(live.size);
    expect(queue.size).toBeLessThanOrEqual(limits.maxRequests);
    expect(queue.bytes).toBeLessThanOrEqual(limits.maxBytes);
    expect(queue.bytes).toBe([...live.keys()].reduce((a, h) => a + h.bytes, 0));
    expect(queue.flows).toBeLessThanOrEqual(queue.size);
    expect(queue.flows).toBe(new Set([...live.values()].map((i) => `${i.priority}/${i.flow}`)).size);
    for (const held of live.keys()) expect(held.queued).toBe(true);
  }
  return taken;
}

const backlogged = (live: Map<Held<Item>, Item>, priority: number, flow: string): boolean =>
  [...live.values()].some((i) => i.flow === flow && i.priority === priority);

/**
 * Round-robin bookkeeping: at each take of a flow, the other flows of its band then backlogged,
 * each with the takes it has had since. A flow that leaves the backlog drops out of every record.
 */
class RoundRobinCheck {
  private readonly since = new Map<string, Map<string, number>>();

  taken(item: Item, live: Map<Held<Item>, Item>): void {
    const key = (flow: string): string => `${item.priority}/${flow}`;
    const me = key(item.flow);
    const mine = this.since.get(me);
    if (mine) for (const count of mine.values()) expect(count).toBe(1);
    for (const [flow, counts] of this.since) if (flow !== me && counts.has(me)) counts.set(me, (counts.get(me) as number) + 1);
    if (backlogged(live, item.priority, item.flow)) {
      const others = new Map<string, number>();
      for (const other of live.values()) if (other.priority === item.priority && other.flow !== item.flow) others.set(key(other.flow), 0);
      this.since.set(me, others);
    } else {
      this.drop(me);
    }
  }

  left(item: Item, live: Map<Held<Item>, Item>): void {
    if (!backlogged(live, item.priority, item.flow)) this.drop(`${item.priority}/${item.flow}`);
  }

  private drop(flow: string): void {
    this.since.delete(flow);
    for (const counts of this.since.values()) counts.delete(flow);
  }
}

describe('FlowQueue (properties)', () => {
  it('keeps its bounds, strict priority, FCFS per flow, round robin across flows, and evicts the newest of the lowest band', () => {
    fc.assert(
      fc.property(limitsArb, fc.array(opArb, { maxLength: 120 }), (limits, ops) => {
        play(limits, ops);
      }),
      { numRuns: 400 },
    );
  });

  it('alternates between backlogged flows of a band: in every prefix of the takes, no flow is more than one ahead', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 1, max: 4 }), { minLength: 1, maxLength: 60 }), (flows) => {
        const queue = new FlowQueue<number>({ maxRequests: 1000, maxBytes: 1e9, maxHoldMs: 1e9 });
        flows.forEach((f, i) => queue.offer({ value: i, priority: 0, flow: `f${f}`, bytes: 10 }, 0));
        const left = new Map<string, number>();
        for (const f of flows) left.set(`f${f}`, (left.get(`f${f}`) ?? 0) + 1);
        const got = new Map<string, number>();
        for (let held = queue.take(); held; held = queue.take()) {
          got.set(held.flowId, (got.get(held.flowId) ?? 0) + 1);
          const backlogged = [...left.keys()].filter((f) => (got.get(f) ?? 0) < (left.get(f) as number) || f === held.flowId);
          const counts = backlogged.map((f) => got.get(f) ?? 0);
          expect(Math.max(...counts) - Math.min(...counts)).toBeLessThanOrEqual(1);
        }
        expect(queue.size).toBe(0);
      }),
    );
  });
});

describe('FlowQueue', () => {
  it('dispatches the highest band first, then round robin across tenants, FCFS within each', () => {
    const queue = new FlowQueue<string>({ maxRequests: 100, maxBytes: 1e6, maxHoldMs: 1000 });
    for (const [value, priority, flow] of [
      ['a1', 0, 'a'],
      ['a2', 0, 'a'],
      ['a3', 0, 'a'],
      ['b1', 0, 'b'],
      ['h1', 5, 'a'],
      ['s1', -1, undefined],
    ] as const) {
      queue.offer({ value, priority, flow, bytes: 100 }, 0);
    }
    const order: string[] = [];
    for (let held = queue.take(); held; held = queue.take()) order.push(held.value);
    expect(order).toEqual(['h1', 'a1', 'b1', 'a2', 'a3', 's1']);
  });

  it('evicts the newest request of the lowest band for a higher one, and refuses a newcomer of the lowest band', () => {
    const queue = new FlowQueue<string>({ maxRequests: 3, maxBytes: 1e6, maxHoldMs: 1000 });
    queue.offer({ value: 'low-old', priority: -1, bytes: 1 }, 0);
    queue.offer({ value: 'low-new', priority: -1, bytes: 1 }, 1);
    queue.offer({ value: 'mid', priority: 0, bytes: 1 }, 2);
    const refused = queue.offer({ value: 'low-newest', priority: -1, bytes: 1 }, 3);
    expect(refused.held).toBeUndefined();
    expect(refused.evicted).toEqual([]);
    const high = queue.offer({ value: 'high', priority: 3, bytes: 1 }, 4);
    expect(high.held?.value).toBe('high');
    expect(high.evicted.map((h) => h.value)).toEqual(['low-new']);
    expect(high.evicted[0]?.queued).toBe(false);
    expect(queue.size).toBe(3);
  });

  it('bounds bytes: a flood of large requests never holds more than maxBytes, and a request larger than the queue is refused', () => {
    const queue = new FlowQueue<number>({ maxRequests: 1_000_000, maxBytes: 10_000, maxHoldMs: 1000 });
    let held = 0;
    for (let i = 0; i < 10_000; i++) {
      if (queue.offer({ value: i, priority: 0, flow: `tenant-${i}`, bytes: 900 + (i % 200) }, i).held) held++;
      expect(queue.bytes).toBeLessThanOrEqual(10_000);
    }
    expect(held).toBeGreaterThan(0);
    expect(queue.size).toBeLessThan(12);
    expect(queue.offer({ value: -1, priority: 9, bytes: 10_001 }, 0).held).toBeUndefined();
  });

  it('keeps the flow table bounded under a flood of distinct fairness ids, and cuts a long id', () => {
    const queue = new FlowQueue<number>({ maxRequests: 50, maxBytes: 1e9, maxHoldMs: 1000 });
    for (let i = 0; i < 100_000; i++) {
      queue.offer({ value: i, priority: 0, flow: `flood-${i}`, bytes: 10 }, i);
      if (i % 3 === 0) queue.take();
    }
    expect(queue.flows).toBeLessThanOrEqual(50);
    const long = queue.offer({ value: 1, priority: 1, flow: 'x'.repeat(10_000), bytes: 0 }, 0).held;
    expect(long?.flowId.length).toBe(MAX_FLOW_ID_CHARS);
    expect(long?.bytes).toBe(MAX_FLOW_ID_CHARS);
  });

  it('expires at maxHoldMs, oldest first, and tells when the next expiry is due', () => {
    const queue = new FlowQueue<string>({ maxRequests: 10, maxBytes: 1e6, maxHoldMs: 100 });
    queue.offer({ value: 'first', priority: 0, bytes: 1 }, 0);
    queue.offer({ value: 'second', priority: 5, bytes: 1 }, 50);
    expect(queue.nextExpiryAt()).toBe(100);
    expect(queue.expire(99, []).map((h) => h.value)).toEqual([]);
    expect(queue.expire(100, []).map((h) => h.value)).toEqual(['first']);
    expect(queue.nextExpiryAt()).toBe(150);
    expect(queue.expire(1000, []).map((h) => h.value)).toEqual(['second']);
    expect(queue.nextExpiryAt()).toBeUndefined();
  });

  it('keeps what it holds across new limits, applying a shorter hold and evicting to lower bounds', () => {
    const queue = new FlowQueue<string>({ maxRequests: 10, maxBytes: 1e6, maxHoldMs: 1000 });
    queue.offer({ value: 'keep', priority: 1, bytes: 1 }, 0);
    queue.offer({ value: 'old-low', priority: 0, bytes: 1 }, 10);
    queue.offer({ value: 'new-low', priority: 0, bytes: 1 }, 20);
    expect(queue.setLimits({ maxRequests: 2, maxBytes: 1e6, maxHoldMs: 500 }).map((h) => h.value)).toEqual(['new-low']);
    expect(queue.nextExpiryAt()).toBe(500);
    expect(queue.drain().map((h) => h.value)).toEqual(['keep', 'old-low']);
    expect(queue.size).toBe(0);
    expect(queue.bytes).toBe(0);
  });

  it('takes a cancelled request out at once: it is never dispatched, and its flow gives up its turn', () => {
    const queue = new FlowQueue<string>({ maxRequests: 10, maxBytes: 1e6, maxHoldMs: 1000 });
    const gone = queue.offer({ value: 'a1', priority: 0, flow: 'a', bytes: 1 }, 0).held as Held<string>;
    queue.offer({ value: 'b1', priority: 0, flow: 'b', bytes: 1 }, 0);
    expect(queue.remove(gone)).toBe(true);
    expect(queue.flows).toBe(1);
    expect(queue.take()?.value).toBe('b1');
    expect(queue.take()).toBeUndefined();
    expect(queue.bandStats()).toEqual([]);
  });

  it('refuses everything with a zero request bound', () => {
    const queue = new FlowQueue<string>({ maxRequests: 0, maxBytes: 1e6, maxHoldMs: 1000 });
    expect(queue.offer({ value: 'x', priority: 0, bytes: 1 }, 0).held).toBeUndefined();
  });
});
