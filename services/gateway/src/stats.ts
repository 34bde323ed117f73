// Counters behind GET /gateway/stats, for the demo's table and for tests.

export interface StatsSnapshot {
  requests: number;
  byStatus: Record<string, number>;
  /** Upstream attempts beyond the first, over all requests. */
  retries: number;
  /** Requests served by an entry other than the first of the EPP's list. */
  fallbacks: number;
  /** Destination entries skipped because they are not configured endpoints. */
  unknownSkipped: number;
  servedBy: Record<string, number>;
  /** immediate_response replies from the EPP, by status. */
  eppRejections: Record<string, number>;
  /** EPP unreachable, failed, timed out or broke the protocol, and the request failed closed. */
  eppErrors: number;
  /** Requests that went on without the EPP (failure_mode_allow, or the EPP closed its stream early). */
  eppFailOpen: number;
  /** ext_proc message timeouts (armed only outside FULL_DUPLEX_STREAMED). */
  messageTimeouts: number;
  /** Attempts whose host the fallback policy (round robin over every zone) chose, not the EPP's list. */
  fallbackPicks: number;
  /** Clients that went away before their response was complete. */
  clientAborts: number;
  /** Responses cut short because their upstream failed after the attempt was committed. */
  upstreamResets: number;
}

function bump(map: Record<string, number>, key: string): void {
  map[key] = (map[key] ?? 0) + 1;
}

export class Stats {
  readonly #data: StatsSnapshot = {
    requests: 0,
    byStatus: {},
    retries: 0,
    fallbacks: 0,
    unknownSkipped: 0,
    servedBy: {},
    eppRejections: {},
    eppErrors: 0,
    eppFailOpen: 0,
    messageTimeouts: 0,
    fallbackPicks: 0,
    clientAborts: 0,
    upstreamResets: 0,
  };

  request(): void {
    this.#data.requests++;
  }
  status(code: number): void {
    bump(this.#data.byStatus, String(code));
  }
  attempts(count: number): void {
    if (count > 1) this.#data.retries += count - 1;
  }
  served(endpoint: string, fallback: boolean): void {
    bump(this.#data.servedBy, endpoint);
    if (fallback) this.#data.fallbacks++;
  }
  unknownSkipped(count: number): void {
    this.#data.unknownSkipped += count;
  }
  eppRejection(status: number): void {
    bump(this.#data.eppRejections, String(status));
  }
  eppError(): void {
    this.#data.eppErrors++;
  }
  eppFailOpen(): void {
    this.#data.eppFailOpen++;
  }
  messageTimeout(): void {
    this.#data.messageTimeouts++;
  }
  fallbackPick(): void {
    this.#data.fallbackPicks++;
  }
  clientAbort(): void {
    this.#data.clientAborts++;
  }
  upstreamReset(): void {
    this.#data.upstreamResets++;
  }

  snapshot(): StatsSnapshot {
    return structuredClone(this.#data);
  }
}
