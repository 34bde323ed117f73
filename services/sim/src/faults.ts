import { z } from 'zod';

export const FaultPatch = z.object({
  errorRate: z.number().min(0).max(1).optional(),
  stall: z.boolean().optional(),
  /** Crash this long from now; null cancels a pending crash. */
  crashAfterMs: z.number().int().min(0).nullable().optional(),
});
export type FaultPatch = z.infer<typeof FaultPatch>;

export interface FaultState {
  errorRate: number;
  stall: boolean;
  crashAt: number | null;
}

/**
 * Injected failures, switchable at runtime (flags at start, `POST /admin/fault` later). Timers are
 * wall-clock: a crash or stall "after 5 s" means 5 real seconds, whatever the time scale.
 */
export class Faults {
  errorRate: number;
  stall: boolean;
  private crashAt: number | null = null;
  private crashTimer: NodeJS.Timeout | undefined;
  private stallTimer: NodeJS.Timeout | undefined;

  constructor(
    init: { errorRate: number; stall: boolean; stallAfterMs?: number; crashAfterMs?: number },
    private readonly onCrash: () => void,
  ) {
    this.errorRate = init.errorRate;
    this.stall = init.stall;
    if (init.stallAfterMs !== undefined) {
      this.stallTimer = setTimeout(() => (this.stall = true), init.stallAfterMs);
      this.stallTimer.unref();
    }
    if (init.crashAfterMs !== undefined) this.armCrash(init.crashAfterMs);
  }

  update(patch: FaultPatch): FaultState {
    if (patch.errorRate !== undefined) this.errorRate = patch.errorRate;
    if (patch.stall !== undefined) {
      this.stall = patch.stall;
      clearTimeout(this.stallTimer);
    }
    if (patch.crashAfterMs === null) {
      clearTimeout(this.crashTimer);
      this.crashAt = null;
    } else if (patch.crashAfterMs !== undefined) {
      this.armCrash(patch.crashAfterMs);
    }
    return this.state();
  }

  state(): FaultState {
    return { errorRate: this.errorRate, stall: this.stall, crashAt: this.crashAt };
  }

  dispose(): void {
    clearTimeout(this.crashTimer);
    clearTimeout(this.stallTimer);
  }

  private armCrash(ms: number): void {
    clearTimeout(this.crashTimer);
    this.crashAt = Date.now() + ms;
    // Not unref'd: a process told to crash later must live until then.
    this.crashTimer = setTimeout(this.onCrash, ms);
  }
}
