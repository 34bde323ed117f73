import { Rng } from '@spillway/engine';
import type { Epp } from './epps.js';
import type { SimEvent } from './events.js';
import type { Network } from './network.js';
import type { EventQueue } from './queue.js';
import type { ReplicaSet } from './replicas.js';
import type { ResolvedScenario } from './resolve.js';

/** A scrape that gets no answer is abandoned after the per-scrape timeout of the reference EPP (the Gateway API Inference Extension's EPP, now in llm-d). */
const SCRAPE_TIMEOUT_MS = 1000;

/**
 * The scrape path (the reference EPP and the pickers built on it): each picker scrapes every pod
 * it picks among directly, every `scrapeEveryMs` — the request takes half the round trip to the
 * pod, which renders its metrics then (waiting, running, KV use); the reply takes the other half
 * plus the scrape's own time (`scrapeMs`). A pod's next scrape starts a period after the last
 * started, or when its reply came if that was later (a ticker that drops missed ticks). A dead pod
 * refuses (no reading); a lost reply (`lossRate`) is abandoned after the 1 s timeout. No
 * collector or NATS is involved, so their faults do not touch this path.
 */
export class Scraper {
  private readonly rng: Rng;

  constructor(
    private readonly s: ResolvedScenario,
    seed: number,
    private readonly wiring: {
      readonly queue: EventQueue<SimEvent>;
      readonly replicas: ReplicaSet;
      readonly network: Network;
      /** The scraping pickers (filled once they exist). */
      readonly epps: readonly Epp[];
    },
  ) {
    this.rng = new Rng((seed * 31_337 + 19) >>> 0);
  }

  /** t = 0: every picker holds a fresh reading of every pod (as a running EPP would); the scrapes start, phased over the period. */
  start(): void {
    const every = this.s.signals.scrapeEveryMs;
    for (const epp of this.wiring.epps) {
      for (const replica of epp.scope) {
        const r = this.wiring.replicas.get(replica);
        if (r.engine) epp.router.applyScrape?.(replica, { waiting: 0, running: 0, kvUsage: 0, readAt: 0 }, 0);
        const phase = ((replica + 0.5) / this.wiring.replicas.all.length) * every;
        this.begin(epp, replica, phase);
      }
    }
  }

  read(e: SimEvent<'scrape-read'>, now: number): void {
    const epp = this.wiring.epps[e.epp];
    if (!epp) return;
    const r = this.wiring.replicas.get(e.replica);
    const back = this.wiring.network.delay(r.info.zoneIndex, epp.zoneIndex, this.s.signals.scrapeMs, this.rng);
    const engine = r.engine;
    if (!engine) {
      this.wiring.queue.push(now + this.wiring.network.oneWay(r.info.zoneIndex, epp.zoneIndex), {
        kind: 'scrape-reply',
        epp: e.epp,
        replica: e.replica,
        startedAt: e.startedAt,
        sample: undefined,
      });
      return;
    }
    if (this.s.signals.lossRate > 0 && this.rng.next() < this.s.signals.lossRate) {
      this.begin(epp, e.replica, e.startedAt + SCRAPE_TIMEOUT_MS);
      return;
    }
    const lora = engine.config.maxLoras > 0 && this.s.workload.lora ? engine.loraInfo() : undefined;
    const sample = { waiting: engine.waitingCount, running: engine.runningCount, kvUsage: engine.kvUsage, lora, readAt: now };
    this.wiring.queue.push(now + back, { kind: 'scrape-reply', epp: e.epp, replica: e.replica, startedAt: e.startedAt, sample });
  }

  reply(e: SimEvent<'scrape-reply'>, now: number): void {
    const epp = this.wiring.epps[e.epp];
    if (!epp) return;
    if (e.sample) epp.router.applyScrape?.(e.replica, e.sample, now);
    this.begin(epp, e.replica, Math.max(e.startedAt + this.s.signals.scrapeEveryMs, now));
  }

  private begin(epp: Epp, replica: number, startAt: number): void {
    // Past the arrivals, a second more for the requests still being decided.
    if (startAt >= this.s.durationMs + 1000) return;
    const podZone = this.wiring.replicas.get(replica).info.zoneIndex;
    this.wiring.queue.push(startAt + this.wiring.network.oneWay(epp.zoneIndex, podZone), {
      kind: 'scrape-read',
      epp: epp.index,
      replica,
      startedAt: startAt,
    });
  }
}
