import { Agent, request as httpRequest } from 'node:http';

/**
 * The demo's load driver: per zone, Poisson arrivals at the current rate into that zone's gateway,
 * each a streaming completion whose time to first token is read from the SSE stream. In-flight
 * requests are bounded per zone: an arrival beyond the bound is not sent and is counted as `shed`,
 * so an overloaded system slows the demo down instead of melting the machine.
 */

export interface Outcome {
  /** The zone whose gateway received the request. */
  zone: string;
  /** Offsets from the driver's start, ms, when the request was sent and when it finished. */
  startedAt: number;
  at: number;
  /** HTTP status, or 0 when no response arrived (connection refused, reset, timeout). */
  status: number;
  /** Time to first token, ms (successful streams only). */
  ttftMs?: number;
  /** `x-spillway-served-endpoint`: the model server that answered. */
  served?: string;
  /** `x-spillway-attempts`: upstream attempts the gateway made. */
  attempts: number;
  /** Body not completed (stream cut, bad SSE). */
  broken?: boolean;
}

export interface TrafficOptions {
  gateways: Record<string, string>;
  model: string;
  maxTokens: number;
  /** The prompt of the n-th request sent to `zone` (default: a short note, no shared prefix). */
  prompt?: (n: number, zone: string) => string;
  /** Bound on concurrent requests per zone. */
  maxInFlight: number;
  /** Per-request deadline, ms. */
  timeoutMs: number;
  onOutcome: (outcome: Outcome) => void;
  /** Arrivals not sent because `maxInFlight` requests were already out. */
  onShed: (zone: string) => void;
  /** Uniform [0,1) source, for tests. */
  random?: () => number;
}

const TOPICS = ['rivers', 'weirs', 'locks', 'floodgates', 'reservoirs', 'canals', 'dams', 'spillways'];

export class TrafficDriver {
  private readonly agent = new Agent({ keepAlive: true, maxSockets: Infinity });
  private readonly rates = new Map<string, number>();
  private readonly inFlight = new Map<string, number>();
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly requests = new Set<ReturnType<typeof httpRequest>>();
  private readonly random: () => number;
  private t0 = performance.now();
  private stopped = false;
  private seq = 0;

  constructor(private readonly options: TrafficOptions) {
    this.random = options.random ?? Math.random;
    for (const zone of Object.keys(options.gateways)) {
      this.rates.set(zone, 0);
      this.inFlight.set(zone, 0);
    }
  }

  /** Starts the arrivals (at the rates set so far); `now()` counts from here. */
  start(): void {
    this.t0 = performance.now();
    for (const zone of Object.keys(this.options.gateways)) this.schedule(zone);
  }

  /** Milliseconds since `start()` (or construction, before it). */
  now(): number {
    return performance.now() - this.t0;
  }

  setRates(rates: Record<string, number>): void {
    for (const [zone, rate] of Object.entries(rates)) if (this.rates.has(zone)) this.rates.set(zone, Math.max(0, rate));
  }

  inFlightOf(zone: string): number {
    return this.inFlight.get(zone) ?? 0;
  }

  /** Stops sending and aborts every request still out; outcomes are no longer reported. */
  stop(): void {
    this.stopped = true;
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    for (const r of this.requests) r.destroy();
    this.requests.clear();
    this.agent.destroy();
  }

  /**
   * Sends `perZone` requests to each gateway, `concurrency` at a time, and waits for them; their
   * outcomes are not reported. Fresh processes are slow on their first requests (JIT, connections).
   */
  async warmUp(perZone: number, concurrency: number, deadlineMs: number): Promise<void> {
    const deadline = performance.now() + deadlineMs;
    await Promise.all(
      Object.keys(this.options.gateways).flatMap((zone) =>
        Array.from({ length: concurrency }, async (_, lane) => {
          for (let i = lane; i < perZone && performance.now() < deadline && !this.stopped; i += concurrency) {
            await new Promise<void>((resolve) => this.send(zone, () => resolve()));
          }
        }),
      ),
    );
  }

  private schedule(zone: string, previous = this.now()): void {
    if (this.stopped) return;
    const rate = this.rates.get(zone) ?? 0;
    // Exponential inter-arrival times make a Poisson process; at rate 0, look again shortly. Arrival
    // times are absolute, so a late timer (a busy machine) fires its backlog instead of lowering the rate.
    const at = rate > 0 ? previous + (-Math.log(1 - this.random()) * 1000) / rate : this.now() + 100;
    const timer = setTimeout(
      () => {
        this.timers.delete(timer);
        if (rate > 0) this.fire(zone);
        // After a long stall (more than a second behind), drop the backlog rather than burst it.
        this.schedule(zone, Math.max(at, this.now() - 1000));
      },
      Math.max(0, at - this.now()),
    );
    this.timers.add(timer);
  }

  private fire(zone: string): void {
    if (this.stopped) return;
    const current = this.inFlight.get(zone) ?? 0;
    if (current >= this.options.maxInFlight) {
      this.options.onShed(zone);
      return;
    }
    this.inFlight.set(zone, current + 1);
    const startedAt = this.now();
    const done = (outcome: Omit<Outcome, 'zone' | 'at' | 'startedAt'>) => {
      this.inFlight.set(zone, (this.inFlight.get(zone) ?? 1) - 1);
      if (!this.stopped) this.options.onOutcome({ zone, startedAt, at: this.now(), ...outcome });
    };
    this.send(zone, done);
  }

  private send(zone: string, done: (outcome: Omit<Outcome, 'zone' | 'at' | 'startedAt'>) => void): void {
    const n = this.seq++;
    const topic = TOPICS[n % TOPICS.length];
    const body = JSON.stringify({
      model: this.options.model,
      prompt: this.options.prompt?.(n, zone) ?? `Request ${n} from ${zone}: write a short note about ${topic}.`,
      max_tokens: this.options.maxTokens,
      stream: true,
    });
    const started = performance.now();
    let finished = false;
    const finish = (outcome: Omit<Outcome, 'zone' | 'at' | 'startedAt'>) => {
      if (finished) return;
      finished = true;
      this.requests.delete(req);
      done(outcome);
    };
    const req = httpRequest(
      `${this.options.gateways[zone]}/v1/completions`,
      {
        method: 'POST',
        agent: this.agent,
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
        timeout: this.options.timeoutMs,
      },
      (res) => {
        const status = res.statusCode ?? 0;
        const served = header(res.headers['x-spillway-served-endpoint']);
        const attempts = Number(header(res.headers['x-spillway-attempts']) ?? 1) || 1;
        let ttftMs: number | undefined;
        let sawDone = false;
        let buffered = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          if (status !== 200) return;
          buffered += chunk;
          // SSE events end with a blank line; the first event with text is the first token.
          let cut: number;
          while ((cut = buffered.indexOf('\n\n')) >= 0) {
            const event = buffered.slice(0, cut);
            buffered = buffered.slice(cut + 2);
            const data = event.startsWith('data: ') ? event.slice(6) : '';
            if (data === '[DONE]') sawDone = true;
            else if (ttftMs === undefined && data.includes('"text"')) ttftMs = performance.now() - started;
          }
        });
        res.on('end', () => {
          const broken = status === 200 && !sawDone;
          finish({
            status,
            attempts,
            ...(served !== undefined && { served }),
            ...(ttftMs !== undefined && { ttftMs }),
            ...(broken && { broken }),
          });
        });
        const cut = () => finish({ status, attempts, broken: true, ...(served !== undefined && { served }) });
        res.on('error', cut);
        res.on('close', cut); // after 'end' this does nothing
      },
    );
    this.requests.add(req);
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', () => finish({ status: 0, attempts: 0 }));
    req.end(body);
  }
}

function header(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}
