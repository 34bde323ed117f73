import {
  FlowQueue,
  flowIdOf,
  type BandStats,
  type Decision,
  type FlowControlConfig,
  type Held,
  type PickRequest,
} from '@spillway/scheduler';
import type { PreparedRequest } from '@spillway/protocol';
import type { FlowOutcome } from './observer.js';

/**
 * Flow control in the EPP (docs/flow-control.md): requests the pick says to hold (Decision.hold)
 * wait in the scheduler's pure queue (`FlowQueue`: priority bands, round robin across fairness ids,
 * FCFS within one, bounded in count and bytes) with their ext_proc streams open — Envoy's full
 * duplex mode has no message timeout, so the gateway simply waits. Whatever may show room runs a
 * dispatch pass (`onRoom`): a metrics sample, a completion this EPP sees, a peer's shared-state
 * batch, a penalty's end. The pass picks the next request in queue order afresh (fresh view, the
 * subset re-checked against current readiness) and sends it when that pick no longer says hold;
 * it stops at the first that must still wait. One timer, for the next `maxHoldMs` expiry (and a
 * penalty's end while something is held).
 *
 * With peers (active-active), a sample reaches every EPP of the pool at once: an EPP's pass after
 * a sample waits `dispatchDelayMs` (its rank among the pool's EPPs times the shared-state channel's
 * delay), so a later EPP's pick already counts what an earlier one dispatched (the pool's shared
 * in-flight) and two EPPs do not release into the same room.
 */

/** What flow control needs of a held stream. */
export interface HeldStream {
  /** The pick to make again at dispatch (model, prompt, objective, the latest subset hint). */
  pickRequest(): PickRequest;
  readonly prepared: PreparedRequest | undefined;
  /** The pick at dispatch found room: send this decision's destination. */
  dispatch(decision: Decision): void;
  /** Answer with an error and end the stream: expired (`queue_timeout`), evicted (`queue_full`), or no endpoint now. */
  refuse(status: 429 | 503, code: string, message: string): void;
}

/** What the queue keeps of a held stream. */
export interface HeldEntry {
  readonly stream: HeldStream;
  readonly sheddable: boolean;
}

export type HeldTicket = Held<HeldEntry>;

export interface FlowControlParts {
  /** The normal pick (the request control's: tokenized, observed). */
  readonly pick: (request: PickRequest, prepared: PreparedRequest | undefined) => Decision;
  readonly config: FlowControlConfig;
  /** Told of every request held and every way one leaves the queue. */
  readonly observer: {
    flowHeld(priority: number, flow: string): void;
    flowLeft(priority: number, flow: string, outcome: FlowOutcome, waitedMs: number): void;
  };
  readonly now: () => number;
  /** How long a sample-triggered pass waits (active-active: this EPP's rank × the channel delay); 0 alone. */
  readonly dispatchDelayMs?: () => number;
  /** When the next passive-health penalty ends, if any (a penalty's end may show room). */
  readonly nextPenaltyEndAt?: (now: number) => number | undefined;
}

/** Why a pass runs (for the delay rule: only samples reach every EPP at once). */
export type RoomSignal = 'sample' | 'completion' | 'peer' | 'penalty';

export class FlowControl {
  private config: FlowControlConfig;
  private readonly queue: FlowQueue<HeldEntry>;
  private readonly parts: FlowControlParts;
  private timer: NodeJS.Timeout | undefined = undefined;
  private timerAt = Number.POSITIVE_INFINITY;
  private delayed: NodeJS.Timeout | undefined = undefined;
  /** The pass asked for this turn of the event loop. */
  private soon: NodeJS.Immediate | undefined = undefined;
  private dispatching = false;
  private closed = false;
  private readonly expired: HeldTicket[] = [];

  constructor(parts: FlowControlParts) {
    this.parts = parts;
    this.config = parts.config;
    this.queue = new FlowQueue(limitsOf(parts.config));
  }

  get enabled(): boolean {
    return this.config.enabled;
  }

  /** Requests held now. */
  get size(): number {
    return this.queue.size;
  }

  get bytes(): number {
    return this.queue.bytes;
  }

  get flows(): number {
    return this.queue.flows;
  }

  bandStats(): BandStats[] {
    return this.queue.bandStats();
  }

  /**
   * Whether a routed decision's request should wait: the pick says hold, or others already wait (a
   * newcomer does not jump the queue). Cheap when nothing is held.
   */
  shouldHold(decision: Decision): boolean {
    return this.config.enabled && decision.status === 'routed' && (decision.hold || this.queue.size > 0);
  }

  /**
   * Holds a stream; undefined when the queue refuses it (full with requests of its priority or
   * higher). Requests evicted to make room are answered `queue_full` here.
   */
  hold(stream: HeldStream, request: { priority: number; flow: string | undefined; bytes: number }): HeldTicket | undefined {
    const now = this.parts.now();
    const offered = this.queue.offer(
      { value: { stream, sheddable: request.priority < 0 }, priority: request.priority, flow: request.flow, bytes: request.bytes },
      now,
    );
    for (const evicted of offered.evicted) this.refuse(evicted, 'evicted', now);
    const held = offered.held;
    if (held === undefined) {
      this.parts.observer.flowLeft(request.priority, flowIdOf(request.flow), 'refused', 0);
      return undefined;
    }
    this.parts.observer.flowHeld(held.priority, held.flowId);
    this.arm(now);
    return held;
  }

  /** The held stream went away (client or gateway gone): out of the queue at once. */
  leave(ticket: HeldTicket): void {
    if (!this.queue.remove(ticket)) return;
    this.parts.observer.flowLeft(ticket.priority, ticket.flowId, 'cancelled', this.parts.now() - ticket.heldAt);
  }

  /**
   * Something may show room. One pass per turn of the event loop however many events arrived in it
   * (a pool's samples come by the thousand per second; a pass is a pick). Samples reach every EPP of
   * the pool at once: after one, the pass waits this EPP's turn.
   */
  onRoom(signal: RoomSignal): void {
    if (this.queue.size === 0 || this.closed) return;
    // A peer's batch while this EPP waits its turn after a sample folds into that pass: an earlier
    // EPP's heartbeat may arrive before the batch that carries its dispatch, and a pass run on it
    // would release into the room that EPP already took.
    if (signal === 'peer' && this.delayed !== undefined) return;
    const delay = signal === 'sample' ? (this.parts.dispatchDelayMs?.() ?? 0) : 0;
    if (delay > 0) {
      if (this.delayed !== undefined) return;
      this.delayed = setTimeout(() => {
        this.delayed = undefined;
        this.dispatch();
      }, delay);
      this.delayed.unref();
      return;
    }
    if (this.soon !== undefined) return;
    this.soon = setImmediate(() => {
      this.soon = undefined;
      this.dispatch();
    });
  }

  /**
   * A config reload: new limits and budget from the next pass on; what is held stays (lower bounds
   * evict, newest of the lowest band first). Turned off, everything held is dispatched now (the
   * pick no longer holds).
   */
  reconfigure(config: FlowControlConfig): void {
    this.config = config;
    const now = this.parts.now();
    for (const evicted of this.queue.setLimits(limitsOf(config))) this.refuse(evicted, 'evicted', now);
    this.rearm(now);
    this.dispatch();
  }

  /** Shutdown: every held request is answered 503 (the EPP is going away), and the timers stop. */
  close(): void {
    this.closed = true;
    this.clearTimers();
    const now = this.parts.now();
    for (const held of this.queue.drain()) {
      this.parts.observer.flowLeft(held.priority, held.flowId, 'shutdown', now - held.heldAt);
      held.value.stream.refuse(503, 'shutting_down', 'the endpoint picker is shutting down; retry');
    }
  }

  /** Sends held requests in queue order while the pick finds room for the next one. */
  dispatch(): void {
    if (this.dispatching || this.queue.size === 0) return;
    this.dispatching = true;
    try {
      for (let next = this.queue.peek(); next !== undefined; next = this.queue.peek()) {
        const stream = next.value.stream;
        const decision = this.parts.pick(stream.pickRequest(), stream.prepared);
        if (this.config.enabled && decision.status === 'routed' && decision.hold) break;
        this.queue.take();
        const waited = this.parts.now() - next.heldAt;
        if (decision.status === 'routed') {
          this.parts.observer.flowLeft(next.priority, next.flowId, 'dispatched', waited);
          stream.dispatch(decision);
        } else {
          // Nothing eligible any more (the subset's pods went away, a sheddable request shed): answered as a pick would be.
          this.parts.observer.flowLeft(next.priority, next.flowId, 'unroutable', waited);
          stream.refuse(
            decision.status,
            decision.status === 429 ? 'system_saturated' : decision.rule,
            decision.status === 429
              ? 'every eligible endpoint is saturated and the request is sheddable'
              : `no endpoint available (${decision.rule})`,
          );
        }
      }
    } finally {
      this.dispatching = false;
    }
    this.rearm(this.parts.now());
  }

  private refuse(held: HeldTicket, outcome: 'evicted' | 'expired', now: number): void {
    this.parts.observer.flowLeft(held.priority, held.flowId, outcome, now - held.heldAt);
    const status = held.value.sheddable ? 429 : 503;
    if (outcome === 'expired') {
      held.value.stream.refuse(status, 'queue_timeout', `request timed out in queue after ${this.config.maxHoldMs} ms`);
    } else {
      held.value.stream.refuse(status, 'queue_full', 'the flow control queue is full; retry');
    }
  }

  /** The timer: the next expiry, or a penalty's end before it while something is held. */
  private arm(now: number): void {
    const expiry = this.queue.nextExpiryAt();
    if (expiry === undefined) return this.clearTimers();
    const penaltyEnd = this.parts.nextPenaltyEndAt?.(now);
    const at = penaltyEnd !== undefined && penaltyEnd < expiry ? penaltyEnd : expiry;
    if (this.timer !== undefined && this.timerAt <= at) return;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timerAt = at;
    this.timer = setTimeout(() => this.fire(), Math.max(0, at - now));
    this.timer.unref();
  }

  private rearm(now: number): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    this.timerAt = Number.POSITIVE_INFINITY;
    this.arm(now);
  }

  private fire(): void {
    this.timer = undefined;
    this.timerAt = Number.POSITIVE_INFINITY;
    const now = this.parts.now();
    for (const held of this.queue.expire(now, this.expired)) this.refuse(held, 'expired', now);
    this.expired.length = 0;
    // A penalty may have ended: the pass finds out (and re-arms).
    this.dispatch();
    this.arm(now);
  }

  private clearTimers(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    this.timerAt = Number.POSITIVE_INFINITY;
    if (this.delayed !== undefined) clearTimeout(this.delayed);
    this.delayed = undefined;
    if (this.soon !== undefined) clearImmediate(this.soon);
    this.soon = undefined;
  }
}

function limitsOf(config: FlowControlConfig): { maxRequests: number; maxBytes: number; maxHoldMs: number } {
  return { maxRequests: config.maxHeldRequests, maxBytes: config.maxHeldBytes, maxHoldMs: config.maxHoldMs };
}
