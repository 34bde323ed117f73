import { z } from 'zod';

/**
 * Flow control (docs/flow-control.md): when no eligible endpoint has room, the EPP may hold a
 * request instead of answering at once, and dispatch it when room frees, highest priority band
 * first, round robin across fairness ids within a band, FCFS within one. On by default: measured in
 * the routing simulation it holds nothing below saturation and protects bands and tenants above it
 * (BENCHMARKS.md, "Flow control (simulation)").
 */
export const flowControlConfigSchema = z.strictObject({
  enabled: z.boolean().default(true),
  /** A request held this long is answered 429 (sheddable) or 503, code `queue_timeout`. */
  maxHoldMs: z.number().int().min(1).max(600_000).default(5000),
  /** Requests held at most; past it the newest request of the lowest band is refused first. */
  maxHeldRequests: z.number().int().min(0).max(1_000_000).default(1000),
  /** Bytes (bodies, headers, fairness ids) held at most, with the same rule. */
  maxHeldBytes: z
    .number()
    .int()
    .min(0)
    .max(2 ** 40)
    .default(64 * 1024 * 1024),
  /**
   * An endpoint has room when it is not full and its expected wait is at most this. A request is
   * held only when no eligible endpoint has room (and waiting for local room is expected to be
   * faster than the best remote endpoint); a held one is dispatched when one has.
   */
  holdAboveMs: z.number().finite().min(0).max(3_600_000).default(200),
  /**
   * Active-active: after a sample, an EPP's dispatch pass waits its rank among the pool's EPPs
   * (at most 3 ranks) times the shared-state batch delay plus this, so a later EPP's pass already
   * counts what an earlier one dispatched. It is what a state batch takes over NATS beyond its
   * batch delay; a slow network or a loaded machine wants more.
   */
  dispatchStaggerMs: z.number().int().min(0).max(10_000).default(20),
});

export type FlowControlConfig = z.output<typeof flowControlConfigSchema>;
