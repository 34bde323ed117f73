import type { Dispatcher } from 'undici';
import { GetError, getText, originOf, type GetFailureReason } from './http-get.js';

export type ProbeState = 'unknown' | 'up' | 'down';

export interface ProbeOptions {
  intervalMs: number;
  timeoutMs: number;
  path: string;
  successThreshold: number;
  failureThreshold: number;
}

/**
 * Health-probes one endpoint (`GET <path>`, any 2xx is healthy) on its own timer. The first answer
 * decides the state at once, as a starting collector must not wait several intervals to publish;
 * after that `successThreshold` consecutive successes bring it up and `failureThreshold`
 * consecutive failures take it down, so one lost probe does not flap the pod.
 */
export class Prober {
  private state: ProbeState = 'unknown';
  private successes = 0;
  private failures = 0;
  private timer: NodeJS.Timeout | undefined;
  private inFlight = false;
  private stopped = false;

  constructor(
    private readonly dispatcher: Dispatcher,
    private readonly address: string,
    private readonly options: ProbeOptions,
    private readonly onChange: (state: ProbeState) => void,
    private readonly onFailure: (reason: GetFailureReason, message: string) => void,
  ) {}

  get current(): ProbeState {
    return this.state;
  }

  start(): void {
    void this.probe();
    this.timer = setInterval(() => void this.probe(), this.options.intervalMs);
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
  }

  private async probe(): Promise<void> {
    if (this.inFlight || this.stopped) return;
    this.inFlight = true;
    let ok: boolean;
    try {
      await getText(this.dispatcher, originOf(this.address), this.options.path, this.options.timeoutMs, 64 * 1024);
      ok = true;
    } catch (error) {
      ok = false;
      const failure = error instanceof GetError ? error : new GetError('connect', String(error));
      if (!this.stopped) this.onFailure(failure.reason, failure.message);
    } finally {
      this.inFlight = false;
    }
    if (this.stopped) return;
    this.record(ok);
  }

  private record(ok: boolean): void {
    if (ok) {
      this.successes++;
      this.failures = 0;
    } else {
      this.failures++;
      this.successes = 0;
    }
    let next = this.state;
    if (this.state === 'unknown') next = ok ? 'up' : 'down';
    else if (this.state === 'down' && this.successes >= this.options.successThreshold) next = 'up';
    else if (this.state === 'up' && this.failures >= this.options.failureThreshold) next = 'down';
    if (next !== this.state) {
      this.state = next;
      this.onChange(next);
    }
  }
}
