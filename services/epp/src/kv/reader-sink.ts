import type { ReaderSink } from '@spillway/bus';
import type { SpillwayEvent } from '@spillway/events';
import type { Fleet } from '@spillway/fleet';
import type { KvCounters } from './counters.js';
import type { KvIndex } from './index-api.js';

/**
 * The EPP's stream sink: every event goes to the fleet view (which judges its clock and ignores kind
 * `kv`), and a pod's KV snapshot that the view did not refuse as future-dated goes on to the block
 * index too, so a (re)starting EPP replays each pod's cached blocks with the rest of the pool.
 */
export class EppReaderSink implements ReaderSink {
  constructor(
    private readonly fleet: Fleet,
    private readonly index: KvIndex,
    private readonly counters: KvCounters,
  ) {}

  apply(event: SpillwayEvent, receivedAt: number): unknown {
    const outcome = this.fleet.apply(event, receivedAt);
    if (event.kind === 'kv' && outcome !== 'future') {
      this.index.applyKvSnapshot(event, receivedAt);
      this.counters.snapshotsApplied++;
    }
    return outcome;
  }

  recordRejected(): void {
    this.fleet.recordRejected();
  }
}
