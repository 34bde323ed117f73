/**
 * Flow control's queue (pure: no clock but the one handed in, no I/O). Requests the EPP holds
 * instead of answering at once wait here, ordered as the Gateway API Inference Extension's EPP (now
 * in llm-d) orders its flow-control queues, by three rules:
 *
 *   1. priority bands: the highest band with anything held goes first (strict priority);
 *   2. fairness within a band: round robin over the band's flows (one per fairness id), one request
 *      per turn, so a tenant that floods the pool gets one turn in N, not the whole band;
 *   3. FCFS within a flow.
 *
 * Bounded in count and bytes: when an offer does not fit, the newest request of the lowest band goes
 * first (the newcomer itself when it is in, or below, the lowest band). Flows and bands exist only
 * while they hold a request, so the flow table is bounded by what is held: a flood of distinct
 * fairness ids grows it no further than the requests it brings, and each id is cut to
 * MAX_FLOW_ID_CHARS. Every removal (dispatch, cancellation, expiry, eviction) is O(1) but for the
 * band list (one entry per distinct priority held, a handful).
 *
 * Each held request sits on three intrusive lists: its flow's (FCFS), its band's in arrival order
 * (eviction takes the newest), and the queue's in arrival order (expiry takes the oldest).
 */

/** A fairness id longer than this is cut (it is a map key and a metric label's source). */
export const MAX_FLOW_ID_CHARS = 128;
/** The flow of requests without a fairness id. */
export const DEFAULT_FLOW = '';

export interface FlowQueueLimits {
  /** Requests held at most. */
  readonly maxRequests: number;
  /** Bytes held at most (each request's bytes plus its fairness id's characters). */
  readonly maxBytes: number;
  /** A request held this long has expired. */
  readonly maxHoldMs: number;
}

export interface HoldRequest<T> {
  readonly value: T;
  /** Its objective's priority: higher bands go first. */
  readonly priority: number;
  /** Its fairness id (`x-gateway-inference-fairness-id`); absent: the default flow. */
  readonly flow?: string | undefined;
  /** What holding it costs in memory (its body and headers). */
  readonly bytes: number;
}

/** One held request: a handle to remove it by, and what the queue knows of it. */
export class Held<T> {
  /** Still in the queue (false once dispatched, removed, expired or evicted). */
  queued = true;
  flowPrev: Held<T> | undefined = undefined;
  flowNext: Held<T> | undefined = undefined;
  bandPrev: Held<T> | undefined = undefined;
  bandNext: Held<T> | undefined = undefined;
  agePrev: Held<T> | undefined = undefined;
  ageNext: Held<T> | undefined = undefined;

  readonly value: T;
  /** Its objective's priority (its band). */
  readonly priority: number;
  /** Its fairness id as the queue keys it (flowIdOf). */
  readonly flowId: string;

  constructor(
    request: HoldRequest<T>,
    /** The flow it waits in (internal). */
    readonly flow: Flow<T>,
    /** What it counts against maxBytes: its bytes and its fairness id's characters. */
    readonly bytes: number,
    readonly heldAt: number,
  ) {
    this.value = request.value;
    this.priority = request.priority;
    this.flowId = flow.id;
  }
}

/** One fairness id's requests within one band: FCFS, and a place on the band's round-robin ring. */
export class Flow<T> {
  head: Held<T> | undefined = undefined;
  tail: Held<T> | undefined = undefined;
  count = 0;
  /** The band's ring of flows with something held. */
  prev: Flow<T> = this;
  next: Flow<T> = this;

  constructor(
    readonly id: string,
    readonly band: Band<T>,
  ) {}
}

/** One priority's requests: its flows on a ring (whose turn is next), and its requests by arrival. */
export class Band<T> {
  readonly flows = new Map<string, Flow<T>>();
  /** The flow whose turn is next; undefined when the band holds nothing. */
  turn: Flow<T> | undefined = undefined;
  oldest: Held<T> | undefined = undefined;
  newest: Held<T> | undefined = undefined;
  count = 0;
  bytes = 0;

  constructor(readonly priority: number) {}
}

/** What an offer did: the request held (undefined when it was refused), and what it pushed out. */
export interface OfferResult<T> {
  readonly held: Held<T> | undefined;
  /** Requests evicted to make room (newest of the lowest band first); their callers answer them. */
  readonly evicted: readonly Held<T>[];
}

/** One band's load, for metrics and the live view. */
export interface BandStats {
  readonly priority: number;
  readonly requests: number;
  readonly bytes: number;
  readonly flows: number;
}

const NOTHING_EVICTED: readonly never[] = [];

export class FlowQueue<T> {
  /** Bands with something held, highest priority first. */
  private readonly bands: Band<T>[] = [];
  private oldest: Held<T> | undefined = undefined;
  private newest: Held<T> | undefined = undefined;
  private count = 0;
  private heldBytes = 0;
  private flowCount = 0;
  private current: FlowQueueLimits;

  constructor(limits: FlowQueueLimits) {
    this.current = limits;
  }

  get limits(): FlowQueueLimits {
    return this.current;
  }

  /** Requests held. */
  get size(): number {
    return this.count;
  }

  get bytes(): number {
    return this.heldBytes;
  }

  /** Flows with something held, over all bands (each at most one per held request). */
  get flows(): number {
    return this.flowCount;
  }

  /**
   * New limits (a config reload). What is held stays, with its arrival time: a shorter `maxHoldMs`
   * applies to it from now on. Lower bounds evict at once, newest of the lowest band first.
   */
  setLimits(limits: FlowQueueLimits): Held<T>[] {
    this.current = limits;
    const evicted: Held<T>[] = [];
    while (this.count > limits.maxRequests || this.heldBytes > limits.maxBytes) {
      const victim = this.bands[this.bands.length - 1]?.newest;
      if (!victim) break;
      this.unlink(victim);
      evicted.push(victim);
    }
    return evicted;
  }

  /**
   * Holds a request if it fits, evicting newer lower-priority requests when that makes room, and
   * only then. Refused (held undefined, nothing evicted) when it is larger than the whole queue, or
   * when everything that would have to go is of its priority or higher: among equals the newcomer
   * is the newest.
   */
  offer(request: HoldRequest<T>, now: number): OfferResult<T> {
    const flowId = flowIdOf(request.flow);
    const bytes = Math.max(0, request.bytes) + flowId.length;
    const limits = this.current;
    if (limits.maxRequests < 1 || bytes > limits.maxBytes) return { held: undefined, evicted: NOTHING_EVICTED };
    let evicted: Held<T>[] | undefined;
    if (this.count + 1 > limits.maxRequests || this.heldBytes + bytes > limits.maxBytes) {
      // What could go: every band below the newcomer's. Refuse before evicting anything if that is not enough.
      let lowerCount = 0;
      let lowerBytes = 0;
      for (let i = this.bands.length - 1; i >= 0; i--) {
        const band = this.bands[i] as Band<T>;
        if (band.priority >= request.priority) break;
        lowerCount += band.count;
        lowerBytes += band.bytes;
      }
      if (this.count - lowerCount + 1 > limits.maxRequests || this.heldBytes - lowerBytes + bytes > limits.maxBytes) {
        return { held: undefined, evicted: NOTHING_EVICTED };
      }
      evicted = [];
      while (this.count + 1 > limits.maxRequests || this.heldBytes + bytes > limits.maxBytes) {
        const victim = (this.bands[this.bands.length - 1] as Band<T>).newest as Held<T>;
        this.unlink(victim);
        evicted.push(victim);
      }
    }
    const band = this.bandOf(request.priority);
    let flow = band.flows.get(flowId);
    if (flow === undefined) {
      flow = new Flow(flowId, band);
      band.flows.set(flowId, flow);
      this.flowCount++;
      joinRing(band, flow);
    }
    const held = new Held(request, flow, bytes, now);
    // FCFS in its flow.
    held.flowPrev = flow.tail;
    if (flow.tail) flow.tail.flowNext = held;
    else flow.head = held;
    flow.tail = held;
    flow.count++;
    // Arrival order in its band and in the queue.
    held.bandPrev = band.newest;
    if (band.newest) band.newest.bandNext = held;
    else band.oldest = held;
    band.newest = held;
    band.count++;
    band.bytes += bytes;
    held.agePrev = this.newest;
    if (this.newest) this.newest.ageNext = held;
    else this.oldest = held;
    this.newest = held;
    this.count++;
    this.heldBytes += bytes;
    return { held, evicted: evicted ?? NOTHING_EVICTED };
  }

  /** The request to dispatch next, left in the queue: the head of the flow whose turn it is in the highest band. */
  peek(): Held<T> | undefined {
    return this.bands[0]?.turn?.head;
  }

  /** Takes the request `peek` names out of the queue; the turn passes to the band's next flow. */
  take(): Held<T> | undefined {
    const band = this.bands[0];
    const flow = band?.turn;
    const held = flow?.head;
    if (!band || !flow || !held) return undefined;
    // The turn passes on before the unlink, which moves it only when the flow leaves the ring.
    band.turn = flow.next;
    this.unlink(held);
    return held;
  }

  /** Takes a request out (its client went away, say); false when it was no longer queued. */
  remove(held: Held<T>): boolean {
    if (!held.queued) return false;
    this.unlink(held);
    return true;
  }

  /** When the oldest held request expires; undefined when nothing is held. */
  nextExpiryAt(): number | undefined {
    return this.oldest === undefined ? undefined : this.oldest.heldAt + this.current.maxHoldMs;
  }

  /** Takes out every request held `maxHoldMs` or longer at `now`, oldest first, into `out`. */
  expire(now: number, out: Held<T>[]): Held<T>[] {
    for (let held = this.oldest; held !== undefined && held.heldAt + this.current.maxHoldMs <= now; held = this.oldest) {
      this.unlink(held);
      out.push(held);
    }
    return out;
  }

  /** Every held request, oldest first (a shutdown answers them all). */
  drain(): Held<T>[] {
    const out: Held<T>[] = [];
    while (this.oldest) {
      out.push(this.oldest);
      this.unlink(this.oldest);
    }
    return out;
  }

  /** Each band's load, highest priority first. */
  bandStats(): BandStats[] {
    return this.bands.map((b) => ({ priority: b.priority, requests: b.count, bytes: b.bytes, flows: b.flows.size }));
  }

  private bandOf(priority: number): Band<T> {
    const bands = this.bands;
    // Highest first; a handful of bands, so a linear search from the top is the cheapest.
    let i = 0;
    while (i < bands.length && (bands[i] as Band<T>).priority > priority) i++;
    const found = bands[i];
    if (found !== undefined && found.priority === priority) return found;
    const band = new Band<T>(priority);
    bands.splice(i, 0, band);
    return band;
  }

  private unlink(held: Held<T>): void {
    held.queued = false;
    const flow = held.flow;
    const band = flow.band;
    if (held.flowPrev) held.flowPrev.flowNext = held.flowNext;
    else flow.head = held.flowNext;
    if (held.flowNext) held.flowNext.flowPrev = held.flowPrev;
    else flow.tail = held.flowPrev;
    flow.count--;
    if (held.bandPrev) held.bandPrev.bandNext = held.bandNext;
    else band.oldest = held.bandNext;
    if (held.bandNext) held.bandNext.bandPrev = held.bandPrev;
    else band.newest = held.bandPrev;
    band.count--;
    band.bytes -= held.bytes;
    if (held.agePrev) held.agePrev.ageNext = held.ageNext;
    else this.oldest = held.ageNext;
    if (held.ageNext) held.ageNext.agePrev = held.agePrev;
    else this.newest = held.agePrev;
    this.count--;
    this.heldBytes -= held.bytes;
    held.flowPrev = held.flowNext = held.bandPrev = held.bandNext = held.agePrev = held.ageNext = undefined;
    if (flow.count === 0) {
      leaveRing(band, flow);
      band.flows.delete(flow.id);
      this.flowCount--;
      if (band.count === 0) this.bands.splice(this.bands.indexOf(band), 1);
    }
  }
}

/** The fairness id as the queue keys it: absent or empty is the default flow; a long one is cut. */
export function flowIdOf(flow: string | undefined): string {
  if (flow === undefined) return DEFAULT_FLOW;
  return flow.length > MAX_FLOW_ID_CHARS ? flow.slice(0, MAX_FLOW_ID_CHARS) : flow;
}

/** A new flow joins the ring just before the flow whose turn it is: last in the current round. */
function joinRing<T>(band: Band<T>, flow: Flow<T>): void {
  const turn = band.turn;
  if (turn === undefined) {
    flow.prev = flow.next = flow;
    band.turn = flow;
    return;
  }
  flow.next = turn;
  flow.prev = turn.prev;
  turn.prev.next = flow;
  turn.prev = flow;
}

function leaveRing<T>(band: Band<T>, flow: Flow<T>): void {
  if (flow.next === flow) {
    band.turn = undefined;
  } else {
    flow.prev.next = flow.next;
    flow.next.prev = flow.prev;
    if (band.turn === flow) band.turn = flow.next;
  }
  flow.prev = flow.next = flow;
}
